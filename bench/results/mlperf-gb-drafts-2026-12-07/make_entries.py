#!/usr/bin/env python3
"""Draft corpus entries for the MLPerf Training v5.0 / v5.1 Llama 3.1 runs on GB200, GB300 and B300
that the corpus does not hold (helper h72, 2026-12-07).

Reads the bare mirrors of mlcommons/training_results_v5.0 (0fdc28f0) and v5.1 (441d65f4) with
`git show`, derives iteration_time_s exactly as the mlperf51_uf_* / *_nvfp4 entries do (median over
the result logs of each log's median block time / steps per block; block_start to block_stop,
evaluation excluded), resolves each run's config_*.sh by following its `source` lines in order
(the last `export` wins; defaults from conf/custom.yaml), quotes file:line for every setting, and
writes entries.json + scan.txt to OUT_DIR (argument; default the current directory).
Usage: make_entries.py [OUT_DIR]   (MLPERF_MIRROR overrides /work/.mirror). No network, no build.
"""
import json, os, re, statistics, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from mllog import RunFacts, printed_config, records  # noqa: E402

MIRROR = os.environ.get("MLPERF_MIRROR", "/work/.mirror")
GIT = {"5.0": os.path.join(MIRROR, "mlcommons+training_results_v5.0", "repo"),
       "5.1": os.path.join(MIRROR, "mlcommons+training_results_v5.1", "repo")}
COMMIT = {"5.0": "0fdc28f013256aea84fa36fdaf1e0fa46094b18c", "5.1": "441d65f4445cd59687466533fd9f55399136e7a4"}
SHORT = {k: v[:8] for k, v in COMMIT.items()}
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
CORPUS = os.environ.get("CORPUS", os.path.join(HERE, "..", "..", "..", "validation", "corpus",
                                             "published_runs.json"))
RUNS = json.load(open(os.path.join(HERE, "runs.json")))
SEQ = 8192


def git(rnd, *args):
    return subprocess.run(["git", "--git-dir=" + GIT[rnd], *args], check=True,
                          capture_output=True, text=True).stdout


def exists(rnd, path):
    return subprocess.run(["git", "--git-dir=" + GIT[rnd], "cat-file", "-e", f"{COMMIT[rnd]}:{path}"],
                          capture_output=True).returncode == 0


def show(rnd, path):
    return git(rnd, "show", f"{COMMIT[rnd]}:{path}")


def blob(rnd, path):
    return git(rnd, "rev-parse", f"{COMMIT[rnd]}:{path}").strip()[:8]


def ls(rnd, prefix):
    return git(rnd, "ls-tree", "-r", "--name-only", COMMIT[rnd], prefix).splitlines()


def r4(x):
    return round(x, 4)


# ------------------------------------------------------------------------------------ logs
def parse_log(text):
    """Blocks (ms, steps) in order. v5.1 logs carry the global step on block_start/stop; v5.0 logs
    carry samples_count, so a block's steps = (samples_count at the eval_start after its
    block_stop - samples_count at its block_start) / GBS."""
    ev, seen = [], set()
    facts = RunFacts()
    for k, time_ms, md, value in records(text):
        if k in ("block_start", "block_stop", "eval_start"):
            key = (k, md.get("step"), md.get("samples_count"))
            if key in seen:                      # some logs repeat MLLOG lines per rank
                continue
            seen.add(key); ev.append((k, time_ms, md))
        else:
            facts.take(k, md, value)
    gbs = facts.gbs
    blocks, starts_only = [], []
    for i, (k, tm, md) in enumerate(ev):
        if k != "block_start":
            continue
        j = next((j for j in range(i + 1, len(ev)) if ev[j][0] in ("block_stop", "block_start")), None)
        if j is None or ev[j][0] != "block_stop":
            starts_only.append((tm, md)); continue
        stop = ev[j]
        if "step" in md and "step" in stop[2]:
            n = stop[2]["step"] - md["step"]
        else:
            nx = next((e for e in ev[j + 1:] if e[0] == "eval_start"), None)
            n = (nx[2]["samples_count"] - md["samples_count"]) / gbs if nx else None
        if n:
            blocks.append((stop[1] - tm, int(round(n))))
    return dict(blocks=blocks, per_step=[ms / 1000.0 / n for ms, n in blocks], starts_only=starts_only,
                **facts.as_dict())


