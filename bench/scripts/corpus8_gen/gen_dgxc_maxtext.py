"""NVIDIA DGX Cloud Benchmarking v25.02: MaxText (JAX) Llama 3 70B on 128-2048 H100, for corpus8.

Reads maxtext/README_70b.md and maxtext/configure.sh at tag v25.02 of the fetched mirror
NVIDIA/dgxc-benchmarking with git show, parses the two 'Expected Performance' tables and checks
each entered column: tokens/s = 8192 x GBS / step (published), GBS = 2 x GPUs, and the layout
configure.sh computes for the column's node count. Prints a JSON list."""
import json, re, subprocess, sys

REPO = '/work/.mirror/NVIDIA+dgxc-benchmarking/repo'
TAG = 'v25.02'
commit = subprocess.run(['git', '-C', REPO, 'rev-parse', TAG + '^{commit}'], capture_output=True,
                        text=True).stdout.strip()
readme = subprocess.run(['git', '-C', REPO, 'show', TAG + ':maxtext/README_70b.md'], capture_output=True,
                        text=True).stdout
conf = subprocess.run(['git', '-C', REPO, 'show', TAG + ':maxtext/configure.sh'], capture_output=True,
                      text=True).stdout
# the settings the entries read, asserted present in configure.sh
for s in ('MBS=2', 'ici_FSDP=${SLURM_NTASKS_PER_NODE}', 'dcn_FSDP=${SLURM_JOB_NUM_NODES}',
          'if [[ ${SLURM_JOB_NUM_NODES} -ge 64 ]]; then\n  dcn_FSDP=16', 'POLICY="save_qkv_proj"',
          'attention=cudnn_flash_te', 'max_target_length=8192', 'scan_layers=true', 'QUANTIZATION="fp8"',
          'export NVTE_FUSED_ATTN=1', 'logits_dot_in_fp32=false'):
    assert s in conf, s

def table(dtype):
    lines = readme.split('\n')
    i = next(k for k, x in enumerate(lines) if x.startswith('| Maxtext Llama3 70b %s' % dtype))
    head = [c.strip() for c in lines[i].strip('|').split('|')]
    rows = {}
    for x in lines[i + 2:i + 6]:
        cells = [c.strip() for c in x.strip().strip('|').split('|')]
        rows[cells[0]] = cells[1:]
    return head, rows

