# Derive achieved GB/s from Liger-Kernel's published benchmark CSV (benchmark/data/all_benchmark_data.csv).
# Byte models are minimal "model bytes" (each big tensor read/written once); stated per kernel below.
import csv,json,collections
PEAK={'NVIDIA A100-SXM4-80GB':2039,'NVIDIA H100 80GB HBM3':3350,'NVIDIA B200':8000,'NVIDIA H100 NVL':3900}
rows=list(csv.DictReader(open('liger_all.csv')))
def nbytes(k,mode,x,cfg):
    x=int(float(x))
    if k in('rms_norm',):      el=2; MN=cfg['M']*x; f,b=2,3
    elif k=='layer_norm':      el=4; MN=cfg['M']*x; f,b=2,3
    elif k=='megatron_rms_norm': el=2; MN=cfg['S']*cfg['B']*x; f,b=2,3
    elif k=='relu_squared':    el=2; MN=cfg['M']*x; f,b=2,3
    elif k=='megatron_swiglu': el=2; MN=cfg['S']*cfg['B']*x; f,b=3,5
    elif k=='cross_entropy':   el=4; MN=cfg['B']*cfg['T']*x; f,b=1,2
    elif k=='megatron_cross_entropy': el=2; MN=cfg['S']*cfg['B']*x; f,b=1,2
    elif k=='embedding':       el=4; MN=cfg['B']*cfg['T']*cfg['D']; f,b=1,None  # fwd: write B*T*D (gathered rows read ~ same): use 2
    else: return None
    if k=='embedding':
        return 2*MN*el if mode=='forward' else None
    if mode=='forward': return f*MN*el
    if mode=='backward': return b*MN*el
    if mode=='full': return (f+b)*MN*el
K=('rms_norm','layer_norm','megatron_rms_norm','relu_squared','megatron_swiglu','cross_entropy','megatron_cross_entropy','embedding')
out=collections.defaultdict(list)
for r in rows:
    if r['metric_name']!='speed' or r['kernel_name'] not in K or r['gpu_name'] not in PEAK: continue
    cfg=json.loads(r['extra_benchmark_config_str'])
    B=nbytes(r['kernel_name'],r['kernel_operation_mode'],r['x_value'],cfg)
    if B is None: continue
    ms=float(r['y_value_50']); gbs=B/ms/1e6
    out[(r['kernel_name'],r['gpu_name'])].append((r['kernel_operation_mode'],r['kernel_provider'],r['x_name'],r['x_value'],r['extra_benchmark_config_str'],r['liger_version'],ms,B/1e6,gbs,gbs/PEAK[r['gpu_name']]))
for k,v in sorted(out.items()):
    print('##',k)
    for t in sorted(v): print('%-9s %-14s %s=%-7s %s v%s  %.4f ms  %.1f MB  %.0f GB/s  %.2f'%t)
