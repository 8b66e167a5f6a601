"""dgxc-benchmarking v25.04 Llama 3.1 8B / 70B pre-training tables (NeMo 2.x, nemo:25.02.01) for corpus9.

The README (llama3.1/README.md at tag v25.04) gives each row's layout (TP, PP, CP, VP, DP, MBS, GBS, GA)
and, per precision, a table of step time / tokens/s / MFU per GPU count. The smallest and largest GPU
count of each table are entered (the rule of the dgxc-benchmarking-24.11 pass). The rest of the plan is
read from the NeMo 2.x recipe the workload builds: NeMo @ d2b21556f2 (setup.sh NEMO_COMMIT, with
gsw_nemo.patch, which changes no training setting) and the workload's pretrain_llama31.py /
llama31_utils.py. Every row is checked: tokens/s = 8192 x GBS / step and MFU = GBS x model FLOPs / step /
GPUs / peak with the README's own FLOP formula; the layout table is parsed from the README itself.
Prints a JSON list."""
import json, re, subprocess, sys

DGXC = '/work/.mirror/NVIDIA+dgxc-benchmarking/repo'
NEMO = '/work/.mirror/NVIDIA+NeMo/repo'
TAG, NEMO_COMMIT = 'v25.04', 'd2b21556f2455b52ad7217f334bb66eaa13c0f83'


def git(repo, *a):
    return subprocess.run(['git', '-C', repo] + list(a), capture_output=True, text=True, check=True).stdout


commit = git(DGXC, 'rev-parse', TAG + '^{commit}').strip()
readme = git(DGXC, 'show', '%s:llama3.1/README.md' % TAG)
setup = git(DGXC, 'show', '%s:llama3.1/setup.sh' % TAG)
launch = git(DGXC, 'show', '%s:llama3.1/launch.sh' % TAG)
script = git(DGXC, 'show', '%s:llama3.1/pretrain_llama31.py' % TAG)
utils = git(DGXC, 'show', '%s:llama3.1/llama31_utils.py' % TAG)
assert 'NEMO_COMMIT="%s"' % NEMO_COMMIT in setup
assert 'FW_VERSION=25.02.01' in launch
nemo = {p: git(NEMO, 'show', '%s:%s' % (NEMO_COMMIT, p)) for p in (
    'nemo/collections/llm/recipes/llama3_8b.py', 'nemo/collections/llm/recipes/llama3_70b.py',
    'nemo/collections/llm/recipes/precision/mixed_precision.py', 'scripts/performance/utils.py',
    'nemo/lightning/pytorch/plugins/mixed_precision.py')}
r70, r8 = nemo['nemo/collections/llm/recipes/llama3_70b.py'], nemo['nemo/collections/llm/recipes/llama3_8b.py']
for r in (r70, r8):
    for s in ('grad_reduce_in_fp32=True', 'overlap_grad_reduce=True', 'overlap_param_gather=True',
              'recipe.trainer.plugins.grad_reduce_in_fp32 = False', 'plugins=bf16_mixed()'):
        assert s in r, s
assert 'tp_comm_overlap=True' in r70 and 'tp_comm_overlap=False' in r8
mp = nemo['nemo/collections/llm/recipes/precision/mixed_precision.py']
for s in ("cfg.fp8 = 'hybrid'", 'cfg.fp8_amax_history_len = 1024', 'cfg.fp8_amax_compute_algo = "max"',
          'cfg.fp8_params = True'):
    assert s in mp, s
assert 'te_fp8.FP8GlobalStateManager.FP8_RECIPE = te_recipe.DelayedScaling()' in \
    nemo['nemo/lightning/pytorch/plugins/mixed_precision.py']
assert 'recipe.trainer.strategy.sequence_parallel = bool(tp_size > 1)' in nemo['scripts/performance/utils.py']
assert 'recipe.trainer.plugins.grad_reduce_in_fp32 = False' in script
assert 'enable_cuda_graphs = False if enable_cuda_graphs is None' in utils

# Layout rows: | Size | Precision | GPUs | SeqLen | Layers | TP | PP | CP | EP | DP | VP | MBS | GBS | GA |
layout = {}
for m in re.finditer(r'^\| (8b|70b)\s*\| ([A-Z0-9/]+)\s*\| (\d+)\s*\| (\d+)\s*\| (\d+)\s*\| (\d+)\s*\| (\d+)\s*\| (\d+)\s*\| NA\s*\| (\d+)\s*\| (NA|\d+)\s*\| (\d+)\s*\| (\d+)\s*\| (\d+)', readme, re.M):
    size, prec, gpus = m.group(1), m.group(2), int(m.group(3))
    vals = [int(x) if x != 'NA' else None for x in m.groups()[3:]]
    for p in prec.split('/'):
        layout[(size, p.lower(), gpus)] = dict(zip(('seq', 'layers', 'tp', 'pp', 'cp', 'dp', 'vp', 'mbs', 'gbs', 'ga'), vals))