CFG_KEYS = ["tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
            "context_parallel_size", "sequence_parallel", "micro_batch_size", "fp8", "fp8_hybrid", "fp8_recipe", "fp4", "fp4_recipe",
            "fp8_dot_product_attention", "cuda_graph_scope"]


def logged_config(text):
    out = printed_config(text, CFG_KEYS)
    for i, line in enumerate(text.splitlines(), 1):
        if re.search(r":::DLPAL ", line):
            out["dlpal"] = (i, line.strip()[:200])
            break
    return out


# ------------------------------------------------------------------------------------ config
def resolve(rnd, cfgdir, cfg, fallback):
    """Follow `source $(dirname ...)/X.sh` lines in order; return env {K: (value, file, line)},
    the files read (path), the files missing and the ones taken from a fallback folder."""
    env, read, missing, fell = {}, [], [], []

    def run(path, short):
        read.append(path)
        for i, line in enumerate(show(rnd, path).splitlines(), 1):
            s = line.strip()
            m = re.match(r"^source\s+\$\(dirname \$\{BASH_SOURCE\[0\]\}\)/(\S+)", s)
            if m:
                f = m.group(1); p = f"{cfgdir}/{f}"
                if exists(rnd, p):
                    run(p, f)
                elif f in fallback and exists(rnd, f"{fallback[f]}/{f}"):
                    fell.append(f"{fallback[f]}/{f}"); run(f"{fallback[f]}/{f}", f)
                else:
                    missing.append((f, short, i))
                continue
            m = re.match(r"^export\s+([A-Z0-9_]+)=(.*)$", s)
            if m:
                v = m.group(2).split("#")[0].strip().strip('"').strip("'")
                env[m.group(1)] = (v, short, i, s)
                continue
            m = re.match(r"^unset\s+([A-Z0-9_]+)", s)
            if m:
                env.pop(m.group(1), None)
    run(f"{cfgdir}/{cfg}", cfg)
    return env, read, missing, fell


def yaml_default(rnd, yaml_path, var):
    """Default of ${oc.env:VAR,default} in custom.yaml: (default, line, key)."""
    for i, line in enumerate(show(rnd, yaml_path).splitlines(), 1):
        m = re.search(r"^\s*([a-z0-9_]+):.*\$\{oc\.env:" + var + r",([^}]*)\}", line)
        if m:
            return m.group(2).strip(), i, m.group(1)
    return None, None, None


def impl_dir(R):
    """The folder holding conf/custom.yaml and pretrain.py for the run."""
    for d in [R["cfgdir"], R["cfgdir"].rsplit("/", 1)[0], R["cfgdir"].rsplit("/", 2)[0]]:
        if exists(R["round"], f"{d}/conf/custom.yaml"):
            return d, ""
    # Lenovo / Nebius-configs folders: the NVIDIA code of the same round
    d = "NVIDIA/benchmarks/llama31_8b/implementations/nemo"
    return d, f" (the submitter's folder has no conf/custom.yaml; NVIDIA's {d} at the same commit is read for defaults)"


def truthy(v):
    return str(v).strip().lower() in ("true", "1")