SEQ = 8192
out = []
for dtype in ('BF16', 'FP8'):
    head, rows = table(dtype)
    cols = head[1:]
    for want in (128, 2048):
        j = next(k for k, c in enumerate(cols) if c.startswith('Throughput on %dx H100' % want))
        m = re.match(r'Throughput on (\d+)x H100 GPUs \(FSDP=(\d+) GBS=(\d+)\)', cols[j])
        gpus, fsdp, gbs = map(int, m.groups())
        step = float(rows['Training step time (seconds per step)'][j])
        tps = float(rows['Throughput in tokens per second'][j])
        mfu = rows['Model flops utilization'][j]
        assert abs(SEQ * gbs / step / tps - 1) < 1e-4, (gpus, step, tps)
        nodes = gpus // 8
        dcn_fsdp = 16 if nodes >= 64 else nodes
        assert fsdp == 8 * dcn_fsdp and gbs == 2 * gpus, (gpus, fsdp, gbs)
        replicas = gpus // fsdp
        par = {'tp': 1, 'pp': 1, 'dp': gpus, 'cp': 1, 'vp': 1, 'zero_stage': 3, 'sequence_parallel': False,
               'recompute': 'full', 'micro_batch': 2, 'global_batch': gbs}
        if replicas > 1:
            par['zero_shard_size'] = fsdp
        fp8 = dtype == 'FP8'
        notes = [
            'NVIDIA/dgxc-benchmarking tag %s (commit %s) maxtext/README_70b.md, table "Maxtext Llama3 70b %s (FSDP+DP '
            'MBS=2)", column "%s": training step time %.3f s, throughput %.2f tokens/s, MFU %s (the README\'s MFU uses '
            '%s TFLOP/s per GPU and 3.94e15 model FLOPs per sequence).' % (TAG, commit[:8], dtype, cols[j], step, tps,
                                                                          mfu, '1979' if fp8 else '989'),
            'iteration_time_s and tokens_per_s = the published figures (tokens/s = 8192 x %d / step, checked). The '
            'README takes the last of 50 steps\' "completed step" time (seconds per step, per the MaxText log); a '
            'PGLE profiling run precedes the timed run.' % gbs,
            'Layout from maxtext/configure.sh at the tag: MBS=2, ici_FSDP = 8 GPUs per node, dcn_FSDP = nodes '
            '(16 at >= 64 nodes, the rest dcn_DP), TP/DP inside the node 1: %d nodes -> FSDP %d x DP %d; entered '
            'as dp %d with zero_stage 3%s; no gradient accumulation (GBS = GPUs x 2, the README\'s rule).'
            % (nodes, fsdp, replicas, gpus, (' sharded over groups of %d (zero_shard_size), replicated %d times'
                                              % (fsdp, replicas)) if replicas > 1 else ' over all GPUs'),
            'recompute full (nearest): remat_policy save_qkv_proj, which in MaxText\'s decoder is '
            'jax.checkpoint_policies.save_only_these_names("query_proj", "value_proj", "key_proj", "qkv_proj"): '
            'only the Q/K/V projections\' outputs are kept and everything else in the layer (attention, output '
            'projection, MLP, norms) is recomputed in the backward. The plan\'s full recompute also recomputes the '
            'Q/K/V GEMMs (1.25 h^2 of the layer\'s 12.75 h^2 GEMM weight, about 2.5% of the step\'s GEMM work too '
            'much); XLA\'s own rematerialization pass is disabled (--xla_disable_hlo_passes=rematerialization).',
            'precision %s%s; grad_precision fp32: MaxText\'s base.yml keeps weight_dtype float32 (fp32 parameters '
            'cast per layer), so the gradients and their reduce-scatter are fp32 (as the jax-toolbox-maxtext entry '
            'reads it); whether XLA gathers fp32 or casts first is not stated (the plan gathers at the compute '
            'precision).' % (dtype.lower(), ', fp8_scaling delayed: quantization=fp8 selects MaxText\'s '
                             'Fp8Quantization, Flax\'s Fp8DotGeneralOp, which scales from an amax history '
                             '(delayed); the container\'s MaxText commit is not pinned' if fp8 else ''),
            'attention fused, attention_kernel cudnn: attention=cudnn_flash_te with NVTE_FUSED_ATTN=1 '
            '(Transformer Engine\'s cuDNN fused attention on Hopper).',
            'Collectives: XLA\'s latency-hiding scheduler with a PGLE profile, pipelined all-gather / reduce-scatter '
            '/ all-reduce and while-loop double buffering (configure.sh XLA_FLAGS), scan_layers=true: the FSDP '
            'traffic is overlapped with compute by the compiler, as the plan\'s ZeRO-3 prefetch assumes.',
            'Model: Llama 3 70B, from the README\'s MFU notes (80 layers, hidden 8192, 64 heads, 8 query groups, FFN '
            '28672, vocab 128256, sequence 8192) and MaxText configs/models/llama3-70b.yml: SwiGLU, RMSNorm, RoPE, '
            'untied output layer, no biases.',
            'Hardware: DGX H100 (the README\'s H100 80 GB, 8 per node; launch.sh 8 tasks per node), container '
            'nvcr.io/nvidia/jax:25.01-maxtext-py3 (setup.sh). The inter-node network is not stated (preset: 8x 400 '
            'Gb/s per node).',
        ]
        out.append({
            'id': 'dgxc2502_maxtext_h100_%s_llama3_70b_%dgpu' % (dtype.lower(), gpus),
            'source': 'NVIDIA/dgxc-benchmarking @ %s (tag %s): maxtext/README_70b.md (Expected Performance) and '
                      'maxtext/configure.sh, launch.sh, setup.sh; MaxText remat policies (MaxText/layers decoders, '
                      'save_qkv_proj) and layers/quantizations.py (Fp8Quantization)' % (commit[:8], TAG),
            'family': {'source': 'dgxc-benchmarking-25.02-maxtext', 'framework': 'maxtext', 'gpu_generation': 'H100'},
            'model': {'name': 'Llama 3 70B (MaxText llama3-70b)', 'params_b': 70.55, 'layers': 80, 'hidden': 8192,
                      'heads': 64, 'kv_heads': 8, 'ffn_hidden': 28672, 'seq_len': SEQ, 'vocab': 128256,
                      'activation': 'swiglu', 'norm': 'rmsnorm', 'position': 'rope', 'tied_embeddings': False,
                      'bias': False},
            'hardware': {'gpu': 'H100-SXM5-80GB', 'num_gpus': gpus, 'gpus_per_node': 8,
                         'interconnect': 'DGX H100 nodes: NVLink4 + NVSwitch; inter-node network not stated'},
            'parallel': par,
            'measured': {'tflops_per_gpu': None, 'mfu': None, 'iteration_time_s': step, 'tokens_per_s': round(tps),
                         'memory_gb': None, 'pct_of_peak': None, 'aggregate_pflops': None},
            'precision': dtype.lower(), 'grad_precision': 'fp32', 'attention': 'fused', 'attention_kernel': 'cudnn',
            'confidence': 'medium', 'notes': notes})
        if fp8:
            out[-1]['fp8_scaling'] = 'delayed'
json.dump(out, sys.stdout, indent=1)
print()