# Performance tables: "| Llama 3.1 8b BF16 | 8x H100 GPUs | ..." then step time / tokens/s / MFU rows
perf = {}
for m in re.finditer(r'^\| Llama 3\.1 (8b|70b) (BF16|FP8) \|(.*)\n\|.*\n\| Training step time[^|]*\|(.*)\n\| Throughput[^|]*\|(.*)\n\| Model flops utilization[^|]*\|(.*)', readme, re.M):
    size, prec = m.group(1), m.group(2).lower()
    cols = [int(c.split('x')[0]) for c in re.findall(r'(\d+x) H100', m.group(3))]
    cell = lambda s: [x.strip() for x in s.replace('\t', ' ').split('|') if x.strip()]
    steps, tps, mfus = cell(m.group(4)), cell(m.group(5)), cell(m.group(6))
    assert len(cols) == len(steps) == len(tps) == len(mfus), (size, prec)
    for g, s, t, u in zip(cols, steps, tps, mfus):
        perf[(size, prec, g)] = (float(s), int(t), float(u.rstrip('%')))
assert len(perf) == 22, len(perf)

MODELS = {  # Llama 3 shapes (NeMo Llama3Config8B / Llama3Config70B); README's "Layers" column checked below
    '8b': dict(name='Llama 3.1 8B', params_b=8.03, layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336),
    '70b': dict(name='Llama 3.1 70B', params_b=70.55, layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672)}
V, S = 128256, 8192


def model_flops(m):  # the README's "Notes" formula, per sequence
    l, h, f = m['layers'], m['hidden'], m['ffn_hidden']
    att = 12 * l * h * h * (1 + m['kv_heads'] / m['heads'] + S / h)
    return S * (att + 18 * l * f * h + 6 * V * h)


