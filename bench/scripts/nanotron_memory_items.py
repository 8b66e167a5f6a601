#!/usr/bin/env python3
"""What the model leaves out of nanotron's memory, run by run (issue 23, study
bench/results/published-2026-11-25-nanotron).

Usage: nanotron_memory_items.py CORPUS SIMULATE_JSON > memory_items.md
  CORPUS         validation/corpus/published_runs.json
  SIMULATE_JSON  build/tools/simulate --published CORPUS --family nanotron --json

For each nanotron run with a measured memory figure (pp = 1, rank 0 = every rank) it prints the
measured figure (caching-allocator RESERVED peak, see the study's NOTES), the simulator's
predicted peak, and three items nanotron 0.5 holds that the model does not count, each from
nanotron's code at e24d2483 (the benchmark branch):
  ddp   PyTorch DDP's gradient buckets: DistributedDataParallel is built without
        gradient_as_bucket_view (trainer.py), so the Reducer keeps its own bucket copy of every
        gradient in the parameters' precision, 2 bytes per parameter, for the whole run
        (PyTorch's DDP documentation: gradient_as_bucket_view 'can reduce peak memory usage,
        where the saved memory size will be equal to the total gradients size').
  ce    the loss at the end of the forward: the bf16 logits, their fp32 copy
        (sharded_cross_entropy(..., dtype=torch.float), models/llama.py Loss) and the fp32
        shifted/exponentiated/normalised tensor the Function keeps (tensor_parallel/functional.py
        _ShardedCrossEntropy) are alive at once: 2 + 4 + 4 bytes per logit where the model
        counts the kept softmax, 4: 6 bytes per logit more.
  glu   eager SwiGLU (models/llama.py GLUActivation: act(gate) * up): autograd's mul keeps
        silu's output for the up projection's gradient, one inner-width tensor per layer more
        than the fused count (the model's elementwise=eager term), on one micro-batch in flight.
Run on the corpus before the entries named them (Plan::ddp_bucket_copy, cross_entropy cast,
elementwise eager-swiglu), it computes the three items by hand beside the simulator's prediction;
with the entries naming them the simulator's own prediction adds the same amounts (the study's
NOTES checks it). The remainder is what the items do not explain (allocator slack,
fragmentation, temporaries).
"""
import json
import sys

GB = 1e9


def params_per_rank(m, tp):
    h, f, v, layers = m['hidden'], m['ffn_hidden'], m['vocab'], m['layers']
    kv = m.get('kv_heads') or m['heads']
    head_dim = h // m['heads']
    attn = h * h * 2 + 2 * h * kv * head_dim  # q, o and k, v
    layer = attn + 3 * h * f + 2 * h
    emb = v * h * (1 if m.get('tied_embeddings') else 2)
    return (layers * layer + emb + h) / tp


def main():
    corpus = {r['id']: r for r in json.load(open(sys.argv[1]))}
    sim = json.load(open(sys.argv[2]))['runs']
    rows = []
    for run in sim:
        mem = next((x for x in run['metrics'] if x['name'] == 'memory_gb'), None)
        if mem is None:
            continue
        e = corpus[run['id']]
        m, p = e['model'], e['parallel']
        tp = p['tp']
        tokens = p['micro_batch'] * m['seq_len']
        P = params_per_rank(m, tp)
        ddp = 2.0 * P / GB
        ce = 6.0 * tokens * m['vocab'] / tp / GB
        glu = m['layers'] * tokens * m['ffn_hidden'] / tp * 2.0 / GB
        items = ddp + ce + glu
        rest = mem['measured'] - mem['predicted'] - items
        rows.append((run['id'].replace('nanotron_ultrascale_h100_', ''),
                     f"tp{tp} dp{p['dp']} z{p['zero_stage']} mbs{p['micro_batch']}",
                     mem['measured'], mem['predicted'], ddp, ce, glu,
                     mem['predicted'] + items, rest))
    print('| run | layout | measured GB | predicted | ddp | ce | glu | predicted + items | '
          'error before | error with items | unexplained |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for r in rows:
        name, lay, meas, pred, ddp, ce, glu, withi, rest = r
        print(f'| {name} | {lay} | {meas:.2f} | {pred:.2f} | {ddp:.2f} | {ce:.2f} | {glu:.2f} | '
              f'{withi:.2f} | {pred / meas - 1:+.1%} | {withi / meas - 1:+.1%} | '
              f'{rest:.2f} ({rest / meas:.0%}) |')
    errs_before = sorted(abs(r[3] / r[2] - 1) for r in rows)
    errs_after = sorted(abs(r[7] / r[2] - 1) for r in rows)
    mid = len(rows) // 2
    med = lambda xs: (xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2)
    print()
    print(f'{len(rows)} runs; median absolute error {med(errs_before):.1%} as predicted, '
          f'{med(errs_after):.1%} with the three items added by hand.')


if __name__ == '__main__':
    main()
