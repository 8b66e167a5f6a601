"""MLPerf Training entries for corpus7: Nebius H200 Llama 3.1 405B (v5.0), HPE H200 Llama 3.1 8B (v5.1),
Supermicro H100 GPT-3 (v4.0). Reads the fetched mirrors with git show; prints a JSON list."""
import json, os, statistics, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mllog

M = '/work/.mirror/mlcommons+training_results_v{}/repo'

def commit(repo):
    return subprocess.run(['git', '-C', repo, 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()

def ls(repo, folder):
    out = subprocess.run(['git', '-C', repo, 'ls-tree', '--name-only', 'HEAD', folder + '/'],
                         capture_output=True, text=True).stdout.split()
    return sorted(f for f in out if f.endswith('.txt'))

def timing(repo, folder):
    logs = mllog.summarize(repo, 'HEAD', ls(repo, folder))
    assert all(l['status'] == 'success' for l in logs), folder
    gbs = {l['gbs'] for l in logs}; ga = {l['ga'] for l in logs}; seq = {l['seq'] for l in logs}
    steps = {s for l in logs for s in l['steps']}
    assert len(gbs) == len(ga) == len(seq) == 1, (gbs, ga, seq)
    med = statistics.median(l['median'] for l in logs)
    parts = []
    for l in logs:
        parts.append('%s: median %.4g s (min %.4g, max %.4g, %d blocks)' % (
            l['path'].split('/')[-1], l['median'], l['min'], l['max'], l['nblocks']))
    timers = []
    for l in logs:
        # per-step timer entries only (the per-block ones in mlperf_common are averages of a block)
        per_step = [e['value']['train_step_time'] for e in l['ev'] if e['key'] == 'tracked_stats'
                    and isinstance(e['value'], dict) and 'train_step_time' in e['value']
                    and 'throughput' not in e['value']]
        per_step += [e['value']['train_step_timing'] for e in l['ev'] if e['key'] == 'tracked_stats'
                     and isinstance(e['value'], dict) and 'train_step_timing' in e['value']]
        if per_step:
            timers.append(statistics.median(per_step))
    mems = sorted({m for l in logs for m in l['mem']})
    return dict(gbs=gbs.pop(), ga=ga.pop(), seq=seq.pop(), steps=sorted(steps), step=med, n=len(logs),
                parts=parts, timers=timers, mems=mems, method=logs[0]['method'])

def timing_notes(t, tokens_note=True):
    n = []
    n.append('Result logs (%d, all run_stop status success): each logs global_batch_size %d, gradient_accumulation_steps %g, '
             'max_sequence_length %d; training is timed in blocks between evaluations (block_start to block_stop, '
             'evaluation excluded); steps per block: %s (%s).' % (t['n'], t['gbs'], t['ga'], t['seq'],
                                                                 ', '.join('%g' % s for s in t['steps']), t['method']))
    s = ('iteration_time_s DERIVED = median over the %d result logs of each log\'s median block time / steps per block: '
         % t['n']) + '; '.join(t['parts']) + '. tokens_per_s DERIVED = %d x %d / step (global).' % (t['gbs'], t['seq'])
    if t['timers']:
        s += (' Cross-check: the logs\' per-step tracked_stats timer (train_step_time / train_step_timing, the '
              'framework\'s own step timer) has medians ' + ', '.join('%.4g' % x for x in t['timers']) + ' s.')
    n.append(s)
    return n

LLAMA405 = {
    "name": "Llama 3.1 405B (MLPerf llama31_405b reference, Mixtral 8x22B tokenizer)",
    "params_b": 405.0, "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn_hidden": 53248,
    "seq_len": 8192, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm", "position": "rope",
    "tied_embeddings": False, "bias": False}
LLAMA8 = {
    "name": "Llama 3.1 8B (MLPerf llama31_8b reference)", "params_b": 8.03, "layers": 32, "hidden": 4096,
    "heads": 32, "ffn_hidden": 14336, "seq_len": 8192, "vocab": 128256, "kv_heads": 8, "activation": "swiglu",
    "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "bias": False}
GPT3 = {
    "name": "GPT-3 175B (MLPerf gpt3 reference)", "params_b": 175.0, "layers": 96, "hidden": 12288, "heads": 96,
    "ffn_hidden": 49152, "seq_len": 2048, "vocab": 50257, "activation": "gelu", "norm": "layernorm",
    "position": "learned", "tied_embeddings": True, "bias": True}

def measured(t):
    return {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": round(t['step'], 4),
            "tokens_per_s": round(t['gbs'] * t['seq'] / t['step']), "memory_gb": None,
            "pct_of_peak": None, "aggregate_pflops": None}

out = []

# ---- v5.0 Nebius H200 Llama 3.1 405B ----
r50 = M.format('5.0'); c50 = commit(r50)
for nodes, ga in ((64, 144), (128, 72)):
    gpus = nodes * 8
    impl = 'Nebius/benchmarks/llama31_405b/implementations/nebius_soperator_8xH200_n%d_ngc25.01_nemo' % nodes
    cfg = 'config_DGXH200_%dx8x%dxtp4pp8cp2.sh' % (nodes, ga)
    res = 'Nebius/results/nebius_soperator_8xH200_n%d_ngc25.01_nemo/llama31_405b' % nodes
    t = timing(r50, res)
    tp, pp, cp, vp, mbs = 4, 8, 2, 8, 1
    dp = gpus // (tp * pp * cp)
    assert dp * mbs * t['ga'] == t['gbs'] and t['ga'] == ga, (dp, t)
    chunks = pp * vp
    lps = [1] + [2] * (chunks - 2) + [1]
    assert sum(lps) == 126
    notes = timing_notes(t)
    notes.append('Layout from %s (+ config_common.sh): TENSOR_MODEL_PARALLEL 4, PIPELINE_MODEL_PARALLEL 8, '
                 'INTERLEAVED_PIPELINE 8, CONTEXT_PARALLEL 2, MICRO_BATCH_SIZE 1, MINIBS %d; dp DERIVED = %d / (4 x 8 x 2) = %d; '
                 'dp x mbs x GA = %d x 1 x %d = %d, the logged global batch.' % (cfg, ga, gpus, dp, dp, ga, dp * ga))
    notes.append('layers_per_stage (per model chunk, 64 chunks): ASYM_PP_EMBED=True and ASYM_PP_LOSS=True count the embedding '
                 'and the loss as one layer each when Megatron-Core splits the pipeline (126 + 2 = 128 = 2 per chunk): the first '
                 'chunk holds the embedding and 1 transformer layer, the last 1 layer and the loss, the other 62 chunks 2 layers '
                 '(the reading of the NVIDIA v5.0 entries, whose files these are).')
    notes.append('The implementation is NVIDIA\'s v5.0 llama31_405b code: pretrain.py, custom_callbacks.py, conf/custom.yaml, '
                 'conf/llama31_config_custom.yaml and the Dockerfile (PyTorch 25.01, NeMo v2.2.0, Megatron-Core core_r0.11.0) are '
                 'byte-identical to NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo (same git blobs); '
                 'config_common.sh differs only in leaving NCCL_NVLS_ENABLE=0 commented out (NVLink SHARP allowed).')
    notes.append('Settings (config_common.sh): USE_DIST_OPTIMIZER=True (zero_stage 1), OVERLAP_GRAD_REDUCE / OVERLAP_PARAM_GATHER '
                 '(+ ALIGN_PARAM_GATHER, with the optimizer step), grad_reduce_in_fp32=False in pretrain.py (grad_precision compute), '
                 'sequence parallel (default True), TP_COMM_OVERLAP with MC_TP_OVERLAP_AG/RS (tp_comm_overlap), FP8_PARAMS=True (FP8 '
                 'parameter all-gather, not modelled), DEFER_EMBEDDING_WGRAD_COMPUTE, cross-entropy loss fusion. No activation '
                 'recompute (pretrain.py builds Llama31Config405B without recompute settings).')
    notes.append('precision fp8, fp8_scaling delayed: FP8=True with FP8_HYBRID unset (E4M3 both ways), custom.yaml\'s fp8_recipe '
                 'default \'delayed\', amax history 1, most_recent. fp8_weight_cache: Transformer Engine casts each weight once per '
                 'step (is_first_microbatch, Megatron-Core), as the NVIDIA v5.0 entries read the same code.')
    notes.append('attention_kernel cudnn: NVTE_FUSED_ATTN=0 is commented out in config_common.sh, so Transformer Engine\'s cuDNN '
                 'fused attention runs on Hopper.')
    notes.append('Model: the MLPerf reference table (mlcommons/training large_language_model_pretraining/nemo/README.md, as the '
                 'NVIDIA v5.0 entries cite it): 126 layers, 128 heads, 8 KV heads, hidden 16,384, FFN 53,248, SwiGLU, RMSNorm, '
                 'RoPE, context 8,192, vocab 32,000 (Mixtral 8x22B tokenizer), untied, no biases.')
    notes.append('Hardware: Nebius/systems/nebius_soperator_8xH200_n%d_ngc25.01_nemo.json: NVIDIA H200-SXM5-141GB (143,771 MiB), '
                 '8 per node, NVLink Gen4 900 GB/s + NVSwitch Gen3, host networking 8x ConnectX-7 IB NDR 400 Gb/s (+ a 200 Gb/s '
                 'Ethernet NIC); \'Available cloud\'. The H200 power setting is not stated (preset H200-141GB).' % nodes)
    notes.append('Memory NOT entered: the logs\' tracked_stats max_memory_usage (NVIDIA/mlperf-common callbacks/logging.py since '
                 '53f892f8, 2025-02-27: round(torch.cuda.max_memory_allocated() / 1024^3, 3), logged by global rank 0 only) reads '
                 '%s GiB at every block. Rank 0 is the first pipeline stage and first TP/CP rank; the corpus compares memory_gb '
                 'with the peak over all ranks, and with pp 8 the first stage is not shown to be the peak (the nanotron '
                 'convention: memory only where pp = 1), so the figure stays here.' % ', '.join('%g' % m for m in t['mems']))
    notes.append('The same three result logs were resubmitted in MLPerf Training v5.1 (mlcommons/training_results_v5.1 @ 441d65f4, '
                 'Nebius/results/nebius_h200_n%d/llama31_405b: identical git blobs); entered once, here.' % nodes)
    notes.append('The runs resume from Meta\'s Llama 3.1 405B checkpoint; the first block includes the first steps after '
                 'warm-up (its time per step is the largest of each log, min/max above).')
    out.append({
        "id": "mlperf50_nebius_llama31_405b_%dgpu_h200_fp8" % gpus,
        "source": ("mlcommons/training_results_v5.0 @ %s: %s/result_*.txt (MLPerf Training v5.0 closed division, Nebius, "
                   "%dx 8x H200 'soperator' cluster, NeMo on the PyTorch 25.01 container) and %s/%s, config_common.sh, "
                   "conf/custom.yaml, pretrain.py, Dockerfile, Nebius/systems/nebius_soperator_8xH200_n%d_ngc25.01_nemo.json at "
                   "the same commit; model table from mlcommons/training large_language_model_pretraining/nemo/README.md"
                   % (c50[:8], res, nodes, impl, cfg, nodes)),
        "family": {"source": "mlperf-training-v5.0-nebius-llama31-405b", "framework": "nemo", "gpu_generation": "H200"},
        "model": dict(LLAMA405),
        "hardware": {"gpu": "H200-SXM5-141GB", "num_gpus": gpus, "gpus_per_node": 8,
                     "interconnect": "Nebius 8x H200 nodes: NVLink Gen4 900 GB/s + NVSwitch Gen3; compute network 8x ConnectX-7 IB NDR 400 Gb/s per node (systems JSON)"},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vp": vp, "zero_stage": 1, "sequence_parallel": True,
                     "recompute": "none", "micro_batch": mbs, "global_batch": t['gbs'], "tp_comm_overlap": True,
                     "overlap_grad_reduce": True, "layers_per_stage": lps},
        "measured": measured(t),
        "precision": "fp8", "fp8_scaling": "delayed", "fp8_weight_cache": True, "grad_precision": "compute",
        "attention": "fused", "attention_kernel": "cudnn", "confidence": "medium", "notes": notes})

# ---- v5.1 HPE H200 Llama 3.1 8B (8 nodes) ----
r51 = M.format('5.1'); c51 = commit(r51)
impl = 'HPE/benchmarks/llama3_8b/implementations/nemo-x86_64'
cfg = 'config_XD670_8x8x1xtp1pp1cp2_8b.sh'
res = 'HPE/results/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09/llama31_8b'
t = timing(r51, res)
gpus, tp, pp, cp, mbs = 64, 1, 1, 2, 1
dp = gpus // (tp * pp * cp)
assert dp * mbs * t['ga'] == t['gbs'], (dp, t)
notes = timing_notes(t)
notes.append('Layout from %s: TENSOR_MODEL_PARALLEL 1, SEQ_PARALLEL False, PIPELINE_MODEL_PARALLEL 1, CONTEXT_PARALLEL 2, '
             'TP_COMM_OVERLAP False, MICRO_BATCH_SIZE 1, MINIBS 1, DGXNNODES 8; dp DERIVED = 64 / 2 = 32; dp x mbs x GA = '
             '32 x 1 x 1 = 32, the logged global batch.' % cfg)
notes.append('The implementation is NVIDIA\'s v5.1 llama31_8b code: pretrain.py, custom_callbacks.py, conf/custom.yaml, '
             'config_common.sh and config_common_cg.sh are byte-identical to University-of-Florida/benchmarks/llama31_8b/'
             'implementations/b200_nemo (the files of the mlperf-training-v5.1-uf-llama31 entries); config_common_8b.sh differs '
             'only in the NVFP4 switches (unused here); the Dockerfile builds on PyTorch 25.08 instead of 25.09 and applies a '
             'one-line Transformer Engine userbuffers patch (te.patch).')
notes.append('Settings: USE_DIST_OPTIMIZER=True (zero_stage 1), OVERLAP_GRAD_REDUCE / OVERLAP_PARAM_GATHER, '
             'grad_reduce_in_fp32=False (grad_precision compute); config_common_8b.sh: USE_TE_OPS, FUSED_QKV_ROPE, '
             'CE_FUSION_IMPL te (fused cross-entropy); config_common_cg.sh: FULL_CUDA_GRAPH=1 (not modelled: the plan has no '
             'CUDA-graph field). No activation recompute.')
notes.append('precision fp8, fp8_scaling current: FP8=True, FP8_RECIPE \'tensorwise\' (current scaling), FP8_HYBRID=True '
             '(E4M3 forward / E5M2 backward); fp8_weight_cache (TE, is_first_microbatch), as the UF entries read the same code. '
             'config_common_fp8attn.sh sets FP8_DPA=True (attention in FP8, hybrid format): NOT expressible, the plan has no '
             'field for the attention\'s precision; the entry\'s attention is costed in BF16.')
notes.append('attention_kernel cudnn: Transformer Engine\'s cuDNN fused attention (NVTE_FUSED_ATTN not disabled) on Hopper.')
notes.append('Model: Llama 3.1 8B (pretrain.py\'s Llama31Config8B, OVERWRITTEN_NUM_LAYERS 32): 32 layers, hidden 4096, 32 heads, '
             '8 KV heads, FFN 14,336, vocab 128,256, RMSNorm, SwiGLU, RoPE, untied.')
notes.append('Hardware: HPE/systems/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09.json: 8 nodes of 8 NVIDIA H200-SXM5-141GB, '
             '\'8x 4th Gen NVLink, 900GB/s\', host networking 8x HPE InfiniBand NDR/Ethernet 400Gb 1-port OSFP adapters (plus '
             '8x Slingshot 200Gb Ethernet); which fabric NCCL used is not stated (8 x 400 Gb/s per node ASSUMED, the preset\'s).')
notes.append('No memory figure in these logs (the v5.1 mlperf-common logs no max_memory_usage).')
out.append({
    "id": "mlperf51_hpe_llama31_8b_64gpu_h200_fp8",
    "source": ("mlcommons/training_results_v5.1 @ %s: %s/result_*.txt (MLPerf Training v5.1 closed division, HPE, 8x HPE Cray "
               "XD670 with 8x H200-SXM5-141GB, NeMo on the PyTorch 25.08 container) and %s/%s, config_common.sh, "
               "config_common_8b.sh, config_common_cg.sh, config_common_fp8attn.sh, conf/custom.yaml, pretrain.py, Dockerfile, "
               "HPE/systems/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09.json at the same commit" % (c51[:8], res, impl, cfg)),
    "family": {"source": "mlperf-training-v5.1-hpe-llama31", "framework": "nemo", "gpu_generation": "H200"},
    "model": dict(LLAMA8),
    "hardware": {"gpu": "H200-SXM5-141GB", "num_gpus": gpus, "gpus_per_node": 8,
                 "interconnect": "HPE Cray XD670 H200: 4th-gen NVLink 900 GB/s; 8x InfiniBand NDR 400 Gb/s adapters per node (systems JSON)"},
    "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vp": 1, "zero_stage": 1, "sequence_parallel": False,
                 "recompute": "none", "micro_batch": mbs, "global_batch": t['gbs'], "overlap_grad_reduce": True},
    "measured": measured(t),
    "precision": "fp8", "fp8_scaling": "current", "fp8_weight_cache": True, "grad_precision": "compute",
    "attention": "fused", "attention_kernel": "cudnn", "confidence": "medium", "notes": notes})

# ---- v4.0 Supermicro (smc) H100 GPT-3 175B, 64 nodes ----
r40 = M.format('4.0'); c40 = commit(r40)
impl = 'smc/benchmarks/gpt3/implementations/nemo'
cfg = 'config_SMCH100_64x8x128x4x8.sh'
res = 'smc/results/64xSMC-H100-SXM-80GB/gpt3'
t = timing(r40, res)
gpus, tp, pp, vp, mbs = 512, 4, 8, 12, 2
dp = gpus // (tp * pp)
assert dp * mbs * t['ga'] == t['gbs'], (dp, t)
notes = timing_notes(t)
notes.append('Layout from %s (+ config_common.sh, config_fp8.sh): TENSOR_MODEL_PARALLEL 4, PIPELINE_MODEL_PARALLEL 8, MINIBS 128, '
             'MICRO_BATCH_SIZE 2 (config_common.sh); dp DERIVED = 512 / (4 x 8) = 16; dp x mbs x GA = 16 x 2 x 64 = 2048, the '
             'logged global batch. vp 12: the SMC config, unlike NVIDIA\'s config_DGXH100_64x8x128x4x8_mbs2.sh of the same '
             'commit (INTERLEAVED_PIPELINE=4), sets no INTERLEAVED_PIPELINE, and conf/custom.yaml defaults '
             'virtual_pipeline_model_parallel_size to 12 (1 layer per chunk); nothing else in the folder sets it (git grep).' % cfg)
notes.append('The implementation is NVIDIA\'s v4.0 gpt3 code: config_common.sh, config_fp8.sh, megatron_gpt_pretraining_custom.py, '
             'custom_callbacks.py and conf/megatron_gpt_config_custom.yaml are byte-identical to NVIDIA/benchmarks/gpt3/'
             'implementations/nemo at the same commit (the files of the mlperf-training-v4.0-nvidia-gpt3 entries); the Dockerfile '
             'pins Transformer Engine 9e4091e7 instead of v1.6rc1 and NeMo / Megatron-Core branches r2.0.0.rc0.beta / '
             'core_r0.7.0.beta instead of the v2.0.0.rc0.beta / core_v0.7.0.beta tags.')
notes.append('Settings: USE_DIST_OPTIMIZER=True (distributed_fused_adam, bf16 grad sync -> zero_stage 1, grad_precision compute), '
             'SEQ_PARALLEL default True, no activation checkpointing (ACT_CKPT_GRANULARITY null), TP_COMM_OVERLAP=True with '
             'MC_TP_OVERLAP_AG/RS (userbuffers) -> tp_comm_overlap, FP8_PARAMS=True (not modelled).')
notes.append('precision fp8, fp8_scaling delayed: config_fp8.sh FP8=True, FP8_HYBRID, FP8_AMAX_HISTORY 1024, FP8_AMAX_ALGO max. '
             'fp8_weight_cache: Megatron-Core core_r0.7.0.beta (the branch of the v4.0 NVIDIA entries\' core_v0.7.0.beta tag) '
             'passes is_first_microbatch to Transformer Engine, as corpus6 read for the NVIDIA v4.0 entries.')
notes.append('attention_kernel cudnn: Transformer Engine\'s fused attention is left on (NVTE_FUSED_ATTN not set), cuDNN on Hopper.')
notes.append('Model: as the NVIDIA v4.0 entries (conf/custom.yaml: 96 layers, hidden 12288, 96 heads, FFN 4 x hidden, seq 2048; '
             'learned positions, tied embeddings, biases, GELU; vocab 50,257 ASSUMED from the MLPerf C4 SentencePiece vocabulary).')
notes.append('Hardware: smc/systems/64xSMC-H100-SXM-80GB.json: 64 nodes of 8 NVIDIA H100-SXM5-80GB, NVLink Gen4 900 GB/s + '
             'NVSwitch Gen3, \'Infiniband NDR\' (NIC count not stated; the preset\'s 8 x 400 Gb/s per node ASSUMED); '
             'PyTorch NVIDIA Release 24.04.')
notes.append('The smc-ac-power and smc-dc-power folders of the same commit hold power-measurement runs of the same configuration '
             '(not entered: the same plan on the same system).')
out.append({
    "id": "mlperf40_smc_gpt3_175b_512gpu_h100_fp8",
    "source": ("mlcommons/training_results_v4.0 @ %s: %s/result_*.txt (MLPerf Training v4.0 closed division, Supermicro, 64 nodes "
               "of 8x H100-SXM5-80GB, NeMo on the PyTorch 24.04 container) and %s/%s, config_common.sh, config_fp8.sh, "
               "conf/custom.yaml, Dockerfile, smc/systems/64xSMC-H100-SXM-80GB.json at the same commit" % (c40[:8], res, impl, cfg)),
    "family": {"source": "mlperf-training-v4.0-smc-gpt3", "framework": "nemo", "gpu_generation": "H100"},
    "model": dict(GPT3),
    "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": gpus, "gpus_per_node": 8,
                 "interconnect": "Supermicro H100 SXM5 nodes: NVLink Gen4 900 GB/s + NVSwitch Gen3; InfiniBand NDR (systems JSON; NIC count not stated)"},
    "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "vp": vp, "zero_stage": 1, "sequence_parallel": True,
                 "recompute": "none", "micro_batch": mbs, "global_batch": t['gbs'], "tp_comm_overlap": True,
                 "overlap_grad_reduce": True},
    "measured": measured(t),
    "precision": "fp8", "fp8_scaling": "delayed", "fp8_weight_cache": True, "grad_precision": "compute",
    "attention": "fused", "attention_kernel": "cudnn", "confidence": "medium", "notes": notes})

json.dump(out, sys.stdout, indent=1)
print()
