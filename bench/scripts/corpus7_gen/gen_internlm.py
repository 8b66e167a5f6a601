"""InternLM (InternEvo) 7B training-performance rows on A100 (doc/en/train_performance.md @ c18bec93)."""
import json, sys, subprocess
REPO = '/work/.mirror/InternLM+InternLM/repo'
C = 'c18bec9361684189aadf6ffb724f9dfe48288eb0'
doc = subprocess.run(['git', '-C', REPO, 'show', C + ':doc/en/train_performance.md'], capture_output=True, text=True).stdout

# parse the two FLOPS tables (TP | Zero1 | Pack | Ckpt | GPUs | Seq | MicroBsz | MicroNum | GlobalBsz | TGS | TFLOPS)
rows = []
for line in doc.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) == 11 and cells[0] in ('1', '2') and cells[2] in ('TRUE', 'FALSE'):
        rows.append(dict(tp=int(cells[0]), zero1=int(cells[1]), pack=cells[2] == 'TRUE', ckpt=cells[3] == 'TRUE',
                         gpus=int(cells[4]), seq=int(cells[5]), mb=int(cells[6]), mn=int(cells[7]), gbs_tok=cells[8],
                         tgs=int(cells[9]), tflops=int(cells[10])))
assert len(rows) == 22, len(rows)

L, H, V, F, S = 32, 4096, 103168, 11008, 2048
def megatron_flops_per_token(ckpt):
    # Narayanan et al. (SC21) eq. (3) per token: 96 B s l h^2 (1 + s/6h + V/16lh) / (B s) with recompute (4 passes);
    # without recompute 72 (3 passes).
    k = 96 if ckpt else 72
    return k * L * H * H * (1 + S / (6 * H) + V / (16 * L * H))

# which rows to enter: every row at 8 and 1024 GPUs of the sweep, and the rows whose batch differs from the sweep's
def keep(r):
    sweep_mb = 8 if r['ckpt'] else 2
    sweep_mn = 1 if r['ckpt'] else 4
    in_sweep = r['mb'] == sweep_mb and r['mn'] == sweep_mn
    return (in_sweep and r['gpus'] in (8, 1024)) or not in_sweep

