#!/usr/bin/env python3
"""Draft the 26.04.01 Megatron-Bridge MoE rows on DGX-GB300 / GB200 / B300 (helper mb2604m).
Reads only the corpus's model blocks (read-only); writes entries.json here."""
import copy, json

CORPUS = "/work/main/validation/corpus/published_runs.json"
runs = {r["id"]: r for r in json.load(open(CORPUS))}
C = "21d102f5ec"
MB = "scripts/performance"

SRC = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (section '26.04.01 NeMo Container' added in "
       "commit 21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6, 2026-05-27; moved unchanged to "
       "docs/performance-summary-archive.md by commit 4ab94dfad36641cabdeb96452b21bf676aac4772), "
       "Pre-Training Performance, 'Model: {table}' table line {line} (archive line {aline})")

HW = {
    "GB300": ("GB300-288GB", "DGX GB300 NVL72 (table: 'DGX-GB300'): 4 GB300 GPUs per compute tray, one NVLink5 + NVSwitch domain of up to 72 GPUs (1.8 TB/s per GPU); scale-out network not stated in the source (NVIDIA's MLPerf v5.1 GB300 systems: 4x ConnectX-8 IB XDR 800 Gb/s per tray)"),
    "GB200": ("GB200-186GB", "DGX GB200 NVL72 (table: 'DGX-GB200'): 4 GB200 GPUs per compute tray, one NVLink5 + NVSwitch domain of up to 72 GPUs (1.8 TB/s per GPU); scale-out network not stated in the source (NVIDIA's MLPerf v5.0 GB200 systems: 4x ConnectX-7 IB NDR 400 Gb/s per tray)"),
    "B300": ("B300-270GB", "DGX B300 (table: 'DGX-B300'): 8x B300 per node, NVLink5 + NVSwitch (1.8 TB/s per GPU); scale-out network not stated in the source (DGX B300 spec: 8x ConnectX-8 800 Gb/s per node, not checked here)"),
}

COMMON_NOTES = [
    "Metric: Tokens/sec/GPU (kept as tokens_per_s x GPUs, DERIVED) and Model TFLOP/sec/GPU (model FLOPs per Megatron-Bridge's flop formulas, no recompute term; kept in notes only).",
    "Source note: 'In MoE training benchmarks, we force-balance the token distribution among experts and all benchmarks are token-dropless' (docs/performance-summary.md:138@21d102f5ec). Recipe agrees: moe_router_force_load_balancing = True in the model's set_*_common_configs, and token drop is applied only with --use_tokendrop (default unset; scripts/performance/utils/overrides.py:302-308@21d102f5ec).",
    "Recipe variant: scripts/performance/argument_parser.py:824-830@21d102f5ec --config_variant default 'v2' (utils/utils.py:108-119 falls back to _V1 when no _V2 object exists); the named config object's TP/PP/VP/EP/MBS/GBS/GPUs equal the table row's. That the table was measured with the recipe at the table's commit is ASSUMED (same-commit reading, as the existing 260401 entries).",
    "sequence_parallel false: WorkloadBaseConfig.sequence_parallel = TP > 1 (scripts/performance/utils/utils.py:71-74@21d102f5ec), written by set_workload_base_configs (utils/overrides.py:219); TP 1 here. No TP communication overlap (TP 1; src/megatron/bridge/training/comm_overlap.py:441-445 disables it for TP < 2).",
]

