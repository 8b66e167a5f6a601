"""Read MLPerf Training result logs (:::MLLOG lines) from a fetched mirror with git show.

Step time per block between evaluations: block_start -> block_stop (evaluation excluded).
Steps per block from the block metadata:
  - 'step' in block_start/block_stop metadata (v5.1): stop.step - start.step (in samples or steps, see below)
  - 'samples_count' at block_start (v5.0): next block's count - this one's, / GBS
  - 'epoch_count' in tokens (v3.1/v4.x): next block's count - this one's, / (GBS x seq)
"""
import json, subprocess, statistics

def git_show(repo, rev, path):
    return subprocess.run(['git', '-C', repo, 'show', f'{rev}:{path}'], capture_output=True,
                          text=True, check=True).stdout

def events(text):
    out = []
    for line in text.splitlines():
        i = line.find(':::MLLOG')
        if i < 0:
            continue
        try:
            out.append(json.loads(line[i + 8:]))
        except json.JSONDecodeError:
            pass
    return out

def first(ev, key):
    for e in ev:
        if e['key'] == key:
            return e['value']
    return None

def blocks(ev):
    """[(t_start_ms, t_stop_ms, start_meta, stop_meta)] in order."""
    res, cur = [], None
    for e in ev:
        if e['key'] == 'block_start':
            cur = (e['time_ms'], e.get('metadata', {}))
        elif e['key'] == 'block_stop' and cur is not None:
            res.append((cur[0], e['time_ms'], cur[1], e.get('metadata', {})))
            cur = None
    return res

def tracked(ev, name):
    return [(e.get('metadata', {}).get('step'), e['value'][name]) for e in ev
            if e['key'] == 'tracked_stats' and isinstance(e['value'], dict) and name in e['value']]

def block_step_times(ev):
    """Per-block seconds per step, with the method used."""
    gbs = first(ev, 'global_batch_size')
    seq = first(ev, 'max_sequence_length')
    bl = blocks(ev)
    out = []
    for i, (t0, t1, m0, m1) in enumerate(bl):
        steps = None
        if 'step' in m0 and 'step' in m1 and m1['step'] != m0['step']:
            steps = m1['step'] - m0['step']
            method = 'block metadata step (stop - start)'
        elif 'samples_count' in m0:
            if i + 1 < len(bl) and 'samples_count' in bl[i + 1][2]:
                steps = (bl[i + 1][2]['samples_count'] - m0['samples_count']) / gbs
                method = 'samples_count at the next block_start less this one, / GBS'
        elif 'epoch_count' in m0 and 'first_epoch_num' in m0:
            steps = m0['epoch_count'] / (gbs * seq)
            method = 'block_start epoch_count (the block length in tokens) / (GBS x seq)'
        elif 'epoch_count' in m0:
            if i + 1 < len(bl) and 'epoch_count' in bl[i + 1][2]:
                steps = (bl[i + 1][2]['epoch_count'] - m0['epoch_count']) / (gbs * seq)
                method = 'epoch_count (tokens) at the next block_start less this one, / (GBS x seq)'
        if steps:
            out.append(((t1 - t0) / 1000.0 / steps, steps, method))
    return out

def summarize(repo, rev, paths):
    per_log = []
    for p in paths:
        ev = events(git_show(repo, rev, p))
        status = None
        for e in ev:
            if e['key'] == 'run_stop':
                status = e.get('metadata', {}).get('status')
        bst = block_step_times(ev)
        times = [b[0] for b in bst]
        per_log.append(dict(
            path=p, status=status, gbs=first(ev, 'global_batch_size'),
            ga=first(ev, 'gradient_accumulation_steps'), seq=first(ev, 'max_sequence_length'),
            nblocks=len(times), steps=sorted(set(b[1] for b in bst)),
            method=bst[0][2] if bst else None,
            median=statistics.median(times) if times else None,
            min=min(times) if times else None, max=max(times) if times else None,
            timer=[v for _, v in tracked(ev, 'train_step_time')] + [v for _, v in tracked(ev, 'train_step_timing')],
            mem=[v for _, v in tracked(ev, 'max_memory_usage')],
            ev=ev))
    return per_log
