"""TinyLlama's README throughput (jzhang38/TinyLlama) for corpus9.

The README gives one measured figure: 24k tokens per second per A100-40G GPU for TinyLlama-1.1B,
"without activation checkpointing", with its 56% MFU, and, for the same codebase, 3456 A100 GPU
hours for 300B tokens. The layout is the repository's own pretrain/tinyllama.py at the commit below
(Lightning Fabric FSDP, micro-batch 8, 64 sequences per device per step), run on the README's
16 A100-40G GPUs as PRETRAIN.md launches them (2 nodes x 8). The generator asserts the parameter
count against the README's 1.1B, the tokens/s against the GPU-hours figure, and the MFU against
lit_gpt's own FLOP estimate (speed_monitor.estimate_flops); prints a JSON list."""
import json, subprocess, sys

REPO = '/work/.mirror/jzhang38+TinyLlama/repo'
COMMIT = 'bf12224'
full = subprocess.run(['git', '-C', REPO, 'rev-parse', COMMIT], capture_output=True, text=True).stdout.strip()
assert full.startswith(COMMIT), full


def show(path):
    return subprocess.run(['git', '-C', REPO, 'show', '%s:%s' % (full, path)], capture_output=True,
                          text=True, check=True).stdout


readme, script, cfg, pretrain_md = (show('README.md'), show('pretrain/tinyllama.py'),
                                    show('lit_gpt/config.py'), show('PRETRAIN.md'))
# The figures and settings below are checked against the files, so a misread fails here.
for s in ('throughput of **24k** tokens per second per A100-40G GPU', '**56% model flops utilization**',
          'without activation checkpointing', '|TinyLlama-1.1B                     | 3456 ',
          '| 16 A100-40G GPUs ', '2 million tokens (2048 * 1024)', 'Sequence Length                 | 2048',
          'Layers: 22, Heads: 32, Query Groups: 4, Embedding Size: 2048, Intermediate Size (Swiglu): 5632'):
    assert s in readme, s
for s in ('num_of_devices = 8', 'global_batch_size = 512', 'micro_batch_size = 8',
          'batch_size = global_batch_size // num_of_devices', 'activation_checkpointing_policy=None',
          'auto_wrap_policy={Block}', 'limit_all_gathers=True', 'FSDPStrategy(',
          'fabric.no_backward_sync(model, enabled=is_accumulating)', 'loss_func = FusedCrossEntropyLoss()'):
    assert s in script, s
assert 'torch.compile' not in script
for s in ('name="tiny_LLaMA_1b"', 'n_layer=22', 'n_embd=2048', 'n_query_groups=4', 'intermediate_size=5632',
          'vocab_size=32000', 'block_size=2048', '_norm_class="FusedRMSNorm"', '_mlp_class="LLaMAMLP"'):
    assert s in cfg, s
assert '--num-nodes=2' in pretrain_md and '--devices=8' in pretrain_md

L, H, HEADS, KV, FFN, V, S = 22, 2048, 32, 4, 5632, 32000, 2048
HD = H // HEADS
layer = H * H + 2 * H * KV * HD + H * H + 3 * H * FFN + 2 * H   # q, k+v, proj, SwiGLU, 2 RMSNorm
N = L * layer + 2 * V * H + H                                   # + wte, lm_head (untied), final norm
assert abs(N / 1e9 - 1.1) < 0.01, N
GPUS, NODES = 16, 2
TPS_GPU = 24000
# 3456 GPU hours for 300B tokens (README table) -> tokens/s per GPU
tps_hours = 300e9 / (3456 * 3600)
assert abs(tps_hours / TPS_GPU - 1) < 0.01, tps_hours
# lit_gpt speed_monitor.estimate_flops: 3 x (2 n_params s + 4 l h s^2) per sequence of s tokens
# against 312 TFLOP/s (bf16-mixed, A100). With all 1.1B parameters it gives 59%; the README's 56%
# matches the count without the input embedding (wte), 1.035B.
def mfu(n):
    per_seq = 3 * (2 * n * S + L * 2 * 2 * H * S * S)
    return per_seq / S * TPS_GPU / 312e12
mfu_all, mfu_nowte = mfu(N), mfu(N - V * H)
assert abs(mfu_nowte - 0.56) < 0.005 and abs(mfu_all - 0.59) < 0.01, (mfu_all, mfu_nowte)
per_device = 512 // 8            # batch_size = global_batch_size // num_of_devices (8, fixed in the script)
micro = 8
gbs = per_device * GPUS
assert gbs * S == 2048 * 1024    # the README's 2M-token batch
step = gbs * S / (TPS_GPU * GPUS)

