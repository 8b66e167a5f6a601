#!/usr/bin/env python3
"""Checks behind bench/results/published-2026-12-02-nscale/NOTES.md (issue 23): the largest
non-Blackwell misses of the published-run corpus, examined before any change.

Prints Markdown tables:
  1. the Ultra-Scale Playbook heatmap (huggingface/nanotron docs/benchmark_summary.svg) cell by
     cell against the corpus's 26 nanotron entries: layout, GAS, MBS, ZeRO, MFU and memory as the
     figure prints them (the SVG keeps each printed string as an XML comment);
  2. the same entries' iteration time x MFU x GPUs per model (nanotron's FLOPs per step over the
     assumed peak: one figure per model if every derivation is consistent);
  3. measured against predicted step time by node count (simulate --published, presets);
  4. the 1.34B model on 64 nodes in other layouts the same sweep could run (predicted only);
  5. the 80B rows' predicted peak memory against rank 0's printed reservation;
  6. MT-NLG 530B against Megatron-LM's PTD-P row of the same model, layout, GPU count and
     cluster (Narayanan et al. SC21 Table 2), both predicted;
  7. one-field sensitivities: MT-NLG's unstated micro-batch, Cisco's TP overlap and step timer.

Run from the repository root (the SVG from a fetched nanotron snapshot):
  git --git-dir=NANOTRON_GIT show c2528430:docs/benchmark_summary.svg > /tmp/benchmark_summary.svg
  python3 bench/scripts/nscale_checks.py build /tmp/benchmark_summary.svg \
      validation/corpus/published_runs.json > bench/results/published-2026-12-02-nscale/checks.md
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

GIB = 1.073741824  # GB per GiB


def simulate(build, entries):
    """Runs simulate --published on `entries`; returns {id: {metric: (measured, predicted)}}."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(entries, f)
        path = f.name
    try:
        out = subprocess.run([os.path.join(build, "tools", "simulate"), "--published", path],
                             capture_output=True, text=True, check=False).stdout
    finally:
        os.unlink(path)
    res, run = {}, None
    ids = {e["id"] for e in entries}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] in ids:
            run = parts[0]
        if run and len(parts) >= 4 and parts[-4] in (
                "iteration_time_s", "tflops_per_gpu", "memory_gb", "tokens_per_s", "mfu"):
            try:
                res.setdefault(run, {})[parts[-4]] = (float(parts[-3]), float(parts[-2]))
            except ValueError:
                pass
    return res


def svg_cells(svg_path):
    """The heatmap's printed strings, in the order matplotlib wrote them."""
    com = [c.strip() for c in re.findall(r"<!--(.*?)-->", open(svg_path).read(), re.S)]
    # MFU and memory alternate ("5.25", "8.40GB", ...) after the first axis labels.
    mfu_mem = []
    for i, c in enumerate(com):
        if c.endswith("GB") and i > 0:
            mfu_mem.append((float(com[i - 1]), float(c[:-2])))
    cfg = []
    i = 0
    while i < len(com):
        if com[i].startswith("DP:"):
            nums = [int(x) for x in re.findall(r"\d+", com[i] + " " + com[i + 1])]
            zero = int(re.findall(r"\d+", com[i + 2])[0])
            cfg.append(dict(dp=nums[0], tp=nums[1], pp=nums[2], gas=nums[3], mbs=nums[4], zero=zero))
            i += 3
        else:
            i += 1
    # Rows from the top (64 nodes) down; four model columns, the 80B absent on 1-2 nodes.
    cells = [(n, m) for n in (64, 32, 16, 8, 4) for m in ("1p34b", "3p57b", "8p86b", "80b")]
    cells += [(n, m) for n in (2, 1) for m in ("1p34b", "3p57b", "8p86b")]
    return [(n, m, c, mm) for (n, m), c, mm in zip(cells, cfg, mfu_mem)]