assert abs(model_flops(MODELS['8b']) / 4.74e14 - 1) < 0.002
out = []
for size in ('8b', '70b'):
    for prec in ('bf16', 'fp8'):
        gpus_all = sorted(g for (s, p, g) in perf if s == size and p == prec)
        for gpus in (gpus_all[0], gpus_all[-1]):
            lay, (step, tps, mfu) = layout[(size, prec, gpus)], perf[(size, prec, gpus)]
            m = MODELS[size]
            assert lay['seq'] == S and lay['layers'] == m['layers']
            assert lay['tp'] * lay['pp'] * lay['cp'] * lay['dp'] == gpus
            assert lay['gbs'] == lay['dp'] * lay['mbs'] * lay['ga']
            assert abs(S * lay['gbs'] / step / tps - 1) < 0.005, (size, prec, gpus)
            peak = 1979e12 if prec == 'fp8' else 989e12
            mfu_c = 100 * lay['gbs'] * model_flops(m) / step / gpus / peak
            assert abs(mfu_c - mfu) < 0.3, (size, prec, gpus, mfu_c, mfu)
            tp, vp = lay['tp'], lay['vp']
            rid = 'dgxc2504_h100_%s_llama31_%s_%dgpu' % (prec, size, gpus)
            notes = [
                'NVIDIA/dgxc-benchmarking tag v25.04 (commit %s) llama3.1/README.md, "Expected Performance", table '
                '"Llama 3.1 %s %s", column %dx H100 GPUs: training step time %.2f s, throughput %d tokens/s, MFU %.2f%% '
                '(published). Layout row of the README\'s table: %s %s, %d GPUs, SeqLen 8192, Layers %d, TP %d, PP %d, '
                'CP %d, DP %d, VP %s, MBS %d, GBS %d, GA %d.'
                % (commit[:8], size, prec.upper(), gpus, step, tps, mfu, size, prec.upper(), gpus, m['layers'], tp,
                   lay['pp'], lay['cp'], lay['dp'], vp if vp else 'NA', lay['mbs'], lay['gbs'], lay['ga']),
                'Metric: train_step_timing of the last of 50 steps (the README: early steps fluctuate); tokens/s = '
                '8192 x GBS / step (checked to 0.5%%). MFU check with the README\'s own FLOP formula (Notes: 12 l h^2 '
                '(1 + q/a + s/h) + 18 l f h + 6 V h per token): %.2f%% computed against %s TFLOP/s, %.2f%% published; '
                'as in the v24.11.1 family MFU stays in the notes (its peak is the run\'s precision\'s).'
                % (mfu_c, '1979' if prec == 'fp8' else '989', mfu),
                'Recipe: pretrain_llama31.py at the tag builds nemo.collections.llm.recipes.llama3_%s.pretrain_recipe('
                'performance_mode=True) from NeMo @ %s (setup.sh NEMO_COMMIT; gsw_nemo.patch adds launcher arguments '
                'and checkpoint options only) and runs it in nvcr.io/nvidia/nemo:25.02.01 (launch.sh FW_VERSION). '
                'MegatronStrategy with DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather='
                'True) and the distributed optimizer (zero_stage 1 as for the other Megatron-Core distributed-'
                'optimizer entries); performance mode sets plugins.grad_reduce_in_fp32 = False (and pretrain_llama31.py '
                'again for FP8), which the precision plugin writes into the DDP config -> grad_precision compute; '
                'sequence_parallel = tp > 1 (scripts/performance/utils.py set_primary_perf_configs); no activation '
                'recompute in the recipe -> recompute none; CUDA graphs off (llama31_utils.py default); MBS 1.'
                % (size if size == '70b' else '8b', NEMO_COMMIT[:10]),
            ]
            if size == '70b':
                notes.append('tp_comm_overlap true: MegatronCommOverlapCallback(tp_comm_overlap=True, '
                              'defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22) with pretrain_llama31.py\'s '
                              'userbuffers_%s_h100_h8192_tp4_mbs1_seqlen8192 config. set_primary_perf_configs turns on '
                              'overlap_param_gather_with_optimizer_step (dp > 1, pp > 1, vp > 1): not modelled.' % prec)
            else:
                notes.append('tp_comm_overlap false: TP 1 (the 8B recipe\'s MegatronCommOverlapCallback has '
                             'tp_comm_overlap=False).')
            if prec == 'fp8':
                notes.append('FP8: bf16_with_fp8_mixed() (recipes/precision/mixed_precision.py): fp8 "hybrid" '
                             '(E4M3 forward, E5M2 gradients), amax history 1024, amax "max", fp8_params True, for '
                             'which MegatronMixedPrecision sets Transformer Engine\'s recipe to DelayedScaling -> '
                             'fp8_scaling delayed. fp8_params also makes the distributed optimizer gather the '
                             'parameters in FP8 (fp8_param_gather): not expressible here (the plan\'s fp8_all_gather is '
                             'for ZeRO-3), so the ZeRO-1 parameter gather is counted in bf16. fp8_weight_cache: '
                             'Megatron-Core\'s Transformer Engine layers pass is_first_microbatch, so each weight is '
                             'cast once per step (as for the nemo-perf-summary-24.07 entries).')
            notes.append('%s attention fused (Transformer Engine fused attention); '
                         'attention_kernel left generic for the reason the v24.11.1 family gives (published cuDNN '
                         'rates are not this container\'s cuDNN).' % (
                'cp_comm p2p: NeMo 2\'s recipe sets no cp_comm_type, so Transformer Engine runs its default, p2p (as '
                'for the v24.11.1 family).' if lay['cp'] > 1 else 'CP 1.'))
            notes.append('Hardware: H100 80GB, 8 per node (the README: "GPU clusters with at least 8x H100 GPUs with '
                         '80 GB memory"); the cluster is not named; DGX Cloud reference architecture (8x 400 Gb/s NDR '
                         'per node) INFERRED as for the v24.11.1 family.')
            e = {
                'id': rid,
                'source': 'NVIDIA/dgxc-benchmarking llama3.1/README.md "Expected Performance" and layout table '
                          '(commit %s, tag v25.04); settings from llama3.1/pretrain_llama31.py, llama31_utils.py, '
                          'setup.sh, launch.sh at the tag and NeMo @ %s (nemo/collections/llm/recipes/llama3_%s.py, '
                          'recipes/precision/mixed_precision.py, scripts/performance/utils.py, '
                          'nemo/lightning/pytorch/plugins/mixed_precision.py)' % (commit, NEMO_COMMIT[:10], size),
                'family': {'source': 'dgxc-benchmarking-25.04', 'framework': 'nemo', 'gpu_generation': 'H100'},
                'model': dict(name=m['name'], params_b=m['params_b'], layers=m['layers'], hidden=m['hidden'],
                              heads=m['heads'], kv_heads=m['kv_heads'], ffn_hidden=m['ffn_hidden'], seq_len=S,
                              vocab=V, activation='swiglu', norm='rmsnorm', position='rope', tied_embeddings=False,
                              bias=False),
                'hardware': {'gpu': 'H100-SXM5-80GB', 'num_gpus': gpus, 'gpus_per_node': 8,
                             'interconnect': 'H100 80GB, 8 per node, NVLink4 + NVSwitch; 8x 400 Gb/s InfiniBand NDR '
                                             'per node (INFERRED: DGX Cloud reference architecture, cluster not named)'},
                'parallel': {'tp': tp, 'pp': lay['pp'], 'cp': lay['cp'], 'vp': vp, 'ep': None, 'zero_stage': 1,
                             'sequence_parallel': tp > 1, 'recompute': 'none', 'micro_batch': lay['mbs'],
                             'global_batch': lay['gbs'], 'dp': lay['dp'], 'tp_comm_overlap': size == '70b',
                             'overlap_grad_reduce': True},
                'measured': {'tflops_per_gpu': None, 'mfu': None, 'iteration_time_s': step, 'tokens_per_s': tps,
                             'memory_gb': None},
                'precision': prec, 'attention': 'fused', 'grad_precision': 'compute', 'confidence': 'high',
                'notes': notes}
            if lay['cp'] > 1:
                e['cp_comm'] = 'p2p'
            if prec == 'fp8':
                e['fp8_scaling'] = 'delayed'
                e['fp8_weight_cache'] = True
            out.append(e)
json.dump(out, sys.stdout, indent=1)
print()
