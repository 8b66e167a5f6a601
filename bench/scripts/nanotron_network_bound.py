#!/usr/bin/env python3
"""How fast the network must have been for a published nanotron run to finish its step, against
the collective benchmark its source published for the same cluster.

For every Ultra-Scale Playbook run on 16+ nodes: the bytes of data-parallel gradient (and, with
ZeRO-1, parameter) traffic that must leave each node in one step, as nanotron's code issues it at
e24d2483 (ZeRO-0: DDP's fp32 all-reduce; ZeRO-1 with fp32 accumulation: an fp32 all-reduce of the
whole gradient buffer, then the bf16 parameter all-gather), divided by the measured step time: a
lower bound on the node's achieved egress (the DP traffic alone, as if it filled the whole step).
Beside it, the node egress the playbook's own all-reduce benchmark implies at that node count:
nccl-tests' busbw = algbw * 2(n-1)/n, and a two-level all-reduce of S bytes over N nodes of 8 ranks
sends 2(N-1)/N * S out of each node, so egress = busbw * (N-1)/N * n/(n-1).

nanotron places ranks (pp, dp, tp) with tp fastest (parallel/context.py at e24d2483), so a DP group
has k = min(dp, 8/tp) ranks in a node (1 when tp >= 8) and spans N = dp/k nodes. In a two-level
collective of S bytes per rank each GPU sends its 1/k share across nodes: all-reduce
2(N-1)/N * S/k, all-gather (N-1)/N * S/k; every GPU of the node is in one DP group, so the node
sends 8 times that (the intra-node part stays on NVLink).

Run: python3 bench/scripts/nanotron_network_bound.py validation/corpus/published_runs.json
"""
import json
import sys

# The playbook's all-reduce bus bandwidth on this cluster, 256 MB, by node count (the entries'
# notes quote the figure; GB/s).
BENCH_BUSBW = {1: 436, 4: 160, 8: 100, 16: 85, 32: 65, 64: 33}
GPUS_PER_NODE = 8


def stage_layers(run):
    p = run["parallel"]
    if p.get("layers_per_stage"):
        return p["layers_per_stage"]
    return [run["model"]["layers"] // p["pp"]] * p["pp"]


def params_per_rank(run):
    """Parameters of the rank with the most, counted as nanotron shards them over tp."""
    m, p = run["model"], run["parallel"]
    h, f, v = m["hidden"], m["ffn_hidden"], m["vocab"]
    kv = m.get("kv_heads", m["heads"])
    layer = (2 + 2 * kv / m["heads"]) * h * h + 3 * h * f
    layers = stage_layers(run)
    best = 0.0
    for s, n in enumerate(layers):
        x = n * layer
        if s == 0:
            x += v * h                       # embedding
        if s == len(layers) - 1 and (not m.get("tied_embeddings") or len(layers) > 1):
            x += v * h                       # LM head (tied copy on another stage counts too)
        best = max(best, x / p["tp"])
    return best


def main(path):
    runs = json.load(open(path))
    rows = []
    for r in runs:
        if r["family"]["framework"] != "nanotron":
            continue
        p = r["parallel"]
        nodes = r["hardware"]["num_gpus"] // GPUS_PER_NODE
        if nodes < 16:
            continue
        dp, z = p["dp"], p["zero_stage"]
        per_node = min(dp, GPUS_PER_NODE // p["tp"]) if p["tp"] < GPUS_PER_NODE else 1
        dp_nodes = dp // per_node
        n_params = params_per_rank(r)
        f = (dp_nodes - 1) / dp_nodes
        egress = GPUS_PER_NODE * 2 * f * n_params * 4 / per_node    # fp32 all-reduce
        if z == 1:
            egress += GPUS_PER_NODE * f * n_params * 2 / per_node   # bf16 parameter gather
        step = r["measured"]["iteration_time_s"]
        need = egress / step / 1e9
        n = nodes * GPUS_PER_NODE
        bench = BENCH_BUSBW.get(nodes)
        bench_egress = bench * (nodes - 1) / nodes * n / (n - 1)
        rows.append((r["id"].replace("nanotron_ultrascale_h100_", ""), nodes, p["tp"], p["pp"], dp,
                     z, per_node, n_params / 1e9, egress / 1e9, step, need, bench_egress,
                     egress / 1e9 / bench_egress))
    print("| run | nodes | tp | pp | dp | ZeRO | DP ranks per node | params per rank (B) | "
          "DP bytes out of each node (GB) | measured step (s) | egress needed (GB/s) | "
          "benchmark's egress (GB/s) | DP time at the benchmark's rate (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print("| %s | %d | %d | %d | %d | %d | %d | %.2f | %.1f | %.3f | %.1f | %.1f | %.2f |" % row)


if __name__ == "__main__":
    main(sys.argv[1])