def hw_notes(gen, n):
    if gen == "B300":
        return [f"Hardware: table system 'DGX-B300'. gpu preset B300-270GB; gpus_per_node 8 (DGX B300; the launcher's NUM_GPUS_PER_NODE_MAP b300: 8, scripts/performance/argument_parser.py:30-35@21d102f5ec)."]
    racks = max(1, n // 64)
    return [f"Hardware: table system 'DGX-{gen}' only. gpu preset {HW[gen][0]}; gpus_per_node {min(n, 64)} = min(GPUs, 64): the NVL72 NVLink domain, taken as 64 GPUs (16 compute trays of 4) per rack as on NVIDIA's own MLPerf GB200/GB300 systems; the table does not say how many racks the job used ({n} GPUs = {racks} rack(s) of {min(n,64)} ASSUMED), hence confidence at most medium. The launcher's node is the 4-GPU compute tray (scripts/performance/argument_parser.py:30-35@21d102f5ec NUM_GPUS_PER_NODE_MAP gb200/gb300: 4)."]

FP8_MX_NOTE = ("fp8_scaling block: the table's precision MXFP8 = compute_dtype fp8_mx (scripts/performance/utils/precision.py:33-34@21d102f5ec -> bf16_with_mxfp8_mixed(), src/megatron/bridge/training/mixed_precision.py:255-265: fp8_recipe 'mxfp8', Transformer Engine MXFP8BlockScaling, 32-element blocks) mapped to fp8. "
               "fp8_weight_cache: Megatron-Core's Transformer Engine layers pass is_first_microbatch (added 2024-01-10, Megatron-LM commit 3c44fb9f61; megatron/core/extensions/transformer_engine.py), so TE casts each weight to FP8 on a step's first micro-batch and reuses it (TE Linear docstring: 'caching of the FP8 versions of the weights').")

FOLD = ("expert_layout folded, expert_tp 1: scripts/performance/configs/{f} sets expert_tensor_parallel_size=1 in the model's base config (at 21d102f5ec, the table's commit), and the Megatron-Core it runs (3rdparty/Megatron-LM submodule 44151194, after core_v0.15) places the expert groups by MoE parallel folding (Megatron-LM commit 7f22e210cd, 2024-11-23, first released in core_v0.10.0): an EP group is expert_tp*ep consecutive ranks of a stage (as the existing 260401 entries).")

HYBRIDEP = ("Dispatcher: moe_flex_dispatcher_backend 'hybridep' ({where}); apply_flex_dispatcher_backend sets moe_token_dispatcher_type 'flex' for compute capability 8/9/10 (src/megatron/bridge/training/flex_dispatcher_backend.py:57-72@21d102f5ec) and overrides.py:73-74 sets moe_hybridep_num_sms = 32. "
            "parallel.moe_dispatcher left unset (read as alltoall): trainplan has alltoall and deepep only, and HybridEP's pricing is not settled by a source read here (corpus NOTES.md, thirty-first pass: the 25.11 / 26.x rows do not record their dispatcher).")

ALLTOALL = ("Dispatcher: no moe_flex_dispatcher_backend in the config object ({where}), so set_workload_base_configs sets moe_token_dispatcher_type = 'alltoall' (scripts/performance/utils/overrides.py:243-246@21d102f5ec): Megatron-Core's alltoall dispatcher (NCCL all-to-all), the plan's default; moe_dispatcher not written.")

def cg_note(impl, scope, where):
    if impl == "none":
        return f"CUDA graphs: none ({where}); not modelled either way."
    return (f"CUDA graphs: cuda_graph_impl 'transformer_engine', cuda_graph_scope {scope} ({where}; applied by utils/overrides.py:106-132@21d102f5ec): per-layer TE graphs of those sub-modules only, the expert GEMMs and the dispatcher stay eager. Not modelled (no corpus field).")

def ep_note(on, where):
    if on:
        return (f"ep_overlap true: moe_a2a_overlap=True ({where}); utils/overrides.py:161-171@21d102f5ec _set_moe_a2a_overlap_overrides sets comm_overlap.overlap_moe_expert_parallel_comm = True and delay_wgrad_compute = True, moe_shared_expert_overlap False (Plan::ep_overlap).")
    return (f"ep_overlap false: moe_a2a_overlap False ({where}; WorkloadBaseConfig default False, scripts/performance/utils/utils.py:62), so _set_moe_a2a_overlap_overrides (utils/overrides.py:161-171@21d102f5ec) does nothing; no expert all-to-all overlap.")

def make(tmpl_id, *, gen, table, line, aline, key, n, prec_label, gbs, mbs, seq, tp, pp, cp, vp, ep, tok, tfl,
         precision, dp_layers=None, recompute, ep_overlap, confidence, notes, fold_file, grad_file):
    t = runs[tmpl_id]
    e = {}
    e["id"] = f"mbridge260401_{gen.lower()}_{key}_{n}gpu"
    e["source"] = SRC.format(table=table, line=line, aline=aline)
    e["family"] = {"source": "megatron-bridge-perf-summary", "framework": "nemo", "gpu_generation": gen}
    e["model"] = copy.deepcopy(t["model"])
    e["hardware"] = {"gpu": HW[gen][0], "num_gpus": n, "gpus_per_node": 8 if gen == "B300" else min(n, 64),
                     "interconnect": HW[gen][1]}
    dp = n // (tp * pp * cp)
    ga = gbs // (dp * mbs)
    assert dp * mbs * ga == gbs, e["id"]
    par = {"tp": tp, "pp": pp, "cp": cp, "vp": vp, "ep": ep, "zero_stage": None, "sequence_parallel": False,
           "recompute": recompute, "micro_batch": mbs, "global_batch": gbs, "dp": dp}
    if dp_layers is not None:
        assert sum(dp_layers) == t["model"]["layers"], (e["id"], sum(dp_layers))
        assert len(dp_layers) == pp * (vp or 1), e["id"]
        par["layers_per_stage"] = dp_layers
    par["ep_overlap"] = ep_overlap
    par["expert_layout"] = "folded"
    par["expert_tp"] = 1
    e["parallel"] = par
    tps = tok * n
    it = gbs * seq / tps
    e["measured"] = {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": None, "tokens_per_s": tps, "memory_gb": None}
    e["precision"] = precision
    e["attention"] = "fused"
    e["confidence"] = confidence
    vps = "n/a" if vp is None else str(vp)
    nn = [f"Row ({gen}): {n} GPUs, precision {prec_label}, GBS {gbs}, MBS {mbs}, seq {seq}, FSDP 0, TP {tp}, PP {pp}, CP {cp}, VP {vps}, EP {ep} (the 26.04.01 table has no GA column): {tok} tokens/s/GPU, {tfl} model TFLOP/s/GPU.",
          f"dp DERIVED = GPUs/(TP*PP*CP) = {dp}; GA DERIVED = GBS/(dp*MBS) = {ga}; DERIVED iteration time = GBS*seq/(tokens/s/GPU*GPUs) = {it:.3f} s."]
    nn += COMMON_NOTES[:1] + hw_notes(gen, n) + COMMON_NOTES[1:]
    if precision == "fp8":
        nn.append(FP8_MX_NOTE)
    nn.append(f"grad_precision compute: Megatron-Bridge {grad_file} sets mixed_precision.grad_reduce_in_fp32 = False and ddp.grad_reduce_in_fp32 = False (read at 21d102f5ec, the commit of the table) -> gradients reduced in bf16.")
    nn.append(FOLD.format(f=fold_file))
    nn += notes
    e["notes"] = nn
    if precision == "fp8":
        e["fp8_scaling"] = "block"
        e["fp8_weight_cache"] = True
    e["grad_precision"] = "compute"
    return e

DS = "scripts/performance/configs/deepseek/deepseek_workload_base_configs.py"
DSP = "scripts/performance/configs/deepseek/deepseek_llm_pretrain.py"
DSR = "src/megatron/bridge/recipes/deepseek/deepseek_v3.py"
GO = "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py"
QW = "scripts/performance/configs/qwen/qwen3_workload_base_configs.py"
QWP = "scripts/performance/configs/qwen/qwen3_llm_pretrain.py"
QWR = "src/megatron/bridge/recipes/qwen/qwen3_moe.py"

MTP = ("MTP on: the model recipe sets mtp_num_layers = 1 (src/megatron/bridge/recipes/deepseek/deepseek_v3.py:84@21d102f5ec, mtp_loss_scaling_factor 0.1) and no performance config or override clears it; the MTP block ('m' / 'mtp') sits in the last pipeline chunk with the loss. trainplan does not model MTP (one extra transformer block + its head on the last stage), so a prediction should be somewhat fast (the existing B200 260401 entry notes MTP as 'not stated'; the recipe read here says on).")
DS_RECOMP = ("recompute left null (simulated as none): the table does not state it; the recipe sets recompute_granularity 'selective' ({dsp}:39@21d102f5ec) with recompute_modules {mods} ({where}; utils/overrides.py:150-152). trainplan's recompute vocabulary (none, selective = Megatron's attention core, full, selective-op) has no value for that module set, so the run's extra recompute is not modelled (as the existing B200 260401 entry).")

entries = []
# ---------------- DeepSeek-V3 ----------------
ds_common = dict(table="DeepSeekV3", n=256, prec_label="MXFP8", gbs=4096, seq=4096, tp=1, cp=1, tok=None,
                 precision="fp8", recompute=None, confidence="low", fold_file="deepseek/deepseek_workload_base_configs.py",
                 grad_file="scripts/performance/configs/deepseek/deepseek_llm_pretrain.py:42-43 (set_deepseek_v3_common_configs)")
entries.append(make("mbridge260401_b200_deepseekv3_256gpu", gen="GB300", line=72, aline=225, key="deepseekv3",
    **{**ds_common, "tok": 4992}, tfl=1298, mbs=2, pp=2, vp=8, ep=32,
    dp_layers=[4] * 15 + [1], ep_overlap=False, notes=[
    f"Config object DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 = DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V2 ({DS}:178@21d102f5ec) = GB300_V1 with GBS 4096 (:169-172); GB300_V1 (:41-54): num_gpus 256, MBS 2, PP 2, VP 8, pp_layout 'Et*4|(t*4|)*14tmL', EP 32, moe_flex_dispatcher_backend 'hybridep', moe_a2a_overlap False, cuda_graph_scope [], recompute_modules ['mla_up_proj']; expert_tensor_parallel_size 1 (:32-34).",
    f"layers_per_stage [4 x 15, 1] (per model chunk, 16 chunks = PP 2 x VP 8): {DSP}:69-70@21d102f5ec installs the config's pp_layout 'Et*4|(t*4|)*14tmL' as pipeline_model_parallel_layout: chunk 1 = embedding + 4 layers, chunks 2-15 = 4 layers each, chunk 16 = 1 layer + MTP + loss (4 + 56 + 1 = 61). The existing B200 260401 entry (same layout string) does not carry layers_per_stage; this one follows rule 7 (recipe value).",
    MTP,
    DS_RECOMP.format(dsp=DSP, mods="['mla_up_proj']", where=f"{DS}:53, GB300_V1"),
    ep_note(False, f"{DS}:51, GB300_V1"),
    HYBRIDEP.format(where=f"{DS}:50; {DSP}:68"),
    cg_note("none", None, f"{DS}:52 cuda_graph_scope [] with no cuda_graph_impl in GB300_V1, so the recipe's cuda_graph_impl 'none' stays ({DSR}:125@21d102f5ec)"),
    f"Other recipe facts: comm_overlap.overlap_grad_reduce True ({DSP}:78); moe_router_fusion True ({DSP}:38); recipe enable_megatron_core_experimental True ({DSP}:40).",
]))
entries.append(make("mbridge260401_b200_deepseekv3_256gpu", gen="GB200", line=73, aline=226, key="deepseekv3",
    **{**ds_common, "tok": 4256}, tfl=1106, mbs=1, pp=4, vp=4, ep=64,
    dp_layers=[4] * 15 + [1], ep_overlap=False, notes=[
    f"Config object DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2 = DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 ({DS}:191@21d102f5ec) = GB200_V1 with GBS 4096 (:182-185); GB200_V1 (:72-84): num_gpus 256, PP 4, VP 4, EP 64, moe_flex_dispatcher_backend 'hybridep', moe_a2a_overlap False, recompute_modules ['mlp'], cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess']; MBS 1 (WorkloadBaseConfig default, utils/utils.py:50).",
    f"layers_per_stage [4 x 15, 1] (per model chunk, 16 chunks = PP 4 x VP 4): GB200_V1 has no pp_layout, so {DSP}:104-108@21d102f5ec calls set_deepseek_v3_pipeline_model_parallel_layout, whose map entry (4, 4) ({DSR}:44@21d102f5ec) is [embedding + 4 decoder] + [4 decoder] x 14 + [1 decoder + mtp + loss] (4 + 56 + 1 = 61).",
    MTP,
    DS_RECOMP.format(dsp=DSP, mods="['mlp']", where=f"{DS}:81, GB200_V1"),
    ep_note(False, f"{DS}:80, GB200_V1"),
    HYBRIDEP.format(where=f"{DS}:79; {DSP}:103"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{DS}:82-83, GB200_V1"),
    f"Other recipe facts: comm_overlap.overlap_grad_reduce True ({DSP}:113); moe_router_fusion True ({DSP}:38).",
]))
entries.append(make("mbridge260401_b200_deepseekv3_256gpu", gen="B300", line=74, aline=227, key="deepseekv3",
    **{**ds_common, "tok": 3456}, tfl=898, mbs=2, pp=8, vp=None, ep=8,
    dp_layers=[8] * 7 + [5], ep_overlap=False, notes=[
    f"Config object DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2 = DEEPSEEK_V3_PRETRAIN_CONFIG_B300_BF16_V2 = B300_V2 ({DS}:212-214@21d102f5ec); B300_V2 (:201-210) = B300_V1 (:115-124: num_gpus 256, EP 8, moe_flex_dispatcher_backend 'hybridep', moe_a2a_overlap False) with GBS 4096, MBS 2, PP 8, VP None, recompute_modules ['mla_up_proj'], cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess']. Table 'VP n/a' -> vp null.",
    f"layers_per_stage [8 x 7, 5] (8 stages, no interleaving): the B300 function always recomputes the layout ({DSP}:174-175@21d102f5ec) with set_deepseek_v3_pipeline_model_parallel_layout, map entry (8, 1) ({DSR}:40@21d102f5ec): [embedding + 8 decoder] + [8 decoder] x 6 + [5 decoder + mtp + loss] (8 + 48 + 5 = 61).",
    MTP,
    DS_RECOMP.format(dsp=DSP, mods="['mla_up_proj']", where=f"{DS}:207, B300_V2"),
    ep_note(False, f"{DS}:123, B300_V1, not changed by B300_V2"),
    HYBRIDEP.format(where=f"{DS}:122; {DSP}:173"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{DS}:208-209, B300_V2"),
    f"Other recipe facts: comm_overlap.overlap_grad_reduce True ({DSP}:180); moe_router_fusion True ({DSP}:38).",
]))

# ---------------- GPT-OSS-120B ----------------
GOP = "scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py"
GOR = "src/megatron/bridge/recipes/gpt_oss/gpt_oss.py"
go_common = dict(table="GPT OSS 120B", n=64, prec_label="BF16", gbs=1280, seq=4096, tp=1, pp=1, cp=1, vp=None, mbs=4,
                 precision="bf16", confidence="medium", fold_file="gpt_oss/gpt_oss_workload_base_configs.py",
                 grad_file=f"{GOP}:32-33 (set_gpt_oss_common_configs)")
REC_NONE_GO = f"recompute none: the config object sets no recompute_modules / recompute_num_layers, so _set_recompute_overrides (utils/overrides.py:135-158@21d102f5ec) leaves the model recipe's recompute_granularity None, recompute_modules None ({GOR}:231-232@21d102f5ec)."
entries.append(make("mbridge260401_b200_gptoss_120b_64gpu", gen="GB300", line=81, aline=234, key="gptoss_120b",
    **go_common, tok=19200, tfl=523, ep=64, recompute="none", ep_overlap=False, notes=[
    f"Config object GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2 ({GO}:96-99@21d102f5ec) = GB300_BF16_V1 (:45-51: EP 64, MBS 4, cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess'] on BASE_GPT_OSS_120B_CONFIG :32-38: num_gpus 64, expert_tensor_parallel_size 1) with GBS 1280.",
    REC_NONE_GO,
    ep_note(False, f"{GO}:45-51 and :96-99 do not set it"),
    ALLTOALL.format(where=f"{GO}:45-51; {GOP}:55-56 applies a flex backend only when one is set; the model recipe's own dispatcher is 'alltoall', {GOR}:199"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{GO}:49-50, GB300_BF16_V1"),
    "Model block copied from mbridge260401_b200_gptoss_120b_64gpu (gpt-oss's alternating sliding-window attention is not in it, as there).",
]))
entries.append(make("mbridge260401_b200_gptoss_120b_64gpu", gen="GB200", line=82, aline=235, key="gptoss_120b",
    **go_common, tok=16640, tfl=452, ep=64, recompute=None, ep_overlap=True, notes=[
    f"Config object GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 ({GO}:102-106@21d102f5ec) = GB200_BF16_V1 (:54-59: EP 64, MBS 4, recompute_modules ['layernorm', 'moe_act']) with GBS 1280 and moe_a2a_overlap True; no cuda_graph_impl.",
    f"recompute left null (simulated as none): the recipe sets selective recompute of modules ['layernorm', 'moe_act'] ({GO}:58@21d102f5ec; utils/overrides.py:150-152). trainplan's recompute vocabulary (none, selective = Megatron's attention core, full, selective-op) has no value for that module set, so the run's extra recompute of these modules is not modelled (as the existing B200 260401 entry).",
    ep_note(True, f"{GO}:105, GB200_BF16_V2; the GB200 function first sets comm_overlap = CommOverlapConfig(tp_comm_overlap=False for TP 1), {GOP}:81-82"),
    ALLTOALL.format(where=f"{GO}:54-59 and :102-106; the model recipe's own dispatcher is 'alltoall', {GOR}:199"),
    cg_note("none", None, f"no cuda_graph_impl in GB200_BF16_V1/V2, so the recipe's cuda_graph_impl 'none' stays ({GOR}:218@21d102f5ec)"),
    "Model block copied from mbridge260401_b200_gptoss_120b_64gpu (gpt-oss's alternating sliding-window attention is not in it, as there).",
]))
entries.append(make("mbridge260401_b200_gptoss_120b_64gpu", gen="B300", line=83, aline=236, key="gptoss_120b",
    **go_common, tok=15232, tfl=414, ep=8, recompute="none", ep_overlap=False, notes=[
    f"Config object GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2 ({GO}:109-114@21d102f5ec) = B300_BF16_V1 (:62-68: MBS 4, cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess']) with GBS 1280, EP 8, moe_flex_dispatcher_backend 'hybridep'.",
    REC_NONE_GO,
    ep_note(False, f"{GO}:62-68 and :109-114 do not set it"),
    HYBRIDEP.format(where=f"{GO}:113; applied by {GOP}:131-132 and utils/overrides.py:243-244"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{GO}:66-67, B300_BF16_V1"),
    "Model block copied from mbridge260401_b200_gptoss_120b_64gpu (gpt-oss's alternating sliding-window attention is not in it, as there).",
]))

# ---------------- Qwen3-30B-A3B ----------------
q30_common = dict(table="Qwen3_30B_a3B", n=8, prec_label="MXFP8", gbs=512, seq=4096, tp=1, pp=1, cp=1, vp=None, ep=8,
                  precision="fp8", confidence="medium", fold_file="qwen/qwen3_workload_base_configs.py",
                  grad_file=f"{QWP}:41-42 (set_qwen3_common_configs)", recompute="none", ep_overlap=False)
REC_NONE_Q30 = (f"recompute none: the model recipe turns on full uniform recompute of 1 layer ({QWR}:83-85@21d102f5ec) but set_qwen3_common_configs resets recompute_granularity, recompute_method and recompute_num_layers to None ({QWP}:33-35@21d102f5ec), and the config object sets no recompute_modules (utils/overrides.py:135-158).")
entries.append(make("mbridge260401_b200_qwen3_30b_a3b_8gpu", gen="GB300", line=91, aline=244, key="qwen3_30b_a3b",
    **q30_common, tok=31744, tfl=729, mbs=8, notes=[
    f"Config object QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1 = GB300_FP8_CS_V1 ({QW}:345 and :335-342@21d102f5ec; no _V2 object for the 30B, so the v2 default falls back to v1, utils/utils.py:108-119): num_gpus 8, MBS 8, moe_flex_dispatcher_backend 'hybridep', cuda_graph_impl 'transformer_engine', cuda_graph_scope ['moe_router', 'moe_preprocess']; BASE_QWEN3_30B_A3B_CONFIG (:37-41) EP 8, expert_tensor_parallel_size 1, GBS 512.",
    REC_NONE_Q30,
    ep_note(False, f"{QW}:335-342 does not set it"),
    HYBRIDEP.format(where=f"{QW}:339; {QWP}:220-221 sets moe_token_dispatcher_type 'flex'"),
    cg_note("te", "['moe_router', 'moe_preprocess']", f"{QW}:340-341"),
]))
entries.append(make("mbridge260401_b200_qwen3_30b_a3b_8gpu", gen="GB200", line=92, aline=245, key="qwen3_30b_a3b",
    **q30_common, tok=26112, tfl=599, mbs=4, notes=[
    f"Config object QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 ({QW}:368-375@21d102f5ec; no _V2 object, v1 fallback utils/utils.py:108-119): num_gpus 8, MBS 4, moe_flex_dispatcher_backend 'hybridep', cuda_graph_impl 'transformer_engine', cuda_graph_scope ['moe_router', 'moe_preprocess'] (the GB200 BF16 / FP8_CS objects add 'attn'); base EP 8, expert_tensor_parallel_size 1, GBS 512 (:37-41).",
    REC_NONE_Q30,
    ep_note(False, f"{QW}:368-375 does not set it"),
    HYBRIDEP.format(where=f"{QW}:372; {QWP}:246-247 sets moe_token_dispatcher_type 'flex'"),
    cg_note("te", "['moe_router', 'moe_preprocess']", f"{QW}:373-374"),
]))
entries.append(make("mbridge260401_b200_qwen3_30b_a3b_8gpu", gen="B300", line=93, aline=246, key="qwen3_30b_a3b",
    **q30_common, tok=30720, tfl=704, mbs=8, notes=[
    f"Config object QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1 = B300_FP8_CS_V1 ({QW}:402 and :392-399@21d102f5ec; no _V2 object, v1 fallback utils/utils.py:108-119): num_gpus 8, MBS 8, moe_flex_dispatcher_backend 'hybridep', cuda_graph_impl 'transformer_engine', cuda_graph_scope ['moe_router', 'moe_preprocess']; base EP 8, expert_tensor_parallel_size 1, GBS 512 (:37-41).",
    REC_NONE_Q30,
    ep_note(False, f"{QW}:392-399 does not set it"),
    HYBRIDEP.format(where=f"{QW}:396; {QWP}:298-299 sets moe_token_dispatcher_type 'flex'"),
    cg_note("te", "['moe_router', 'moe_preprocess']", f"{QW}:397-398"),
]))

# ---------------- Qwen3-235B-A22B ----------------
q235_common = dict(table="Qwen3_235B_a22B", n=256, prec_label="MXFP8", gbs=8192, seq=4096, tp=1, cp=1, ep=32,
                   precision="fp8", confidence="medium", fold_file="qwen/qwen3_workload_base_configs.py",
                   grad_file=f"{QWP}:41-42 (set_qwen3_common_configs)", recompute="none", ep_overlap=False)
REC_NONE_Q235 = (f"recompute none: the model recipe sets recompute_granularity None and recompute_modules None ({QWR}:198-199@21d102f5ec), set_qwen3_common_configs keeps granularity None ({QWP}:33-35), and the config object sets no recompute_modules (utils/overrides.py:135-158).")
SPLIT = (f"The split counts embedding and loss as one layer each: the model recipe sets account_for_embedding_in_pipeline_split = True and account_for_loss_in_pipeline_split = True ({QWR}:166-167@21d102f5ec, no pipeline layout); Megatron-Core (3rdparty/Megatron-LM 44151194, megatron/core/transformer/transformer_block.py:141-193 get_num_layers_to_build) divides 94 + 2 = 96 over PP (and VP) and takes one layer off the first chunk (embedding) and one off the last (loss).")
entries.append(make("mbridge260401_b200_qwen3_235b_a22b_256gpu", gen="GB300", line=101, aline=254, key="qwen3_235b_a22b",
    **{**q235_common}, tok=6944, tfl=1029, mbs=2, pp=4, vp=12, dp_layers=[1] + [2] * 46 + [1], notes=[
    f"Config object QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 ({QW}:202-205@21d102f5ec) = GB300_FP8_CS_V2 = GB300_BF16_V2 (:201, :191-198) with VP 12; GB300_BF16_V2 = GB300_BF16_V1 (:54-64: TP 1, MBS 2, moe_flex_dispatcher_backend 'hybridep', cuda_graph_impl 'transformer_engine') with num_gpus 256, PP 4, EP 32, GBS 8192, cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess']; expert_tensor_parallel_size 1 (:32-34).",
    "layers_per_stage [1, 2 x 46, 1] (per model chunk, 48 chunks = PP 4 x VP 12): 96 / 4 = 24 per stage, / 12 = 2 per chunk; the first chunk holds the embedding and 1 layer, the last 1 layer and the loss (1 + 92 + 1 = 94).",
    SPLIT,
    REC_NONE_Q235,
    ep_note(False, f"{QW}:54-64 and :191-205 do not set it"),
    HYBRIDEP.format(where=f"{QW}:61; {QWP}:64-65 sets moe_token_dispatcher_type 'flex'"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{QW}:62 and :196"),
]))
entries.append(make("mbridge260401_b200_qwen3_235b_a22b_256gpu", gen="GB200", line=102, aline=255, key="qwen3_235b_a22b",
    **{**q235_common}, tok=5680, tfl=840, mbs=1, pp=8, vp=3, dp_layers=[3] + [4] * 22 + [3], notes=[
    f"Config object QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 ({QW}:224-227@21d102f5ec) = GB200_FP8_CS_V2 (:216-221: num_gpus 256, EP 32, GBS 8192) with VP 3; GB200_FP8_CS_V1 (:96-105): PP 8, moe_flex_dispatcher_backend 'hybridep', cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess']; MBS 1 (default, utils/utils.py:50); expert_tensor_parallel_size 1 (:32-34).",
    "layers_per_stage [3, 4 x 22, 3] (per model chunk, 24 chunks = PP 8 x VP 3): 96 / 8 = 12 per stage, / 3 = 4 per chunk; the first chunk holds the embedding and 3 layers, the last 3 layers and the loss (3 + 88 + 3 = 94).",
    SPLIT,
    REC_NONE_Q235,
    ep_note(False, f"{QW}:96-105 and :216-227 do not set it"),
    HYBRIDEP.format(where=f"{QW}:102; {QWP}:90-91 sets moe_token_dispatcher_type 'flex'"),
    cg_note("te", "['attn', 'moe_router', 'moe_preprocess']", f"{QW}:103-104"),
]))
entries.append(make("mbridge260401_b200_qwen3_235b_a22b_256gpu", gen="B300", line=103, aline=256, key="qwen3_235b_a22b",
    **{**q235_common, "ep": 8}, tok=5936, tfl=878, mbs=2, pp=8, vp=None, dp_layers=[11] + [12] * 6 + [11], notes=[
    f"Config object QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2 = B300_FP8_CS_V2 ({QW}:252 and :244-249@21d102f5ec: num_gpus 256, GBS 8192, MBS 2) on B300_FP8_CS_V1 (:123-131: PP 8, EP 8, moe_a2a_overlap False, moe_flex_dispatcher_backend 'hybridep'); no VP, no cuda_graph_impl; expert_tensor_parallel_size 1 (:32-34). Table 'VP n/a' -> vp null.",
    "layers_per_stage [11, 12 x 6, 11] (8 stages, no interleaving): 96 / 8 = 12 per stage; the first stage holds the embedding and 11 layers, the last 11 layers and the loss (11 + 72 + 11 = 94). The existing B200 260401 entry (PP 8, same recipe split) carries no layers_per_stage, so the reader splits it 12 x 6, 11 x 2 there.",
    SPLIT,
    REC_NONE_Q235,
    ep_note(False, f"{QW}:129, B300_FP8_CS_V1"),
    HYBRIDEP.format(where=f"{QW}:130; {QWP}:142-143 sets moe_token_dispatcher_type 'flex'"),
    cg_note("none", None, f"no cuda_graph_impl in B300_FP8_CS_V1/V2, so the model recipe's cuda_graph_impl 'none' stays ({QWR}:184@21d102f5ec)"),
]))

ids = [e["id"] for e in entries]
assert len(ids) == len(set(ids)) == 12
assert not (set(ids) & set(runs)), set(ids) & set(runs)
json.dump(entries, open("/work/helpers/mb2604m/entries.json", "w"), indent=1, ensure_ascii=False)
open("/work/helpers/mb2604m/entries.json", "a").write("\n")
for e in entries:
    p = e["parallel"]
    print(e["id"], e["hardware"]["gpus_per_node"], p["tp"], p["pp"], p["vp"], p["ep"], p["dp"], p["micro_batch"], p["recompute"], p["ep_overlap"], p.get("layers_per_stage") and len(p["layers_per_stage"]), e["measured"]["tokens_per_s"], e["precision"], e.get("fp8_scaling"), e["confidence"])
