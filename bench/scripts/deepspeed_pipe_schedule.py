#!/usr/bin/env python3
"""DeepSpeed's pipeline schedule against Megatron-LM's 1F1B, with blocking rendezvous p2p.

Replays, per pipeline stage, the command order of each framework and times it with one rule: a
message (a micro-batch's activation or its gradient across one stage boundary) completes when
both ends have posted it, plus a transfer time C (NCCL send/recv of a tensor larger than its
buffers waits for the peer); a stage's next command starts when its previous one completed.
Compute is F per forward and B per backward (B includes the recompute with full recomputation).

- Megatron-LM (megatron/schedules.py forward_backward_pipelining_without_interleaving, 2021-22):
  warm-up forwards, then F; send_forward_recv_backward (one batched op); B;
  send_backward_recv_forward; cool-down backwards.
- DeepSpeed (deepspeed/runtime/pipe/schedule.py TrainSchedule.steps, v0.3-v0.6, and
  runtime/pipe/p2p.py send/recv, blocking): 2(M+S-1) steps; a forward step runs RecvActivation
  then SendGrad (of the previous step's backward), a backward step SendActivation (of the
  previous step's forward) then RecvGrad, each a separate blocking op, then the compute.

Prints both step times and their ratio for the settings of the DeepSpeed families in the corpus
(BLOOM: S 12, M 128 / 24 / 1; MT-NLG: S 35, M 240; GPT-NeoX: S 4, M 32) at a few C/F ratios.
Run by hand (bench/results/published-2026-11-25-deepspeed/NOTES.md reads its output); no test:
it is a diagnosis that decided no schedule change was warranted.
Usage: deepspeed_pipe_schedule.py
"""


def run(progs, c):
    """Step time of per-stage programs: ('C', t) compute, ('G', [keys]) blocking message group."""
    stages = len(progs)
    t = [0.0] * stages
    pc = [0] * stages
    posted = {}
    while True:
        moved = False
        for s in range(stages):
            while pc[s] < len(progs[s]):
                op = progs[s][pc[s]]
                if op[0] == 'C':
                    t[s] += op[1]
                    pc[s] += 1
                    moved = True
                    continue
                for k in op[1]:
                    posted.setdefault(k, {})[s] = t[s]
                if all(len(posted[k]) == 2 for k in op[1]):
                    t[s] = max(max(posted[k].values()) for k in op[1]) + c
                    pc[s] += 1
                    moved = True
                    continue
                break
        if all(pc[s] == len(progs[s]) for s in range(stages)):
            return max(t)
        if not moved:
            raise RuntimeError('deadlock')


def megatron(S, M, f, b):
    progs = []
    for s in range(S):
        p, w, first, last = [], min(S - s - 1, M), s == 0, s == S - 1
        act = lambda st, m: ('a', st, m)   # activation of m from stage st to st+1
        grad = lambda st, m: ('g', st, m)  # gradient of m from stage st to st-1
        grp = lambda ks: [('G', ks)] if ks else []
        fi = bi = 0
        for _ in range(w):
            p += grp([] if first else [act(s - 1, fi)]) + [('C', f)] + grp([] if last else [act(s, fi)])
            fi += 1
        for i in range(M - w):
            if i == 0:
                p += grp([] if first else [act(s - 1, fi)])
            p += [('C', f)] + grp([] if last else [act(s, fi), grad(s + 1, bi)])
            fi += 1
            p += [('C', b)]
            if i == M - w - 1:
                p += grp([] if first else [grad(s, bi)])
            else:
                p += grp([] if first else [grad(s, bi), act(s - 1, fi)])
            bi += 1
        for _ in range(w):
            p += grp([] if last else [grad(s + 1, bi)]) + [('C', b)] + grp([] if first else [grad(s, bi)])
            bi += 1
        progs.append(p)
    return progs


def deepspeed(S, M, f, b):
    progs = []
    even = lambda x: x % 2 == 0
    valid = lambda m: 0 <= m < M
    for s in range(S):
        p, prev = [], -1
        for step in range(2 * (M + S - 1)):
            if even(step) == even(s):
                fwd = True
                mb = (step // 2 if even(step) else (step - 1) // 2) - s // 2
            else:
                fwd = False
                mb = (step // 2 - S + (s + 1) // 2) if even(step) else ((step - 1) // 2 - S + 1 + s // 2)
            if fwd:
                if valid(mb) and s > 0:
                    p.append(('G', [('a', s - 1, mb)]))
                if valid(prev) and s > 0:
                    p.append(('G', [('g', s, prev)]))
            else:
                if valid(prev) and s < S - 1:
                    p.append(('G', [('a', s, prev)]))
                if valid(mb) and s < S - 1:
                    p.append(('G', [('g', s + 1, mb)]))
            if valid(mb):
                p.append(('C', f if fwd else b))
            prev = mb
        progs.append(p)
    return progs


def main():
    print('| S | M | C/F | Megatron 1F1B | DeepSpeed TrainSchedule | ratio |')
    print('|---:|---:|---:|---:|---:|---:|')
    for S, M in [(12, 128), (12, 24), (12, 1), (35, 240), (4, 32)]:
        for c in (0.0, 0.05, 0.1):
            a = run(megatron(S, M, 1.0, 3.0), c)
            d = run(deepspeed(S, M, 1.0, 3.0), c)
            print(f'| {S} | {M} | {c} | {a:.1f} | {d:.1f} | {d / a:.3f} |')


if __name__ == '__main__':
    main()
