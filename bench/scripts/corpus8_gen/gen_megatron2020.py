"""Megatron-LM README scaling tables of September 2020 (NVIDIA/Megatron-LM 5281919420) for corpus8.

The README's three tables are images (images/cases.png, scaling-mp.png, scaling-dp.png at that
commit); their figures are transcribed below, and every row is checked against the published
TFLOP/s per GPU with the FLOP count of Narayanan et al. 2021 eq. (3) (which counts the activation
recompute's forward), so a mistyped time or shape fails the assertion. Prints a JSON list."""
import json, subprocess, sys

REPO = '/work/.mirror/NVIDIA+Megatron-LM/repo'
COMMIT = '5281919420'
full = subprocess.run(['git', '-C', REPO, 'rev-parse', COMMIT], capture_output=True, text=True).stdout.strip()
assert full.startswith(COMMIT), full

# images/cases.png: case, hidden, heads, layers, parameters (billions), model-parallel partitions
CASES = {'1B': (1920, 15, 24, 1.16, 1), '2B': (2304, 18, 30, 2.03, 2),
         '4B': (3072, 24, 36, 4.24, 4), '8B': (4096, 32, 42, 8.67, 8)}
# images/scaling-mp.png: DGX-2 (V100) batch size 8 and DGX-A100 batch size 16, 1-8 GPUs:
# case -> (GPUs, iteration ms, scaling, TFLOP/s per GPU)
MP_V100 = {'1B': (1, 1121, '100.0%', 71.9), '2B': (2, 1093, '89.6%', 64.2),
           '4B': (4, 1238, '82.5%', 58.5), '8B': (8, 1407, '74.3%', 52.2)}
MP_A100 = {'1B': (1, 1076, '100%', 149.8), '2B': (2, 1026, '91.7%', 136.8),
           '4B': (4, 1162, '84.5%', 124.7), '8B': (8, 1343, '74.7%', 109.3)}
# images/scaling-dp.png: DGX-A100 batch size 2048, 128-way data parallelism
DP_A100 = {'1B': (128, 1153, '93.3%', 139.8), '2B': (256, 1101, '85.5%', 127.5),
           '4B': (512, 1242, '79.0%', 116.7), '8B': (1024, 1380, '72.7%', 106.5)}
SEQ, VOCAB = 1024, 51200

def flops_per_step(batch, h, l):
    # Narayanan et al. 2021 (arXiv:2104.04473) eq. (3): 96 B s l h^2 (1 + s/6h + V/16lh),
    # forward + backward + the recompute's forward.
    return 96 * batch * SEQ * l * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * l * h))

def params(h, l):
    return 12 * l * h * h + VOCAB * h + SEQ * h