def main():
    build, svg, corpus_path = sys.argv[1:4]
    corpus = json.load(open(corpus_path))
    by_id = {e["id"]: e for e in corpus}

    print("## 1. The heatmap against the corpus entries\n")
    print("| nodes | model | figure: dp tp pp gas mbs zero | entry: dp tp pp gas mbs zero | "
          "figure MFU % | figure memory GiB | entry memory_gb / 1.0737 | agree |")
    print("|---:|---|---|---|---:|---:|---:|---|")
    nano = []
    for n, m, c, (mfu, mem) in svg_cells(svg):
        e = by_id[f"nanotron_ultrascale_h100_{m}_{n}node"]
        p = e["parallel"]
        gas = p["global_batch"] // (p["dp"] * p["micro_batch"])
        ent = (p["dp"], p["tp"], p["pp"], gas, p["micro_batch"], p["zero_stage"])
        fig = (c["dp"], c["tp"], c["pp"], c["gas"], c["mbs"], c["zero"])
        em = e["measured"]["memory_gb"]
        mem_ok = em is None or abs(em / GIB - mem) < 0.01
        print(f"| {n} | {m} | {' '.join(map(str, fig))} | {' '.join(map(str, ent))} | {mfu:.2f} | "
              f"{mem:.2f} | {'-' if em is None else f'{em / GIB:.2f}'} | "
              f"{'yes' if fig == ent and mem_ok else 'NO'} |")
        nano.append((n, m, mfu, mem, e))

    print("\n## 2. iteration time x MFU x GPUs per model (one value per model if consistent)\n")
    print("| model | min (s x GPU) | max (s x GPU) | spread |")
    print("|---|---:|---:|---:|")
    for m in ("1p34b", "3p57b", "8p86b", "80b"):
        v = [e["measured"]["iteration_time_s"] * mfu / 100 * e["hardware"]["num_gpus"]
             for (_, mm, mfu, _, e) in nano if mm == m]
        print(f"| {m} | {min(v):.3f} | {max(v):.3f} | {max(v) / min(v) - 1:+.2%} |")

    print("\n## 3. nanotron: measured against predicted step time (presets)\n")
    res = simulate(build, [e for (_, _, _, _, e) in nano])
    print("| nodes | model | layout | measured s | predicted s | measured - predicted s | "
          "measured / predicted |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for (n, m, _, _, e) in sorted(nano, key=lambda r: (r[0], r[1])):
        me, pr = res[e["id"]]["iteration_time_s"]
        p = e["parallel"]
        lay = f"tp{p['tp']} pp{p['pp']} dp{p['dp']} z{p['zero_stage']} mbs{p['micro_batch']}"
        print(f"| {n} | {m} | {lay} | {me:.4f} | {pr:.4f} | {me - pr:+.4f} | {me / pr:.2f} |")

    print("\n## 4. 1.34B on 64 nodes: the model's step in other layouts (gbs 256)\n")
    base = by_id["nanotron_ultrascale_h100_1p34b_64node"]
    variants = []
    for tp, pp, dp, mbs, z in [(2, 2, 128, 2, 1), (4, 1, 128, 2, 1), (4, 1, 128, 2, 0),
                               (2, 1, 256, 1, 1), (8, 1, 64, 4, 0), (4, 2, 64, 4, 1)]:
        v = copy.deepcopy(base)
        v["id"] = f"tp{tp}_pp{pp}_dp{dp}_mbs{mbs}_z{z}"
        q = v["parallel"]
        q.update(tp=tp, pp=pp, dp=dp, micro_batch=mbs, zero_stage=z)
        if pp == 1:
            q.pop("layers_per_stage", None)
        if z == 0:  # nanotron builds DDP (overlapped fp32 all-reduce, bucket copy)
            v.pop("zero1_collectives", None)
            q["overlap_grad_reduce"] = True
            v["ddp_bucket_copy"] = True
        variants.append(v)
    res = simulate(build, variants)
    print("| layout | predicted s | note |")
    print("|---|---:|---|")
    for v in variants:
        note = "the figure's cell (measured 0.3810 s)" if v["id"] == "tp2_pp2_dp128_mbs2_z1" else ""
        print(f"| {v['id']} | {res[v['id']]['iteration_time_s'][1]:.4f} | {note} |")

    print("\n## 5. nanotron 80B: predicted peak memory against rank 0's printed reservation\n")
    rows = []
    for (n, m, mfu, mem, e) in nano:
        if m == "80b":
            v = copy.deepcopy(e)
            v["measured"]["memory_gb"] = mem * GIB
            rows.append(v)
    res = simulate(build, rows)
    print("| nodes | layout | rank 0 reserved (GB) | predicted peak (GB, all ranks) | step error |")
    print("|---:|---|---:|---:|---:|")
    for v in rows:
        p = v["parallel"]
        me, pr = res[v["id"]]["memory_gb"]
        tm, tp_ = res[v["id"]]["iteration_time_s"]
        print(f"| {v['hardware']['num_gpus'] // 8} | tp{p['tp']} pp{p['pp']} dp{p['dp']} "
              f"z{p['zero_stage']} | {me:.2f} | {pr:.2f} | {tm / tp_ - 1:+.1%} (throughput) |")

    print("\n## 6. MT-NLG 530B against Megatron-LM PTD-P, same model and layout on 2,240 A100\n")
    ids = ["megatron2021_t2_ptdp_530B_2240gpu", "mtnlg530b_2240gpu"]
    res = simulate(build, [by_id[i] for i in ids])
    print("| run | framework | tp pp dp mbs gbs | measured TFLOP/s | predicted TFLOP/s | error |")
    print("|---|---|---|---:|---:|---:|")
    for i in ids:
        e = by_id[i]
        p = e["parallel"]
        me, pr = res[i]["tflops_per_gpu"]
        print(f"| {i} | {e['family']['framework']} | {p['tp']} {p['pp']} {p['dp']} "
              f"{p['micro_batch'] or '1 (assumed)'} {p['global_batch']} | {me:.1f} | {pr:.1f} | "
              f"{pr / me - 1:+.1%} |")

    print("\n## 7. One-field sensitivities (not applied)\n")
    sens = []
    v = copy.deepcopy(by_id["mtnlg530b_2240gpu"])
    v["id"] = "mtnlg530b_2240gpu with micro_batch 2"
    v["parallel"]["micro_batch"] = 2
    sens.append(v)
    v = copy.deepcopy(by_id["mlperf51_cisco_llama31_8b_128gpu_h100_fp8"])
    v["id"] = "cisco_128gpu with tp_comm_overlap false"
    v["parallel"]["tp_comm_overlap"] = False
    sens.append(v)
    v = copy.deepcopy(by_id["mlperf51_cisco_llama31_8b_128gpu_h100_fp8"])
    v["id"] = "cisco_128gpu against its step timer (0.485 s)"
    v["measured"]["iteration_time_s"] = 0.485
    v["measured"]["tokens_per_s"] = None
    sens.append(v)
    base_ids = ["mtnlg530b_2240gpu", "mlperf51_cisco_llama31_8b_128gpu_h100_fp8",
                "mlperf51_cisco_llama31_8b_64gpu_h100_fp8"]
    for v in sens:
        v["id"] = v["id"].replace(" ", "_").replace("(", "").replace(")", "")
    res = simulate(build, sens + [by_id[i] for i in base_ids])
    print("| run | measured s | predicted s | throughput error |")
    print("|---|---:|---:|---:|")
    for i in base_ids + [v["id"] for v in sens]:
        me, pr = res[i]["iteration_time_s"]
        print(f"| {i} | {me:.4f} | {pr:.4f} | {me / pr - 1:+.1%} |")


if __name__ == "__main__":
    main()
