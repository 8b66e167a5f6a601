"""llm-foundry's 'H100 80GB BF16 (Large Scale, >= 128 GPUs)' table (added 2024-01-06), 128 and 512 GPUs per model,
into the existing llm-foundry-benchmarks-readme / H100 family."""
import json, subprocess, sys
REPO = '/work/.mirror/mosaicml+llm-foundry/repo'
C = '5e85bd62d4ec9e13353ca95877477602ab538e5b'
readme = subprocess.run(['git', '-C', REPO, 'show', C + ':scripts/train/benchmarking/README.md'],
                        capture_output=True, text=True, check=True).stdout
sec = readme.split('## H100 80GB BF16 (Large Scale, >= 128 GPUs)')[1].split('\n## ')[0]
rows = []
for line in sec.splitlines():
    c = [x.strip() for x in line.strip().strip('|').split('|')]
    if len(c) == 20 and c[0].endswith('b') and c[1].isdigit():
        rows.append(c)
assert len(rows) == 18, len(rows)
SHAPE = {  # scripts/train/yamls/pretrain/mpt-{size}.yaml @ C: d_model, n_heads, n_layers (expansion 4, vocab 50368)
    '1b': (2048, 16, 24), '3b': (2560, 20, 32), '7b': (4096, 32, 32), '13b': (5120, 40, 40),
    '30b': (7168, 56, 48), '70b': (8192, 64, 80)}
ATTN = {'1b': 'flash', '3b': 'flash', '7b': 'flash', '13b': 'triton', '30b': 'triton', '70b': 'flash'}  # sweep.py @ C
out = []
for c in rows:
    (size, seq, gpus, gpu, mfu, hfu, tflop, mb, ga, gbs, sps, tps, tpsg, gbs_tok, prec, mp, shard, ac, offload, nparams) = c
    seq, gpus, mb, ga, gbs, tps, tpsg, nparams = int(seq), int(gpus), int(mb), int(ga), int(gbs), int(tps), int(tpsg), int(nparams)
    if gpus not in (128, 512):
        continue
    d, h, l = SHAPE[size]
    derived = 12 * l * d * d + 50368 * d + seq * d + 13 * l * d + 2 * d
    assert derived == nparams, (size, derived, nparams)
    assert gpus * mb * ga == gbs and gbs * seq == int(gbs_tok), c
    mfu_check = tpsg * (6 * nparams + 12 * l * d * seq) / 989e12
    zero = {'FULL_SHARD': 3, 'SHARD_GRAD_OP': 2}[shard]
    notes = [
        "README table 'H100 80GB BF16 (Large Scale, >= 128 GPUs)' (added by 5e85bd62, 2024-01-06) row: %s, SeqLen %d, %d GPUs, MFU %s%%, HFU %s%%, Model TFLOP %s, MicroBatch %d, GradAccum %d, GlobalBatch %d, %s S/s, %d T/s (%d T/s/GPU), precision %s, MP mode %s, %s, activation checkpointing %s, NumParams %d." % (
            size, seq, gpus, mfu, hfu, tflop, mb, ga, gbs, sps, tps, tpsg, prec, mp, shard, ac, nparams),
        "DERIVED check: %d x (6N + 12 l d s) / 989e12 = %.2f%% (published MFU %s%%), the README's MFU convention." % (tpsg, 100 * mfu_check, mfu),
        "Same family as the README's other H100 rows (the document's later table, a new measurement campaign on the MosaicML platform with main-branch llm-foundry installed as '.[gpu-flash2]', submit_benchmarks.py @ 5e85bd62); scripts/train/benchmarking/sweep.py at the same commit gives each model's settings: %s." % {
            'flash': "attn_impl flash (FlashAttention 2 from the gpu-flash2 extra) -> attention_kernel flash2",
            'triton': "attn_impl triton (MPT's Triton flash-attention kernel) -> attention_kernel left generic"}[ATTN[size]],
        "Layout: PyTorch FSDP %s -> zero_stage %d%s; GradAccum 1 (micro-batch = GlobalBatch / GPUs); activation checkpointing %s -> recompute %s. FSDP mixed precision %s (the table's column; sweep.py at this commit passes PURE, the table records what ran): bf16 compute with fp32 gradient reduction -> grad_precision fp32. forward_prefetch true, backward_prefetch BACKWARD_PRE, limit_all_gathers true (sweep.py)." % (
            shard, zero, ' (gradients and optimizer states sharded; parameters gathered for forward and kept through backward, with GradAccum 1 the same collectives as the plan\'s ZeRO-2)' if zero == 2 else '',
            ac, 'full' if ac == 'True' else 'none', mp),
        "pct_of_peak holds the published HFU (counts one recompute forward when activation checkpointing is on).",
        "Architecture (MPT, scripts/train/yamls/pretrain/mpt-%s.yaml): d_model %d, %d heads, %d layers, expansion_ratio 4, vocab 50,368; DERIVED from the published NumParams (12 l d^2 + 50368 d + s d + 13 l d + 2 d matches exactly): learned positions of length seq_len, biases, tied embeddings (the reading of the family's other rows)." % (size, d, h, l),
        "Hardware: 'h100_80gb' on the MosaicML platform (MFU normalised to 989 TFLOP/s -> SXM); nodes and network not stated (null, as the family's other rows).",
        "Not entered: the 256-GPU column (the smallest and largest column of the sweep are entered, as elsewhere in the corpus).",
    ]
    e = {
        "id": "mpt_%s_%dxh100_80gb_seq%d_gbs%d" % (size, gpus, seq, gbs),
        "source": "mosaicml/llm-foundry @ %s (2024-01-06): scripts/train/benchmarking/README.md table 'H100 80GB BF16 (Large Scale, >= 128 GPUs)'; per-model settings from scripts/train/benchmarking/sweep.py and submit_benchmarks.py, model dims from scripts/train/yamls/pretrain/mpt-%s.yaml at the same commit" % (C[:9], size),
        "family": {"source": "llm-foundry-benchmarks-readme", "framework": "llm-foundry", "gpu_generation": "H100"},
        "model": {"name": "MPT-%s (llm-foundry benchmark)" % size.upper(), "params_b": round(nparams / 1e9, 3), "layers": l, "hidden": d,
                  "heads": h, "ffn_hidden": 4 * d, "seq_len": seq, "vocab": 50368, "norm": "layernorm", "position": "learned",
                  "tied_embeddings": True, "bias": True},
        "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": gpus, "gpus_per_node": None, "interconnect": None},
        "parallel": {"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "vp": 1, "zero_stage": zero, "sequence_parallel": False,
                     "recompute": 'full' if ac == 'True' else 'none', "micro_batch": mb, "global_batch": gbs},
        "measured": {"tflops_per_gpu": None, "mfu": round(float(mfu) / 100, 4), "iteration_time_s": None, "tokens_per_s": tps,
                     "memory_gb": None, "pct_of_peak": round(float(hfu) / 100, 4), "aggregate_pflops": None},
        "precision": "bf16", "grad_precision": "fp32", "attention": "fused", "confidence": "medium", "notes": notes}
    if ATTN[size] == 'flash':
        e["attention_kernel"] = "flash2"
    out.append(e)
json.dump(out, sys.stdout, indent=1)
print()