out = []
for r in rows:
    if not keep(r):
        continue
    tokens_gpu = r['mb'] * r['mn'] * r['seq']
    # the table's Global Bsz (M tokens) = GPUs x tokens per GPU / 2^20
    gtok = r['gpus'] * tokens_gpu
    assert abs(gtok / 2**20 - float(r['gbs_tok'].rstrip('M'))) < 1e-9, r
    step = tokens_gpu / r['tgs']
    flops = megatron_flops_per_token(r['ckpt']) * r['tgs'] / 1e12
    tag = '%s_%dgpu_mb%d_mn%d' % ('ckpt' if r['ckpt'] else 'nockpt', r['gpus'], r['mb'], r['mn'])
    notes = [
        'Row of the \'FLOPS Testing\' table with Activation Ckpt %s: TP 1, Zero1 8, Pack Sample Into One TRUE, %d GPUs, Seq Len 2048, '
        'Micro Bsz %d, Micro Num %d, Global Bsz %s (tokens), TGS %d, TFLOPS %d.' % (
            'TRUE' if r['ckpt'] else 'FALSE', r['gpus'], r['mb'], r['mn'], r['gbs_tok'], r['tgs'], r['tflops']),
        'iteration_time_s DERIVED = Micro Bsz x Micro Num x 2048 tokens per GPU per step / TGS = %d x %d x 2048 / %d = %.4f s; '
        'tokens_per_s DERIVED = TGS x GPUs = %d x %d = %d (global). global_batch DERIVED = GPUs x Micro Bsz x Micro Num = %d '
        'sequences (the table\'s Global Bsz %s tokens = %d x 2048 / 2^20).' % (
            r['mb'], r['mn'], r['tgs'], step, r['tgs'], r['gpus'], r['tgs'] * r['gpus'], r['gpus'] * r['mb'] * r['mn'],
            r['gbs_tok'], r['gpus'] * r['mb'] * r['mn']),
        'TFLOPS is kept in the notes: the doc says it follows the Megatron paper (Narayanan et al. SC21, eq. 3); that formula '
        'with this model (l 32, h 4096, s 2048, V 103,168%s) gives %.1f TFLOP/s per GPU at this TGS against the published %d '
        '(a check of the reading, not an entered figure; the formula assumes a 4h GELU MLP where the model has a SwiGLU of 11,008).'
        % (', x 4/3 for the recomputed forward' if r['ckpt'] else '', flops, r['tflops']),
        'Layout: pure data parallelism (dp = GPUs), micro-batch = Micro Bsz packed samples of 2048 tokens each (configs/7B_sft.py: '
        '\'packed_length = micro_bsz * SEQ_LEN\'; with pack_sample_into_one the cu_seqlens cut every 2048 tokens, so attention '
        'runs over 2048-token windows: micro_batch Micro Bsz x seq 2048), gradient accumulation Micro Num. recompute %s: '
        'model.checkpoint %s (internlm/model/modeling_internlm.py: every layer wrapped in activation_checkpoint when '
        'checkpoint_fraction 1.0)%s.' % (
            'full' if r['ckpt'] else 'none', 'True' if r['ckpt'] else 'False',
            '' if r['ckpt'] else '; with checkpoint off, dropout_selective_checkpoint re-runs the dropout + RMSNorm of each '
            'residual branch in backward (drop_rate 0; elementwise, not modelled)'),
        'zero1=8 (HybridZeroOptimizer, internlm/solver/optimizer/hybrid_zero_optim.py @ c18bec93): the fp32 master weights and '
        'Adam states are sharded over the 8 GPUs of a node and replicated across nodes. Its gradients are ALL-REDUCED whole over '
        'all data-parallel ranks (reduce_tensor with dst_rank None, in bf16, buckets of 512 Mi elements (1 GiB in bf16: '
        '_store_and_try_reduce_grads_by_bucket compares reduce_bucket_size with element counts), started from the backward hooks of '
        'the last micro-batch only: skip_grad_reduce on the others, no_pipeline_scheduler.py), each bucket after a '
        'torch.cuda.synchronize(); after the step each shard owner broadcasts its bf16 parameters within the node. Entered as '
        'zero_stage 1 with zero_shard_size 8 (the plan\'s hybrid sharding: reduce-scatter in the node, all-reduce of the shard '
        'across nodes, all-gather in the node), which moves the same bytes across nodes as a hierarchical all-reduce of the '
        'whole gradient; the host synchronize per bucket has no plan field.',
        'Model (configs/7B_sft.py and modeling_internlm.py @ c18bec93): 32 layers, hidden 4096, 32 heads (MHA), MLP_RATIO 8/3 '
        '-> FeedForward rounds int(4096 x 8/3) = 10922 up to a multiple of 256 = 11,008 (SwiGLU, w1/w2/w3, no bias), vocab '
        '103,168, RMSNorm (apex MixedFusedRMSNorm), rotary embeddings, separate output head (untied), bf16 '
        '(dtype torch.bfloat16). The attention\'s QKV and output projections carry biases (MHA Wqkv bias=True, out_proj) '
        'while the MLP has none: the model\'s boolean bias cannot say \'attention only\', so bias false is entered (the '
        'biases add 16k parameters per layer).',
        'Kernels: FlashAttention v1.0.5 (doc/en/install.md) through flash_attn.modules.mha FlashSelfAttention (varlen), '
        'flash_attn fused dense, apex fused RMSNorm, flash_attn\'s CrossEntropyLoss (fused; cross_entropy default). '
        'attention_kernel left generic: the simulator holds published FlashAttention rates for Hopper only.',
        'grad_precision compute: the gradients live in the bf16 parameters\' .grad and are all-reduced in bf16 (self.dtype); '
        'the fp32 master copy is updated from them.',
        'Hardware (the doc\'s table): GPU nvidia_a100-sxm4-80gb, 2 TB host memory, \'Inter-machine bandwidth 4 * 100Gb RoCE\' '
        '(entered as 4 NICs of 100 Gb/s per node), 128-core Intel Xeon. 8 GPUs per node from the doc\'s own text (\'zero1=8 ... '
        'within 8 GPUs in a single node\'). NVLink/NVSwitch not stated (an SXM4 8-GPU node ASSUMED, the preset\'s).',
        'Software (doc/en/install.md @ c18bec93): CUDA 11.7, PyTorch 1.13.1, FlashAttention v1.0.5, Apex 23.05. The doc is from '
        'the repository\'s first week (initial commit fa7337b 2023-07-06; TFLOPS row corrected in c18bec93 2023-07-08); '
        'InternLM\'s training code later moved to InternLM/InternEvo.',
    ]
    out.append({
        "id": "internlm2307_a100_7b_%s" % tag,
        "source": "InternLM/InternLM @ %s (2023-07-08): doc/en/train_performance.md, 'FLOPS Testing' tables; model and settings from configs/7B_sft.py, internlm/model/modeling_internlm.py, internlm/model/linear.py, internlm/solver/optimizer/hybrid_zero_optim.py, internlm/core/no_pipeline_scheduler.py, doc/en/install.md at the same commit" % C[:8],
        "family": {"source": "internlm-train-performance-2023-07", "framework": "internevo", "gpu_generation": "A100"},
        "model": {"name": "InternLM 7B (configs/7B_sft.py)", "params_b": 7.3, "layers": L, "hidden": H, "heads": 32,
                  "ffn_hidden": F, "seq_len": S, "vocab": V, "activation": "swiglu", "norm": "rmsnorm", "position": "rope",
                  "tied_embeddings": False, "bias": False},
        "hardware": {"gpu": "A100-SXM4-80GB", "num_gpus": r['gpus'], "gpus_per_node": 8,
                     "interconnect": "A100-SXM4-80GB nodes of 8; inter-machine 4 x 100 Gb RoCE per node (the doc's table)",
                     "nics_per_node": 4, "nic_Gbps": 100},
        "parallel": {"tp": 1, "pp": 1, "dp": r['gpus'], "cp": 1, "vp": 1, "zero_stage": 1, "zero_shard_size": min(8, r['gpus']),
                     "sequence_parallel": False, "recompute": "full" if r['ckpt'] else "none", "micro_batch": r['mb'],
                     "global_batch": r['gpus'] * r['mb'] * r['mn']},
        "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": round(step, 4),
                     "tokens_per_s": r['tgs'] * r['gpus'], "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
        "precision": "bf16", "grad_precision": "compute", "attention": "fused", "confidence": "medium", "notes": notes})
json.dump(out, sys.stdout, indent=1)
print()
