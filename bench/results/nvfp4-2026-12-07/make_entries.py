#!/usr/bin/env python3
"""Draft corpus entries for the nine MLPerf Training v5.1 Llama 3.1 8B NVFP4 runs on B200.

Reads the mlcommons/training_results_v5.1 mirror at 441d65f4 (git show), derives
iteration_time_s exactly as the mlperf51_uf_* entries do (median over the result logs of
each log's median block time / steps per block), quotes file:line for every setting, and
writes entries.json + scan.txt to OUT_DIR (argument; default the current directory).
Usage: MLPERF_V51_GIT_DIR=<bare clone> make_entries.py [OUT_DIR]  No network, no build.
"""
import json, os, re, statistics, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from mllog import RunFacts, printed_config, records  # noqa: E402

# A bare clone of github.com/mlcommons/training_results_v5.1 (containing commit 441d65f4).
GIT_DIR = os.environ.get("MLPERF_V51_GIT_DIR", "training_results_v5.1.git")
COMMIT = "441d65f4"
HERE = os.path.dirname(os.path.abspath(__file__))
# Where entries.json and scan.txt go: the first argument, else the current directory.
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
CORPUS = os.path.join(HERE, "..", "..", "..", "validation", "corpus", "published_runs.json")


def git(*args):
    return subprocess.run(["git", "--git-dir=" + GIT_DIR, *args], check=True,
                          capture_output=True, text=True).stdout


def show(path):
    return git("show", f"{COMMIT}:{path}")


def ls(prefix):
    return [p for p in git("ls-tree", "-r", "--name-only", COMMIT, prefix).splitlines()]


def find_line(path, regex, text=None):
    """Return (lineno, stripped line) of the first line matching regex."""
    text = show(path) if text is None else text
    for i, line in enumerate(text.splitlines(), 1):
        if re.search(regex, line):
            return i, line.strip()
    return None, None


def q(path, regex, short=None):
    """'short:N `line`' quote for a config line."""
    n, line = find_line(path, regex)
    if n is None:
        raise SystemExit(f"not found: {regex} in {path}")
    return f"{short or os.path.basename(path)}:{n} `{line}`"


# --------------------------------------------------------------------------------------
# The nine runs: where each one's logs, configs and system description sit in the results
# repository (runs.json beside this script).
RUNS = json.load(open(os.path.join(HERE, "runs.json")))



def parse_log(text):
    blocks, starts, seen = [], {}, set()
    facts = RunFacts()
    for k, time_ms, md, value in records(text):
        if k == "block_start":
            st = md.get("step")
            if ("s", st) in seen:          # some logs repeat MLLOG lines per rank
                continue
            seen.add(("s", st)); starts[st] = time_ms
        elif k == "block_stop":
            st = md.get("step")
            if ("e", st) in seen:
                continue
            seen.add(("e", st))
            # pair with the latest start before it
            s0 = max(s for s in starts if s < st)
            blocks.append((time_ms - starts[s0], st - s0))
        else:
            facts.take(k, md, value)
    per_step = [ms / 1000.0 / n for ms, n in blocks]
    spb = sorted({n for _, n in blocks})
    return dict(per_step=per_step, steps_per_block=spb, **facts.as_dict())


CFG_KEYS = ["tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "sequence_parallel", "micro_batch_size", "global_batch_size", "fp8", "fp4", "fp4_recipe",
            "first_last_layers_bf16", "fp8_dot_product_attention", "use_distributed_optimizer",
            "overlap_grad_reduce", "overlap_param_gather", "fp8_param_gather", "enable_cuda_graph",
            "cuda_graph_scope"]


def logged_config(text):
    out = printed_config(text, CFG_KEYS)
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        for tag, rx in [("dlpal", r"^\s*:::DLPAL "), ("fp4_type", r"fp4='e2m1'"),
                        ("ddp", r"DistributedDataParallelConfig\(grad_reduce_in_fp32=False"),
                        ("graphs", r"Creating \d+ CUDA graphs"),
                        ("fp8dpa_tc", r"fp8_dot_product_attention=True")]:
            if tag not in out and re.search(rx, line):
                out[tag] = (i, line.strip()[:160])
    return out