# ------------------------------------------------------------------------------------ main
def main():
    corpus = json.load(open(CORPUS))
    corpus = corpus["runs"] if isinstance(corpus, dict) else corpus
    by_id = {e["id"]: e for e in corpus}
    model405 = by_id["mlperf51_uf_llama31_405b_256gpu_b200_fp8"]["model"]
    model8 = by_id["mlperf51_uf_llama31_8b_8gpu_b200_fp8"]["model"]
    ours = {R["id"] for R in RUNS}
    existing = set(by_id) - ours
    entries, scan = [], []
    for R in RUNS:
        rnd = R["round"]; C = SHORT[rnd]
        logs = sorted([p for p in ls(rnd, R["results"] + "/") if re.search(r"/result_[^/]*\.txt$", p)],
                      key=lambda p: int(re.search(r"result_0*(\d+)", p).group(1)))
        texts = {p: show(rnd, p) for p in logs}
        per = {p: parse_log(t) for p, t in texts.items()}
        names = [os.path.basename(p) for p in logs]
        gbs = {per[p]["gbs"] for p in logs}; ga = {per[p]["ga"] for p in logs}
        seqs = {per[p]["seq"] for p in logs}; status = {per[p]["status"] for p in logs}
        assert len(gbs) == 1 and len(ga) == 1 and seqs == {SEQ}, (R["id"], gbs, ga, seqs)
        assert status == {"success"}, (R["id"], status)
        GBS, GA = gbs.pop(), int(ga.pop())
        tmeds = [statistics.median(per[p]["tst"]) for p in logs]
        no_stop = all(not per[p]["blocks"] for p in logs)
        if no_stop:
            meds = tmeds
        else:
            assert all(per[p]["blocks"] for p in logs), R["id"]
            meds = [statistics.median(per[p]["per_step"]) for p in logs]
        step = statistics.median(meds)
        tok = round(GBS * SEQ / step)
        fl = names[0]
        lc = logged_config(texts[logs[0]])
        logged = "tensor_model_parallel_size" in lc

        # ---- configuration
        env, read, missing, fell = resolve(rnd, R["cfgdir"], R["cfg"], R.get("fallback", {}))
        idir, idir_note = impl_dir(R)
        yaml = f"{idir}/conf/custom.yaml"
        pre = f"{idir}/pretrain.py"

        def val(k, default_var=None):
            if k in env:
                return env[k][0]
            d, _, _ = yaml_default(rnd, yaml, default_var or k)
            return d

        def qv(k):
            if k in env:
                v, f, i, s = env[k]
                return f"{f}:{i} `{s}`"
            d, i, key = yaml_default(rnd, yaml, k)
            return f"{k} unset -> custom.yaml:{i} {key} default {d}" if i else f"{k} unset (no default found)"

        tp = int(val("TENSOR_MODEL_PARALLEL")); pp = int(val("PIPELINE_MODEL_PARALLEL"))
        cp = int(val("CONTEXT_PARALLEL")); mbs = int(val("MICRO_BATCH_SIZE"))
        ivp = val("INTERLEAVED_PIPELINE"); vp = int(ivp) if ivp not in (None, "null", "") else 1
        nodes = int(val("DGXNNODES")); gpn = int(val("DGXNGPU"))
        gpus = nodes * gpn
        dp = gpus // (tp * pp * cp)
        assert dp * tp * pp * cp == gpus and dp * mbs * GA == GBS, (R["id"], dp, mbs, GA, GBS)
        sp = truthy(val("SEQ_PARALLEL")) and tp > 1
        fp4 = truthy(val("FP4") or "False"); fp8 = truthy(val("FP8") or "False")
        recipe = val("FP8_RECIPE"); hybrid = truthy(val("FP8_HYBRID") or "False")
        dpa = truthy(val("FP8_DPA") or "False")
        tpo = truthy(val("TP_COMM_OVERLAP") or "False") and tp > 1
        dist = truthy(val("USE_DIST_OPTIMIZER")); ogr = truthy(val("OVERLAP_GRAD_REDUCE"))
        asym = truthy(val("ASYM_PP_EMBED") or "False") and truthy(val("ASYM_PP_LOSS") or "False")
        defer = truthy(val("DEFER_EMBEDDING_WGRAD_COMPUTE") or "False")
        ckpt = [k for k in env if k.startswith("ACT_CKPT")]
        assert not ckpt, (R["id"], ckpt)
        cp_comm_set = bool(re.search(r"cp_comm_type", show(rnd, pre) + show(rnd, yaml)))
        # logged configuration must agree with the resolved one
        if logged:
            chk = {"tensor_model_parallel_size": str(tp), "pipeline_model_parallel_size": str(pp),
                   "context_parallel_size": str(cp), "micro_batch_size": str(mbs),
                   "fp8": str(fp8 and not fp4).lower(), "fp4": str(fp4).lower(),
                   "sequence_parallel": str(sp).lower()}
            if "fp8_hybrid" in lc and not fp4:
                chk["fp8_hybrid"] = str(hybrid).lower()
            if "fp8_dot_product_attention" in lc:
                chk["fp8_dot_product_attention"] = str(dpa).lower()
            for k, v in chk.items():
                assert lc[k][1].lower() == v, (R["id"], k, lc[k], v)
            for p, t in texts.items():
                for k in ("fp4", "fp8"):
                    assert re.search(rf"^\s*0:\s+{k}: {chk[k]}\s*$", t, re.M), (p, k)

        sysj = json.loads(show(rnd, R["system"]))
        accel = sysj["accelerator_model_name"]
        gen = "GB300" if "GB300" in accel else "GB200" if "GB200" in accel else "B300" if "B300" in accel else None
        assert gen, accel
        gpu = {"GB200": "GB200", "GB300": "GB300", "B300": "B300-SXM-270GB"}[gen]
        bench = R["bench"]
        model = json.loads(json.dumps(model405 if bench == "405b" else model8))

        # ---- notes
        notes = []
        spb = sorted({n for p in logs for _, n in per[p]["blocks"]})
        notes.append(
            f"Result logs {', '.join(names)} ({len(logs)}, all run_stop status success): each logs global_batch_size {GBS}, "
            f"gradient_accumulation_steps {GA}, max_sequence_length {SEQ}; "
            + ("training is timed in blocks between evaluations (block_start to block_stop, evaluation excluded); steps per block: "
               + ", ".join(map(str, spb))
               + (" (block metadata step (stop - start))." if rnd == "5.1" else
                  " (samples_count at the eval_start after the block_stop less the block_start's, / GBS).")
               if not no_stop else
               "the logs carry block_start lines only (no block_stop, no eval_start: a block runs from one block_start to the next, "
               "evaluation included), so the block rule of the other MLPerf entries cannot exclude evaluation."))
        if no_stop:
            incl = []
            for p in logs:
                so = per[p]["starts_only"]
                xs = [(so[i + 1][0] - so[i][0]) / 1000.0 / ((so[i + 1][1]["samples_count"] - so[i][1]["samples_count"]) / GBS)
                      for i in range(len(so) - 1)]
                incl.append(statistics.median(xs))
            notes.append(
                f"iteration_time_s DERIVED (method differs from the other MLPerf entries, hence confidence low) = median over the "
                f"{len(logs)} result logs of each log's median tracked_stats train_step_time (the framework's per-step timer, the "
                f"cross-check the other entries quote): {', '.join(f'{n} {r4(m)} s' for n, m in zip(names, meds))}. "
                f"tokens_per_s DERIVED = {GBS} x {SEQ} / step (global). For comparison, block_start to the next block_start "
                f"(evaluation included) / steps gives log medians {', '.join(str(r4(x)) for x in incl)} s.")
        else:
            per_txt = "; ".join(
                f"{n}: median {r4(m)} s (min {r4(min(per[p]['per_step']))}, max {r4(max(per[p]['per_step']))}, {len(per[p]['per_step'])} blocks"
                + (", steps " + "/".join(str(n_) for _, n_ in per[p]['blocks']) if len(spb) > 1 else "") + ")"
                for n, p, m in zip(names, logs, meds))
            tot = [sum(ms for ms, _ in per[p]["blocks"]) / 1000.0 / sum(n_ for _, n_ in per[p]["blocks"]) for p in logs]
            notes.append(
                f"iteration_time_s DERIVED = median over the {len(logs)} result logs of each log's median block time / steps per block: "
                f"{per_txt}. tokens_per_s DERIVED = {GBS} x {SEQ} / step (global). Cross-check: the logs' per-step tracked_stats timer "
                f"(train_step_time, the framework's own step timer) has medians {', '.join(str(r4(t)) for t in tmeds)} s "
                f"(median {r4(statistics.median(tmeds))}); total block time / total steps per log: {', '.join(str(r4(t)) for t in tot)} s.")
            if len(spb) > 1:
                short = [n_ for n_ in spb if n_ < max(spb)]
                notes[-1] += (f" Blocks differ in length ({', '.join(map(str, spb))} steps): the long first block runs from the start of "
                              f"training, the short ones between evaluations; the median block is a short one.")
                if statistics.median(tmeds) < step * 0.97:
                    notes[-1] += (f" CAUTION: here the short blocks run {100 * (step / statistics.median(tmeds) - 1):.1f}% above the "
                                  f"train_step_time median (a per-block cost after each evaluation spread over few steps), so the block "
                                  f"rule reads high for this run; the total-time figure and train_step_time are the alternatives.")
        # layout
        lay = [qv(k) for k in ["TENSOR_MODEL_PARALLEL", "SEQ_PARALLEL", "PIPELINE_MODEL_PARALLEL", "INTERLEAVED_PIPELINE",
                               "CONTEXT_PARALLEL", "TP_COMM_OVERLAP", "MICRO_BATCH_SIZE", "MINIBS", "DGXNNODES", "DGXNGPU"]]
        how = (f"the submission's README ({R['readme']}) names it" if R.get("readme") else
               f"the log's DLPAL line ({fl}:{lc['dlpal'][0]}) names {lc['dlpal'][1].split()[-1].strip(chr(39))}" if "dlpal" in lc else
               R.get("match", "matched by name"))
        if "dlpal" in lc and not R.get("readme"):
            dn = lc["dlpal"][1].split()[-1].strip("'")
            if "config_" + dn + ".sh" != R["cfg"]:
                how += f", not exactly the file name {R['cfg']} (the logged configuration confirms the layout and precision)"
        notes.append(
            f"Layout from {R['cfgdir']}/{R['cfg']} ({how}): {'; '.join(lay)}; dp DERIVED = {gpus} / (tp {tp} x pp {pp} x cp {cp}) = {dp}; "
            f"dp x mbs x GA = {dp} x {mbs} x {GA} = {GBS}, the logged global batch (GA logged as gradient_accumulation_steps {GA}).")
        src_order = [os.path.basename(p) for p in read]
        n2 = (f"Config files read, in source order: {', '.join(src_order)}"
              + (f" ({', '.join(fell)} taken from that folder: the submitter's config sources it but its folder lacks it; ASSUMED the same file)" if fell else "")
              + (". MISSING: " + "; ".join(f"{f} (sourced at {s}:{i}) is in no folder of the commit, so whatever it set is unknown" for f, s, i in missing) if missing else "")
              + f". Defaults from {yaml}{idir_note}.")
        notes.append(n2)
        if logged:
            keys = ", ".join(f"{k} {lc[k][1]} (:{lc[k][0]})" for k in CFG_KEYS if k in lc)
            notes.append(f"The logs print the run's resolved configuration (rank 0, {fl}): {keys}; fp8 and fp4 are printed alike in all "
                         f"{len(logs)} logs and agree with the config above (checked by the script).")
        else:
            notes.append(f"The logs print NO resolved configuration (no hydra/NeMo config dump, no 'fp4' / 'fp8_recipe' string) and "
                         f"{'no DLPAL line' if 'dlpal' not in lc else 'a DLPAL line only'}; precision, layout and CUDA-graph settings rest "
                         f"on the config files above (ASSUMED to be what ran); the logged global batch {GBS} and GA {GA} match them.")
        st = [qv("USE_DIST_OPTIMIZER"), qv("OVERLAP_GRAD_REDUCE"), qv("OVERLAP_PARAM_GATHER"), qv("FP8_PARAM_GATHER"),
              qv("FULL_CUDA_GRAPH"), qv("MCORE_CUDA_GRAPH"), qv("DEFER_EMBEDDING_WGRAD_COMPUTE")]
        notes.append(f"Settings: {'; '.join(st)} -> zero_stage {1 if dist else 0}, overlap_grad_reduce {str(ogr).lower()}; "
                     f"{os.path.basename(pre)} passes grad_reduce_in_fp32=False (grad_precision compute); no ACT_CKPT_* is set and "
                     f"custom.yaml's activations_checkpoint_granularity defaults to null (recompute none); CUDA graphs and FP8 parameter "
                     f"gather: not modelled.")
        if defer:
            notes.append(f"defer_embedding_wgrad true, wgrad_deferral_limit {val('WGRAD_DEFERRAL_LIMIT')}: {qv('DEFER_EMBEDDING_WGRAD_COMPUTE')}, "
                         f"{qv('WGRAD_DEFERRAL_LIMIT')} (no later file resets it), read by conf/custom.yaml "
                         f"(defer_embedding_wgrad_compute / wgrad_deferral_limit), as the Nebius v5.0 405B entries.")
        if tp > 1:
            notes.append(f"sequence_parallel {str(sp).lower()} ({qv('SEQ_PARALLEL')}); tp_comm_overlap {str(tpo).lower()} ({qv('TP_COMM_OVERLAP')}).")
        else:
            notes.append("TP 1: no tensor-parallel communication (sequence_parallel false, no tp_comm_overlap).")
        if cp > 1:
            notes.append(f"cp_comm p2p: {os.path.basename(pre)} and conf/custom.yaml ({idir}) set no cp_comm_type"
                         + (" (checked by the script)" if not cp_comm_set else " (CAUTION: the string cp_comm_type occurs)")
                         + ", so Megatron-Core's TEDotProductAttention passes Transformer Engine 'p2p', as the UF v5.1 405B entry reads.")
        if asym:
            chunks = pp * vp; per_chunk = (model["layers"] + 2) // chunks
            assert per_chunk * chunks == model["layers"] + 2
            notes.append(f"layers_per_stage: {qv('ASYM_PP_EMBED')}, {qv('ASYM_PP_LOSS')} (Megatron-Core counts the embedding and the loss "
                         f"as a layer each: {model['layers'] + 2} / {chunks} chunks = {per_chunk}; first and last chunk {per_chunk - 1} "
                         f"transformer layer(s), the other {chunks - 2} chunks {per_chunk}).")
        if fp4:
            notes.append(f"precision fp8 with fp8_scaling nvfp4: {qv('FP4')}, {qv('FP4_RECIPE')}, {qv('FP8')} (Transformer Engine's "
                         f"NVFP4BlockScaling for the linear GEMMs, as the nine v5.1 *_nvfp4 entries); "
                         + (f"fp8_attention true: {qv('FP8_DPA')} (cuDNN FP8 fused attention)." if dpa else
                            f"fp8_attention false: FP8_DPA not set (custom.yaml default False), {qv('NVTE_DPA_FP8_RECIPE')}.")
                         + " fp8_weight_cache (TE, is_first_microbatch) as the FP8 entries read the same code.")
        else:
            notes.append(f"precision fp8, fp8_scaling {'current' if recipe == 'tensorwise' else recipe}: {qv('FP8')}, {qv('FP8_RECIPE')}"
                         + (" (Megatron-Core's per-tensor current scaling)" if recipe == "tensorwise" else "")
                         + f", {qv('FP8_HYBRID')} ({'E4M3 forward / E5M2 backward' if hybrid else 'E4M3 both ways'}); "
                         + ("FP4 not set (custom.yaml default False)" if yaml_default(rnd, yaml, "FP4")[1] else "this code has no FP4 option")
                         + "; fp8_weight_cache: TE casts each weight once per step (is_first_microbatch)."
                         + (f" fp8_scaling and the FP8 format are ASSUMED: {', '.join(f for f, _, _ in missing)} is missing and may set "
                            f"FP8_RECIPE / FP8_HYBRID (v5.1's NVIDIA config_common.sh sets FP8_RECIPE=tensorwise for Blackwell); the custom.yaml "
                            f"defaults are entered." if missing else ""))
        notes.append("attention_kernel cudnn: Transformer Engine's fused attention is left on (NVTE_FUSED_ATTN not set to 0), cuDNN "
                     "fused attention on Blackwell" + (" in FP8 (FP8_DPA)." if dpa else " (bf16)."))
        if bench == "405b":
            notes.append("Model: as the v5.0 / v5.1 Llama 3.1 405B entries (the MLPerf reference's table: 126 layers, 16,384 / 53,248, "
                         "128 heads, 8 KV heads, SwiGLU, RMSNorm, RoPE, seq 8,192, Mixtral 8x22B tokenizer, vocab 32,000); the runs "
                         "resume from Meta's checkpoint.")
        else:
            notes.append("Model: Llama 3.1 8B (pretrain.py's Llama31Config8B, " + qv("OVERWRITTEN_NUM_LAYERS")
                         + "): 32 layers, hidden 4096, 32 heads, 8 KV heads, FFN 14,336, vocab 128,256, RMSNorm, SwiGLU, RoPE, untied.")
        hn = sysj.get("host_networking", ""); ai = sysj.get("accelerator_interconnect", "")
        notes.append(f"Hardware: {R['system']}: system_name '{sysj.get('system_name')}', number_of_nodes {sysj['number_of_nodes']}, "
                     f"accelerators_per_node {sysj['accelerators_per_node']}, '{accel}', memory '{sysj['accelerator_memory_capacity']}', "
                     f"accelerator_interconnect '{ai}', host '{sysj.get('host_processor_model_name', '')}', host_networking '{hn}', "
                     f"status '{sysj.get('status', '')}'."
                     + (f" The systems JSON's number_of_nodes ({sysj['number_of_nodes']}) differs from the config's DGXNNODES {nodes}; "
                        f"the GPU count is the config's ({gpus}, which the logged GBS / GA confirm)." if str(sysj['number_of_nodes']) != str(nodes) else ""))
        if gen in ("GB200", "GB300"):
            notes.append(f"{gen}: NOT a trainplan preset (core/cluster_spec.cc has B200-192GB as its only Blackwell preset; the GB200 "
                         f"1,200 W figure there is a power-limit interpolation point). An NVL72 rack: {gpn} GPUs per compute tray "
                         f"(gpus_per_node {gpn}) and one NVLink domain of up to 72 GPUs across trays; the entry needs a {gen} / NVL72 "
                         f"preset before it can be simulated. Power limit not stated.")
        else:
            notes.append("B300-SXM-270GB: NOT a trainplan preset (core/cluster_spec.cc's only Blackwell preset is B200-192GB); the entry "
                         "needs a B300 preset before it can be simulated. Power limit not stated."
                         + (" Single node: the host network carries no training traffic." if nodes == 1 else ""))
        notes.append("No memory figure entered (rank 0's max_memory_usage, where logged, is not the peak over ranks).")

        inter = (f"{sysj.get('system_name')}: {accel}, {gpn} per {'compute tray' if gen.startswith('GB') else 'node'}; "
                 f"accelerator_interconnect '{ai}'{' (NVL72 NVLink domain)' if gen.startswith('GB') else ''}; host networking '{hn}' (systems JSON)")
        files = ", ".join(os.path.basename(p) if p.startswith(R["cfgdir"]) else p for p in read)
        source = (f"mlcommons/training_results_v{rnd} @ {C}: {R['results']}/result_*.txt (MLPerf Training v{rnd} closed division, "
                  f"{R['desc']}) and {R['cfgdir']}/{R['cfg']} ({files}), {yaml}, {pre}, {R['system']} at the same commit")
        par = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vp": vp, "zero_stage": 1 if dist else 0, "sequence_parallel": sp,
               "recompute": "none", "micro_batch": mbs, "global_batch": GBS}
        if tpo:
            par["tp_comm_overlap"] = True
        if defer:
            par["defer_embedding_wgrad"] = True
            par["wgrad_deferral_limit"] = int(val("WGRAD_DEFERRAL_LIMIT"))
        par["overlap_grad_reduce"] = ogr
        if asym:
            chunks = pp * vp; pc = (model["layers"] + 2) // chunks
            par["layers_per_stage"] = [pc - 1] + [pc] * (chunks - 2) + [pc - 1]
        conf = "medium"
        why = []
        if not logged and not R.get("readme") and "dlpal" not in lc:
            conf = "low"; why.append("config matched to the run by folder/name only")
        if missing:
            conf = "low"; why.append("a sourced config file is missing: " + ", ".join(f for f, _, _ in missing))
        if no_stop:
            conf = "low"; why.append("no block_stop in the logs (step from train_step_time)")
        if fell and not logged:
            conf = "low"; why.append("a sourced file taken from another folder")
        e = {
            "id": R["id"],
            "source": source,
            "family": {"source": R["fam"], "framework": "nemo", "gpu_generation": gen},
            "model": model,
            "hardware": {"gpu": gpu, "num_gpus": gpus, "gpus_per_node": gpn, "interconnect": inter},
            "parallel": par,
            "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": r4(step), "tokens_per_s": tok,
                         "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
            "precision": "fp8",
            "fp8_scaling": "nvfp4" if fp4 else ("current" if recipe == "tensorwise" else recipe),
            "fp8_weight_cache": True,
        }
        if fp4 and dpa:
            e["fp8_attention"] = True
        e.update({"grad_precision": "compute", "attention": "fused", "attention_kernel": "cudnn", "confidence": conf,
                  "notes": notes})
        if cp > 1:
            e["cp_comm"] = "p2p"
        assert e["id"] not in existing, e["id"]
        entries.append(e)
        scan.append(f"{R['id']}: {gen} x {gpus} ({R['kind']}); tp{tp} pp{pp} vp{vp} cp{cp} dp{dp} x mbs{mbs} x GA{GA} = {GBS}; "
                    f"{e['fp8_scaling']}{' +fp8attn' if e.get('fp8_attention') else ''}; step {r4(step)} s; tok/s {tok}; "
                    f"train_step_time median {r4(statistics.median(tmeds))}; steps/block {spb or 'n/a'}; confidence {conf}"
                    + (f" ({'; '.join(why)})" if why else "") + "; per-log " + ", ".join(f"{n} {r4(m)}" for n, m in zip(names, meds)))
    open(os.path.join(OUT, "entries.json"), "w").write(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    open(os.path.join(OUT, "scan.txt"), "w").write("\n".join(scan) + "\n")
    print("\n".join(scan))


if __name__ == "__main__":
    main()