def entry(case, table, gen, batch, gpus, ms, scaling, tflops):
    h, heads, l, pb, mp = CASES[case]
    assert abs(params(h, l) / 1e9 - pb) < 0.006, (case, params(h, l))
    step = ms / 1000.0
    tf = flops_per_step(batch, h, l) / step / gpus / 1e12
    assert abs(tf / tflops - 1) < 0.004, (case, gen, tf, tflops)
    dp = gpus // mp
    assert dp * mp == gpus
    micro = batch // dp
    assert micro * dp == batch
    v100 = gen == 'V100'
    img = 'images/scaling-mp.png' if table == 'mp' else 'images/scaling-dp.png'
    col = ('DGX-2 (V100) batch size 8' if v100 else 'DGX-A100 batch size 16') if table == 'mp' else \
        'DGX-A100 batch size 2048'
    notes = [
        'Transcribed from NVIDIA/Megatron-LM @ %s README.md (2020-09-11, "Update scaling numbers in README"): %s, '
        'columns "%s", row %s: %d GPUs, iteration time %d ms, scaling %s, %.1f TeraFLOPs per GPU; model from '
        'images/cases.png row %s: hidden %d, %d attention heads, %d layers, %.2fB parameters, %d model-parallel '
        'partitions. The README: "All models use a vocabulary size of 51,200 and a sequence length of 1024."'
        % (COMMIT, img, col, case, gpus, ms, scaling, tflops, case, h, heads, l, pb, mp),
        'iteration_time_s = the published iteration time; tokens_per_s DERIVED = %d x 1024 / %.3f s (global). '
        'Check: the published TFLOP/s per GPU equal eq. (3) of arXiv:2104.04473 (96 B s l h^2 (1 + s/6h + V/16lh), '
        'which counts the activation recompute\'s forward) at the published time: %.1f computed, %.1f published.'
        % (batch, step, tf, tflops),
        'recompute full: the published FLOP/s only match the count that includes the recompute forward (above); '
        'the README\'s GPT-2 example at the same commit (examples/pretrain_gpt2_distributed.sh) passes '
        '--checkpoint-activations (every transformer layer) and --fp16.',
        'Layout: the "Model Parallel Partitions" of cases.png are Megatron\'s intra-layer (tensor) model parallelism '
        '(--model-parallel-size; pipeline parallelism entered the code later, 7abd3e90 on another branch), so tp = %d, '
        'pp = 1, dp DERIVED = %d / %d = %d; batch %d per iteration with dp %d -> micro-batch %d, no accumulation '
        '(this Megatron-LM\'s --batch-size is the per-data-parallel-rank batch; the dp table\'s 2048 over 128-way dp '
        'is the mp table\'s 16 per replica). No sequence parallelism, ZeRO or CP existed in this code.'
        % (mp, gpus, mp, dp, batch, dp, micro),
        'precision fp16 (--fp16, FP16_Module with fp32 master weights, dynamic loss scaling; '
        'megatron/fp16 at %s), grad_precision compute: --fp32-allreduce is off by default (megatron/arguments.py), so '
        'the fp16 gradients are all-reduced in fp16.' % COMMIT,
        'attention unfused: this code has no fused attention or softmax kernel (no megatron/fused_kernels at %s; '
        'FlashAttention is from 2022).' % COMMIT,
        'Model: GPT-2 architecture as Megatron-LM\'s GPT2Model of the time: learned position embeddings (1024), '
        'LayerNorm, GeLU, biases, FFN 4 x hidden, output layer tied to the word embeddings; parameter count checks '
        'against cases.png: 12 l h^2 + V h + s h = %.3fB.' % (params(h, l) / 1e9),
    ]
    if dp > 1:
        # The dp table against the mp table's same case (same per-replica batch 16 on DGX-A100):
        # the step grows by less than an fp16 ring all-reduce of the replica's gradients could
        # take at HDR's 25 GB/s line rate per GPU, so the all-reduce was overlapped with the
        # backward, as --DDP-impl torch does; the code's default --DDP-impl local reduces after
        # the backward (training.py backward_step -> model.allreduce_params()).
        t_mp = MP_A100[case][1] / 1000.0
        grad_bytes = 2 * params(h, l) / mp
        ring_s = 2 * (dp - 1) / dp * grad_bytes / 25e9
        assert step - t_mp < ring_s, (case, step - t_mp, ring_s)
        notes.append(
            'Gradient all-reduce overlapped (overlap_grad_reduce left at the default): the README does not give '
            'the --DDP-impl; the code\'s default (local) all-reduces after the backward (megatron/training.py '
            'backward_step -> model.allreduce_params()), but this row\'s step is only %.3f s longer than the same '
            'case on one node (scaling-mp.png, same batch 16 per replica: %.3f s), while an fp16 ring all-reduce of '
            'the replica\'s %.2f GB of gradients over %d ranks takes at least %.3f s at HDR\'s 25 GB/s line rate per '
            'GPU: so the reduction was overlapped with the backward, as --DDP-impl torch does (the setting of the '
            'Megatron-LM 2021 paper\'s scripts, examples/sc21).' % (step - t_mp, t_mp, grad_bytes / 1e9, dp, ring_s))
    if v100:
        notes.append('Hardware: "DGX-2 (V100)": NVIDIA DGX-2, 16 Tesla V100-SXM3-32GB per node on NVSwitch; the runs '
                     'use 1-8 GPUs of one node, so the network does not enter. The DGX-2\'s V100 are the 32 GB parts '
                     '(16 x 32 GB = 512 GB, the DGX-2 datasheet); whether a DGX-2H (450 W) was used is not stated '
                     '(preset V100-32GB).')
        hw = {'gpu': 'V100-SXM3-32GB', 'num_gpus': gpus, 'gpus_per_node': 16,
              'interconnect': 'NVIDIA DGX-2: 16x V100-SXM3-32GB, NVLink2 + NVSwitch; one node'}
    else:
        notes.append('Hardware: "DGX-A100" (README); the DGX A100 of September 2020 had 8 A100-SXM4-40GB (the 80 GB '
                     'DGX A100 was announced in November 2020), ASSUMED 40 GB. %s'
                     % ('One node, so the network does not enter.' if gpus <= 8 else
                        'The data-parallel table ran on %d nodes; the cluster is not named (NVIDIA\'s Selene, '
                        'DGX A100 with 8x 200 Gb/s HDR InfiniBand per node for compute, is ASSUMED; preset '
                        'inter-node rate).' % (gpus // 8)))
        hw = {'gpu': 'A100-SXM4-40GB', 'num_gpus': gpus, 'gpus_per_node': 8,
              'interconnect': ('NVIDIA DGX A100: 8x A100-SXM4-40GB, NVLink3 + NVSwitch' +
                               ('' if gpus <= 8 else '; HDR InfiniBand between nodes (ASSUMED Selene, 8x 200 Gb/s per node)'))}
    fam = 'megatron-lm-readme-2020-09'
    return {
        'id': 'megatronreadme2009_%s_%s_%dgpu' % (gen.lower(), case, gpus),
        'source': 'NVIDIA/Megatron-LM @ %s README.md and %s, images/cases.png (September 2020 scaling tables); '
                  'settings from examples/pretrain_gpt2_distributed.sh, megatron/arguments.py, megatron/training.py '
                  'at the same commit' % (full[:10], img),
        'family': {'source': fam, 'framework': 'megatron', 'gpu_generation': gen},
        'model': {'name': 'GPT-2 %s (Megatron-LM README 2020 case %s)' % (case, case), 'params_b': pb,
                  'layers': l, 'hidden': h, 'heads': heads, 'ffn_hidden': 4 * h, 'seq_len': SEQ, 'vocab': VOCAB,
                  'activation': 'gelu', 'norm': 'layernorm', 'position': 'learned', 'tied_embeddings': True,
                  'bias': True},
        'hardware': hw,
        'parallel': {'tp': mp, 'pp': 1, 'dp': dp, 'cp': 1, 'vp': 1, 'zero_stage': 0, 'sequence_parallel': False,
                     'recompute': 'full', 'micro_batch': micro, 'global_batch': batch},
        'measured': {'tflops_per_gpu': tflops, 'mfu': None, 'iteration_time_s': step,
                     'tokens_per_s': round(batch * SEQ / step), 'memory_gb': None, 'pct_of_peak': None,
                     'aggregate_pflops': None},
        'precision': 'fp16', 'grad_precision': 'compute', 'attention': 'unfused', 'confidence': 'high',
        'notes': notes}

out = []
for case, (g, ms, sc, tf) in MP_V100.items():
    out.append(entry(case, 'mp', 'V100', 8, g, ms, sc, tf))
for case, (g, ms, sc, tf) in MP_A100.items():
    out.append(entry(case, 'mp', 'A100', 16, g, ms, sc, tf))
for case, (g, ms, sc, tf) in DP_A100.items():
    out.append(entry(case, 'dp', 'A100', 2048, g, ms, sc, tf))
json.dump(out, sys.stdout, indent=1)
print()