def graphs_txt(lc):
    return re.search(r"Creating \d+ CUDA graphs", lc["graphs"][1]).group(0)


def r4(x):
    return round(x, 4)


def main():
    corpus = json.load(open(CORPUS))
    uf = next(e for e in corpus if e["id"] == "mlperf51_uf_llama31_8b_8gpu_b200_fp8")
    existing = {e["id"] for e in corpus} - {R["id"] for R in RUNS}  # re-runs regenerate these
    entries, scan = [], []
    for R in RUNS:
        logs = sorted([p for p in ls(R["results"] + "/") if re.search(r"/result_\d+\.txt$", p)],
                      key=lambda p: int(re.search(r"result_(\d+)", p).group(1)))
        texts = {p: show(p) for p in logs}
        per = {}
        for p, t in texts.items():
            per[p] = parse_log(t)
        names = [os.path.basename(p) for p in logs]
        meds = [statistics.median(per[p]["per_step"]) for p in logs]
        step = statistics.median(meds)
        tmeds = [statistics.median(per[p]["tst"]) for p in logs]
        gbs = {per[p]["gbs"] for p in logs}; ga = {per[p]["ga"] for p in logs}
        seq = {per[p]["seq"] for p in logs}; status = {per[p]["status"] for p in logs}
        spb = sorted({n for p in logs for n in per[p]["steps_per_block"]})
        assert len(gbs) == 1 and len(ga) == 1 and len(spb) == 1, (R["id"], gbs, ga, spb)
        GBS, GA, SPB = gbs.pop(), int(ga.pop()), spb[0]
        tok = round(GBS * 8192 / step)
        first_log = logs[0]; fl = os.path.basename(first_log)
        lc = logged_config(texts[first_log])

        cfgp = f"{R['cfgdir']}/{R['cfg']}"
        cd = R["cfgdir"]
        mbs = int(re.search(r"MICRO_BATCH_SIZE=(\d+)", show(cfgp)).group(1))
        dp = R["gpus"]
        assert dp * mbs * GA == GBS, (R["id"], dp, mbs, GA, GBS)

        # ---- quotes from config files (all in the run's own config folder)
        c = lambda rx: q(cfgp, rx, R["cfg"])
        cc = lambda rx: q(f"{cd}/config_common.sh", rx)
        c4 = lambda rx: q(f"{cd}/config_common_fp4.sh", rx)
        c8 = lambda rx: q(f"{cd}/config_common_8b.sh", rx)
        cg = lambda rx: q(f"{cd}/config_common_cg.sh", rx)
        ca = lambda rx: q(f"{cd}/config_common_fp8attn.sh", rx)
        src_order = [l.split("/")[-1] for l in show(cfgp).splitlines()[:5]]

        sysj = json.loads(show(R["system"]))
        hn = sysj.get("host_networking", ""); ai = sysj.get("accelerator_interconnect", "")
        nic_cnt = sysj.get("host_network_card_count")
        sysname = sysj.get("system_name")

        # ---- interconnect string
        if R["fam"] == "nebius":
            inter = (f"{sysname} (systems JSON: '{sysj['accelerator_model_name']}', {sysj['accelerator_memory_capacity']}; "
                     f"accelerator_interconnect '{ai}'; host networking '{hn}', topology '{sysj['host_networking_topology']}'; "
                     f"8 NICs per node stated)")
        elif R["fam"] == "oracle":
            inter = (f"OCI BM.GPU.B200.8: {ai}; host networking '{hn}' on '{sysj['host_networking_topology']}' "
                     f"(systems JSON; NIC count not stated; single node, no inter-node traffic)")
        elif R["fam"] == "supermicro":
            inter = (f"Supermicro {sysname}: {ai} (systems JSON); host networking '{hn}', host_network_card_count "
                     f"'{nic_cnt}' (no GPU NICs stated; single node, no inter-node traffic)")
        elif R["fam"] == "lenovo":
            inter = (f"Lenovo {sysname}: '{ai}' (systems JSON; host networking left empty, NIC count not stated; "
                     f"single node, no inter-node traffic)")
        else:
            inter = (f"Dell PowerEdge XE9680L: '{ai}' (systems JSON; host networking left empty, NIC count not stated; "
                     f"single node, no inter-node traffic)")

        # ---- source string
        impl_files = ""
        if R["impl"]:
            impl_files = f", {R['impl']}/conf/custom.yaml, {R['impl']}/pretrain.py" if R["fam"] != "oracle" else ""
        if R["fam"] == "oracle":
            impl_files = " (the Oracle folder holds config_*.sh, run.sub and run_and_time.sh only; pretrain.py / conf/custom.yaml read from Nebius/benchmarks/llama31_8b, byte-identical NVIDIA v5.1 code)"
        source = (f"mlcommons/training_results_v5.1 @ {COMMIT}: {R['results']}/result_*.txt (MLPerf Training v5.1 closed division, "
                  f"{R['desc']}) and {cfgp}, {cd}/config_common.sh, config_common_fp4.sh, config_common_8b.sh, "
                  f"config_common_cg.sh, config_common_fp8attn.sh{impl_files}, {R['system']} at the same commit")

        # ---- notes
        PT = (f"{R['impl']}/pretrain.py" + (" (sibling folder; the system folder holds configs and run.sub only)" if R["fam"] == "supermicro" else "")
              if R["impl"] else
              "pretrain.py (not in the Oracle folder; Nebius/benchmarks/llama31_8b/pretrain.py, the byte-identical NVIDIA v5.1 copy)")
        notes = []
        notes.append(
            f"Result logs {', '.join(names)} ({len(logs)}, all run_stop status {'/'.join(sorted(map(str, status)))}): each logs "
            f"global_batch_size {GBS}, gradient_accumulation_steps {GA}, max_sequence_length {seq.pop()}; training is timed in blocks "
            f"between evaluations (block_start to block_stop, evaluation excluded); steps per block: {SPB} (block metadata step (stop - start)).")
        per_txt = "; ".join(
            f"{n}: median {r4(m)} s (min {r4(min(per[p]['per_step']))}, max {r4(max(per[p]['per_step']))}, {len(per[p]['per_step'])} blocks)"
            for n, p, m in zip(names, logs, meds))
        notes.append(
            f"iteration_time_s DERIVED = median over the {len(logs)} result logs of each log's median block time / steps per block: {per_txt}. "
            f"tokens_per_s DERIVED = {GBS} x 8192 / step (global). Cross-check: the logs' per-step tracked_stats timer (train_step_time, "
            f"the framework's own step timer) has medians {', '.join(str(r4(t)) for t in tmeds)} s (median {r4(statistics.median(tmeds))}).")
        slow = {}
        for p in logs:
            ps = per[p]["per_step"]; md = statistics.median(ps)
            for i, x in enumerate(ps):
                if x / md > 1.02:
                    slow.setdefault(i + 1, []).append(x / md)
        if slow:
            notes[-1] += (" Outlier blocks (>2% above the log's median): " + "; ".join(
                f"block {i} (steps {(i - 1) * SPB}-{i * SPB}) in {len(v)} of {len(logs)} logs, {min(v):.3f}-{max(v):.3f}x the median"
                for i, v in sorted(slow.items())) + "; the median ignores them; the first block is not slower.")
        else:
            notes[-1] += " No block is more than 2% above its log's median."
        lay = [c(r"TENSOR_MODEL_PARALLEL="), c(r"SEQ_PARALLEL="), c(r"PIPELINE_MODEL_PARALLEL="), c(r"CONTEXT_PARALLEL="),
               c(r"TP_COMM_OVERLAP="), c(r"MICRO_BATCH_SIZE="), c(r"MINIBS="), c(r"DGXNNODES="), c(r"DGXNGPU=")]
        dl = ""
        if "dlpal" in lc:
            dlp = lc["dlpal"][1].split()
            dl = f" (the log's DLPAL line, {fl}:{lc['dlpal'][0]}, names {dlp[-1]}, container {os.path.basename(dlp[1])})"
        elif R["fam"] in ("lenovo", "dell"):
            dl = " (the logs carry no DLPAL line; the config is matched to the run by name and by the logged global batch only: ASSUMED)"
        notes.append(
            f"Layout from {cfgp}{dl}: {'; '.join(lay)}; dp DERIVED = {dp} / (tp 1 x pp 1 x cp 1) = {dp}; dp x mbs x GA = "
            f"{dp} x {mbs} x {GA} = {GBS}, the logged global batch (GA DERIVED, and logged as gradient_accumulation_steps {GA}).")
        if R["logged_cfg"]:
            keys = ", ".join(f"{k} {lc[k][1]} (:{lc[k][0]})" for k in CFG_KEYS if k in lc)
            extra = []
            if "fp4_type" in lc: extra.append(f"TransformerConfig fp4='e2m1' (:{lc['fp4_type'][0]})")
            if "fp8dpa_tc" in lc: extra.append(f"fp8_dot_product_attention=True (:{lc['fp8dpa_tc'][0]})")
            if "ddp" in lc: extra.append(f"DistributedDataParallelConfig(grad_reduce_in_fp32=False, ...) (:{lc['ddp'][0]})")
            if "graphs" in lc: extra.append(f"'{graphs_txt(lc)}' (:{lc['graphs'][0]})")
            for p, t in texts.items():
                for k, v in [("fp4", "true"), ("fp8", "false"), ("fp8_dot_product_attention", "true"), ("fp4_recipe", "nvfp4")]:
                    assert re.search(rf"^\s*0:\s+{k}: {v}\s*$", t, re.M), (p, k)
            notes.append(f"The logs print the run's resolved configuration (rank 0, {fl}): {keys}; {'; '.join(extra)}. "
                         f"fp4 true, fp4_recipe nvfp4, fp8 false and fp8_dot_product_attention true are printed in all {len(logs)} logs.")
        else:
            for p, t in texts.items():
                assert not re.search(r"fp4|nvfp4|e2m1|DLPAL|fp8_dot_product_attention", t), p
                assert not re.search(r"^\s*0:\s+micro_batch_size:", t, re.M), p
            notes.append(
                f"The logs print NO resolved configuration (no hydra/NeMo config dump, no DLPAL line, no 'fp4' string: checked in all "
                f"{len(logs)} logs); precision, layout and CUDA-graph settings rest on {R['cfg']} and the config_common*.sh it sources "
                f"(ASSUMED to be what ran). Supporting evidence: logged global_batch_size {GBS} / GA {GA} match the config's dp8 x mbs2, "
                f"and the step ({r4(step)} s) is within 2% of the logged-NVFP4 one-node rows (0.4501-0.4567 s: Nebius n1, Oracle 1x, "
                f"Supermicro x2) and about 18% below the FP8 one-node UF row of the same layout (0.5452 s, "
                f"mlperf51_uf_llama31_8b_8gpu_b200_fp8). Hence confidence low.")
        notes.append(
            f"Config source order ({R['cfg']}:1-5): {', '.join(src_order)}; config_common_8b.sh is sourced after config_common_fp4.sh, so its "
            f"NVFP4 switches win.")
        notes.append(
            "Settings: " + "; ".join([cc(r"USE_DIST_OPTIMIZER="), cc(r"^export OVERLAP_GRAD_REDUCE="), cc(r"^export OVERLAP_PARAM_GATHER=True")])
            + " (zero_stage 1, overlap_grad_reduce true); grad_reduce_in_fp32=False (" + PT + ":266 / :390; grad_precision compute); "
            + "; ".join([c8(r"USE_TE_OPS="), c8(r"FUSED_QKV_ROPE="), c8(r"CE_FUSION_IMPL="), c8(r"NVTE_NORM_FWD_USE_CUDNN="), c8(r"BUCKET_SIZE=")])
            + " (DDP bucket, not modelled). No activation recompute (pretrain.py builds Llama31Config8B without recompute settings).")
        notes.append(
            "NVFP4 recipe: " + "; ".join([c4(r"^export FP4=True"), c4(r"^export FP8=False"), c4(r"FP4_RECIPE="), c4(r"FP8_PARAM_GATHER="),
                                           c4(r"NVTE_NVFP4_DISABLE_RHT=1"), c4(r"NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1"),
                                           c4(r"NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1")])
            + "; then " + "; ".join([c8(r"Enable 2D weights"), c8(r"NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=0"), c8(r"NVTE_NVFP4_DISABLE_2D_QUANTIZATION=0")])
            + ". Effective recipe DERIVED from source order (the logs do not echo these env vars): Transformer Engine NVFP4BlockScaling (E2M1 values, "
            "E4M3 scale per 16 elements, FP32 per-tensor scale) with 2D 16x16 weight quantization ON, stochastic rounding of gradients ON, "
            "random Hadamard transform OFF; no layers kept in BF16 (conf/custom.yaml:124 FIRST_LAST_LAYERS_BF16 default False); LM head and "
            "embedding outside the fp4 context (BF16). FP8_PARAM_GATHER False: BF16 parameter all-gather (unlike the FP8 B200 rows).")
        notes.append(
            "FP8 attention: " + "; ".join([ca(r"FP8_DPA=True"), ca(r"NVTE_DPA_FP8_FORMAT="), ca(r"NVTE_DPA_FP8CS_O_in_F16="),
                                            c4(r"NVTE_DPA_FP8_RECIPE=")])
            + " (config_common_fp4.sh runs after " + cc(r"NVTE_DPA_FP8_RECIPE=") + "); conf/custom.yaml:127 "
            "`fp8_dot_product_attention: ${oc.decode:${oc.env:FP8_DPA,False}}`"
            + (f"; logged fp8_dot_product_attention {lc['fp8_dot_product_attention'][1]} ({fl}:{lc['fp8_dot_product_attention'][0]})"
               if "fp8_dot_product_attention" in lc else "; not echoed by the logs (ASSUMED from the config)")
            + ". fp8_attention true: core attention runs cuDNN FP8 fused attention (current-scaling FP8 for QKV/O/dO/dQKV per "
            "Transformer Engine's linear-NVFP4 + attention-FP8CS path), unlike the FP8 B200 corpus rows (BF16 attention).")
        cgq = [cg(r"FULL_CUDA_GRAPH=1"), cg(r"MCORE_CUDA_GRAPH=1"), c(r"FULL_CUDA_GRAPH=0")]
        cgl = ""
        if "enable_cuda_graph" in lc:
            cgl = (f"; logged enable_cuda_graph {lc['enable_cuda_graph'][1]}, cuda_graph_scope {lc['cuda_graph_scope'][1]} "
                   f"({fl}:{lc['enable_cuda_graph'][0]}-{lc['cuda_graph_scope'][0]})")
            if "graphs" in lc:
                cgl += f", '{graphs_txt(lc)}' (:{lc['graphs'][0]})"
        else:
            cgl = "; not echoed by the logs"
        notes.append("CUDA graphs (not modelled: the plan has no CUDA-graph field): " + "; ".join(cgq)
                     + " (the system config, sourced after config_common_cg.sh, turns full-iteration graphs off; conf/custom.yaml:81 then "
                     "picks cuda_graph_scope 'full' unless CUDA_GRAPH_SCOPE is set)" + cgl + ".")
        if R["fam"] == "nebius" and dp > 8:
            runsh = [x for x in ls(cd + "/") if os.path.basename(x).startswith("run_")][0]
            notes.append(
                f"Published config vs what ran (Nebius n{dp // 8}): the logs' DLPAL line names {lc['dlpal'][1].split()[-1]} (no _fp4 suffix) and "
                f"container {os.path.basename(lc['dlpal'][1].split()[1])}, while the folder holds only {R['cfg']} and "
                f"{q(runsh, r'CONT=', os.path.basename(runsh))}; the logged cuda_graph_scope full_iteration ({fl}:{lc['cuda_graph_scope'][0]}) "
                f"contradicts {R['cfg']}:{find_line(cfgp, r'FULL_CUDA_GRAPH=0')[0]} FULL_CUDA_GRAPH=0 (custom.yaml:81 gives full_iteration only for "
                f"FULL_CUDA_GRAPH=1). Precision and layout lines are confirmed by the logged configuration; the CUDA-graph setting is not "
                f"(whole-iteration graph ran; not modelled either way).")
        notes.append("precision fp8 with fp8_scaling nvfp4: the plan's low-precision-GEMM recipe field names Transformer Engine's "
                     "NVFP4BlockScaling (the run itself has FP8=False, FP4=True; pretrain.py:194 forbids both); fp8_weight_cache "
                     "(TE, is_first_microbatch) as the FP8 entries read the same code.")
        notes.append("Model: Llama 3.1 8B (pretrain.py's Llama31Config8B, " + c8(r"OVERWRITTEN_NUM_LAYERS=")
                     + "): 32 layers, hidden 4096, 32 heads, 8 KV heads, FFN 14,336, vocab 128,256, RMSNorm, SwiGLU, RoPE, untied.")
        hw = (f"Hardware: {R['system']}: number_of_nodes {sysj['number_of_nodes']}, accelerators_per_node {sysj['accelerators_per_node']}, "
              f"'{sysj['accelerator_model_name']}', memory '{sysj['accelerator_memory_capacity']}', accelerator_interconnect '{ai}', "
              f"host '{sysj['host_processor_model_name']}', host_networking '{hn}'"
              + (f", host_network_card_count '{nic_cnt}'" if nic_cnt else "")
              + f", cooling '{sysj.get('cooling', '')}', status '{sysj['status']}'.")
        if R["fam"] == "nebius" and dp > 8:
            hw += " Inter-node: 8x ConnectX-7 InfiniBand NDR 400 Gb/s per node stated (one per GPU, DERIVED from 8 NICs / 8 GPUs)."
        elif R["fam"] != "nebius":
            hw += " Single node: the host network carries no training traffic."
        if R["fam"] == "supermicro":
            hw += " Supermicro's config_common.sh differs from NVIDIA's only by " + cc(r"NCCL_NET=Socket") + " (irrelevant on one node)."
        if R["fam"] == "lenovo":
            hw += " The config file's name also covers SR680aV4 (B300); the B200 logs carry no DLPAL line, so it is matched by name (ASSUMED)."
        notes.append(hw)
        notes.append("B200: the preset B200-192GB is read for the B200-SXM-180GB part; the power limit is not stated.")
        notes.append("No memory figure in these logs (the v5.1 mlperf-common logs no max_memory_usage).")
        notes.append("attention_kernel cudnn: the submission's " + cc(r"NVTE_FUSED_ATTN=0") + " leaves Transformer Engine's fused "
                     "attention on, and FP8_DPA=True selects cuDNN's FP8 fused attention on sm100 (the simulator has no FP8-attention "
                     "rate table: fp8_attention is new; ASSUMED to be timed as the cuDNN line until one exists).")

        gpu = "B200-SXM-180GB"
        e = {
            "id": R["id"],
            "source": source,
            "family": {"source": f"mlperf-training-v5.1-{R['fam']}-llama31", "framework": "nemo", "gpu_generation": "B200"},
            "model": json.loads(json.dumps(uf["model"])),
            "hardware": {"gpu": gpu, "num_gpus": dp, "gpus_per_node": 8, "interconnect": inter},
            "parallel": {"tp": 1, "pp": 1, "dp": dp, "cp": 1, "vp": 1, "zero_stage": 1, "sequence_parallel": False,
                         "recompute": "none", "micro_batch": mbs, "global_batch": GBS, "overlap_grad_reduce": True},
            "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": r4(step), "tokens_per_s": tok,
                         "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
            "precision": "fp8",
            "fp8_scaling": "nvfp4",
            "fp8_weight_cache": True,
            "fp8_attention": True,
            "grad_precision": "compute",
            "attention": "fused",
            "attention_kernel": "cudnn",
            "confidence": "medium" if R["logged_cfg"] else "low",
            "notes": notes,
        }
        assert e["id"] not in existing
        entries.append(e)
        scan.append(f"{R['id']}: GPUs {dp} layout dp{dp} x mbs{mbs} x GA{GA} = {GBS}; step {r4(step)} s; tok/s {tok}; "
                    f"train_step_time median {r4(statistics.median(tmeds))}; steps/block {SPB}; per-log "
                    + ", ".join(f"{n} {r4(m)}" for n, m in zip(names, meds)))
    open(os.path.join(OUT, "entries.json"), "w").write(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    open(os.path.join(OUT, "scan.txt"), "w").write("\n".join(scan) + "\n")
    print("\n".join(scan))


if __name__ == "__main__":
    main()