notes = [
    'jzhang38/TinyLlama @ %s README.md, "Blazingly Fast": "we achieve a throughput of 24k tokens per second per '
    'A100-40G GPU, which translates to 56%% model flops utilization without activation checkpointing"; "Training '
    'Details": 1.1B parameters, 22 layers, 32 heads, 4 query groups, embedding 2048, SwiGLU intermediate 5632, '
    'sequence 2048, batch 2 million tokens (2048 * 1024), hardware 16 A100-40G GPUs.' % full[:10],
    'tokens_per_s DERIVED = 24,000 x 16 GPUs (global); iteration_time_s DERIVED = 1024 x 2048 / 384,000 = %.3f s. '
    'The figure is given to two significant digits (+-2%%). Checks: the README\'s own table "A100 GPU hours taken on '
    '300B tokens": TinyLlama-1.1B 3456 -> %.0f tokens/s per GPU; lit_gpt\'s MFU estimate (speed_monitor.py '
    'estimate_flops: 3 x (2 N s + 4 l h s^2) per sequence, 312 TFLOP/s for bf16-mixed on A100) gives %.1f%% with '
    'all %.3fB parameters and %.1f%% without the input embedding, against the published 56%%.'
    % (step, tps_hours, 100 * mfu_all, N / 1e9, 100 * mfu_nowte),
    'Layout from pretrain/tinyllama.py at the same commit: num_of_devices = 8 (fixed), global_batch_size 512, '
    'micro_batch_size 8 -> batch_size = 512 // 8 = 64 sequences per device per optimizer step, gradient '
    'accumulation 64 / 8 = 8 micro-batches; on 16 GPUs that is 1024 sequences, the README\'s 2M-token batch. '
    '16 GPUs = 2 nodes x 8 (PRETRAIN.md: lightning run model --devices=8 --num-nodes=2). dp 16, no TP/PP.',
    'FSDP: Lightning Fabric FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy=None, '
    'limit_all_gathers=True) with its default sharding_strategy FULL_SHARD -> zero_stage 3 over the 16 GPUs, one '
    'FSDP unit per transformer block (PyTorch FSDP1: zero3_copies flat-param, zero3_backward_prefetch '
    'before-reduce, the defaults BACKWARD_PRE as in the fms-fsdp entries). recompute none (the README and '
    'activation_checkpointing_policy=None). Accumulation under fabric.no_backward_sync (FSDP no_sync): the '
    'micro-batches before the last keep unsharded gradients and skip the reduce-scatter.',
    'Precision: get_default_supported_precision(training=True) -> "bf16-mixed" on A100 (lit_gpt/utils.py); '
    'requirements.txt pins lightning==2.1.2, whose FSDPPrecision for bf16-mixed is MixedPrecision(param_dtype='
    'float32, reduce_dtype=bfloat16, buffer_dtype=bfloat16) under torch.autocast (Lightning CHANGELOG 2.1.0, '
    'PR #18278: "FSDP full-precision param_dtype training (16-mixed and bf16-mixed)") -> grad_precision compute '
    '(bf16 reduce-scatter). NOT MODELLED: with param_dtype float32 FSDP all-gathers the parameters in fp32 '
    '(twice the plan\'s 2-byte gather) and autocast casts each weight to bf16 at every GEMM.',
    'Kernels: FlashAttention-2 (flash_attn_func, causal; lit_gpt/model.py) -> attention fused (attention_kernel '
    'left generic on A100, as for the fms-fsdp and torchtitan A100 entries); FusedCrossEntropyLoss (flash-attn '
    'xentropy) -> cross_entropy fused; FusedRMSNorm (flash-attn), fused rotary (flash-attn) and xformers\' SwiGLU '
    'op -> elementwise fused (the default). No torch.compile in the script. Optimizer torch.optim.AdamW.',
    'Model: Llama-2 architecture (lit_gpt Config tiny_LLaMA_1b): RMSNorm, RoPE over the full head, SwiGLU, GQA with '
    '4 KV groups, no biases, untied lm_head, vocab 32000 (padding_multiple 64: already a multiple). params_b '
    'DERIVED = %.4f.' % (N / 1e9),
    'Hardware: A100-40G (README); the nodes\' network is not stated (preset A100-40GB rates ASSUMED). Which GPU '
    'count the 24k figure was read on is not stated; the 16 GPUs of the training run are taken because the GPU-hour '
    'figure above, from that run, agrees with it to 0.5%.',
]
entry = {
    'id': 'tinyllama_1b_16xa100_40g_fsdp',
    'source': 'jzhang38/TinyLlama @ %s README.md ("Blazingly Fast" throughput, "Training Details" table, GPU-hours '
              'table) and PRETRAIN.md; settings from pretrain/tinyllama.py, lit_gpt/config.py (tiny_LLaMA_1b), '
              'lit_gpt/model.py, lit_gpt/utils.py, lit_gpt/speed_monitor.py and requirements.txt (lightning==2.1.2) '
              'at the same commit' % full[:10],
    'family': {'source': 'tinyllama-readme-2023-09', 'framework': 'lit-gpt', 'gpu_generation': 'A100'},
    'model': {'name': 'TinyLlama-1.1B', 'params_b': round(N / 1e9, 4), 'layers': L, 'hidden': H, 'heads': HEADS,
              'kv_heads': KV, 'ffn_hidden': FFN, 'seq_len': S, 'vocab': V, 'activation': 'swiglu',
              'norm': 'rmsnorm', 'position': 'rope', 'tied_embeddings': False, 'bias': False, 'dropout': False},
    'hardware': {'gpu': 'A100-SXM4-40GB', 'num_gpus': GPUS, 'gpus_per_node': 8,
                 'interconnect': 'README: 16 A100-40G GPUs; PRETRAIN.md: 2 nodes x 8; network not stated'},
    'parallel': {'tp': 1, 'pp': 1, 'dp': GPUS, 'cp': 1, 'vp': 1, 'zero_stage': 3, 'sequence_parallel': False,
                 'recompute': 'none', 'micro_batch': micro, 'global_batch': gbs},
    'measured': {'tflops_per_gpu': None, 'mfu': None, 'iteration_time_s': round(step, 4),
                 'tokens_per_s': TPS_GPU * GPUS, 'memory_gb': None, 'pct_of_peak': None, 'aggregate_pflops': None},
    'precision': 'bf16', 'grad_precision': 'compute', 'attention': 'fused', 'cross_entropy': 'fused',
    'elementwise': 'fused', 'zero3_backward_prefetch': 'before-reduce', 'zero3_copies': 'flat-param',
    'confidence': 'medium', 'notes': notes}
json.dump([entry], sys.stdout, indent=1)
print()
