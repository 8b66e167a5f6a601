#!/usr/bin/env python3
"""How much torch.distributed.pipelining's lock-step execution of its interleaved order costs
over playing the same order event by event (study bench/results/published-2026-12-02-fsdp).

PipelineScheduleMulti._step_microbatches (PyTorch 2.5-2.6, what torchtitan's Interleaved1F1B ran)
walks a per-rank list of time steps (pipeline_order, with empty steps for the bubbles): each step
runs its action, then batches this step's send and the receives for the neighbours' actions at the
same step and waits for them (`_batch_p2p(ops).wait()`), so a rank's step ends when its own and
its paired neighbours' actions of that step have ended. The order below follows
_calculate_single_rank_operations: warm-up (v - 1) * pp + 2 * (pp - 1 - rank) forwards capped at
m * v, forwards cycling the local chunks every pp micro-batches, backwards in reverse, `rank` empty
steps first and the post-warm-up padding of its formula.

Usage: torch_interleaved_ticks.py PP V M F B
  F, B: one chunk's forward and backward time (any unit; B with the recompute under full AC).
Prints the lock-step time, the event-by-event time of the same order, and their ratio.
No test: a study's arithmetic, run by hand (see the study's NOTES.md)."""
import sys
from collections import defaultdict


def interleaved_order(pp, v, m):
    orders = {}
    for rank in range(pp):
        warm = min((v - 1) * pp + 2 * (pp - 1 - rank), m * v)
        steady = m * v - warm
        fwd_chunk = lambda k: ((k // pp) % v) * pp + rank
        bwd_chunk = lambda k: (v - 1 - ((k - warm) // pp) % v) * pp + rank
        pad = (v * pp + 2 * (pp - 1 - rank)) - (warm + rank) - 1
        ops = [None] * rank
        fmb, bmb = defaultdict(int), defaultdict(int)

        def add(kind, stage, counter):
            ops.append((kind, stage, counter[stage]))
            counter[stage] += 1

        for k in range(warm + steady + warm):
            if k < warm:
                add("F", fwd_chunk(k), fmb)
                if k == warm - 1:
                    ops.extend([None] * pad)
            elif k < warm + steady:
                add("F", fwd_chunk(k), fmb)
                add("B", bwd_chunk(k), bmb)
                if k == warm + steady - 1:
                    ops.extend([None] * pad)
            else:
                add("B", bwd_chunk(k), bmb)
        orders[rank] = ops
    return orders


def lock_step_time(orders, pp, v, dur):
    stages = pp * v
    steps = max(len(o) for o in orders.values())
    at = lambda r, t: orders[r][t] if t < len(orders[r]) else None
    end = [0.0] * pp
    for t in range(steps):
        done = [end[r] + (dur(at(r, t)) if at(r, t) else 0.0) for r in range(pp)]
        nxt = []
        for r in range(pp):
            prev, succ = (r - 1) % pp, (r + 1) % pp
            peers = []
            a = at(r, t)
            if a and a[0] == "F" and a[1] + 1 < stages:
                peers.append(succ)
            if a and a[0] == "B" and a[1] > 0:
                peers.append(prev)
            p = at(prev, t)
            if p and p[0] == "F" and p[1] + 1 < stages:
                peers.append(prev)
            n = at(succ, t)
            if n and n[0] == "B" and n[1] > 0:
                peers.append(succ)
            nxt.append(max([done[r]] + [done[q] for q in peers]))
        end = nxt
    return max(end)


def event_time(orders, pp, v, dur):
    stages = pp * v
    seqs = {r: [a for a in orders[r] if a] for r in range(pp)}
    idx, free, done = {r: 0 for r in range(pp)}, {r: 0.0 for r in range(pp)}, {}
    moved = True
    while moved:
        moved = False
        for r in range(pp):
            while idx[r] < len(seqs[r]):
                kind, stage, mb = seqs[r][idx[r]]
                dep = None
                if kind == "F" and stage > 0:
                    dep = ("F", stage - 1, mb)
                elif kind == "B":
                    dep = ("B", stage + 1, mb) if stage < stages - 1 else ("F", stage, mb)
                if dep and dep not in done:
                    break
                start = max(free[r], done[dep] if dep else 0.0)
                free[r] = done[(kind, stage, mb)] = start + dur((kind, stage, mb))
                idx[r] += 1
                moved = True
    return max(free.values())


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    pp, v, m = (int(x) for x in sys.argv[1:4])
    f, b = float(sys.argv[4]), float(sys.argv[5])
    orders = interleaved_order(pp, v, m)
    dur = lambda a: f if a[0] == "F" else b
    tick, event = lock_step_time(orders, pp, v, dur), event_time(orders, pp, v, dur)
    print(f"lock-step {tick:.3f}  event by event {event:.3f}  ratio {tick / event:.3f}")


if __name__ == "__main__":
    main()
