#!/usr/bin/env python3
"""Where the GPT-3 175B / 1,024 A100 pick gains over Megatron-LM 2021's layout: the pick and the
baseline simulated with one feature changed at a time (`simulate --json`, rank 0's breakdown).

usage (repository root): bench/scripts/recommendation_variants.py BUILD PICK.plan.json OUT_DIR
PICK.plan.json: `plan --model models/gpt3.json --gpus 1024 --gpu A100-80GB --global-batch 1536
--no-prefer-measured --emit-plan PICK.plan.json` (the DualPipe pick). Prints a Markdown table.
"""
import json, os, subprocess, sys
if len(sys.argv) != 4:
    sys.exit(__doc__)
SIM = os.path.join(sys.argv[1], 'tools', 'simulate')
pick = json.load(open(sys.argv[2]))
OUT = sys.argv[3]
os.makedirs(OUT, exist_ok=True)
base = json.load(open('bench/recommendations/gpt3-megatron2021.plan.json'))
def v(src, **kw):
    p = dict(src); p.update(kw)
    for k, val in list(p.items()):
        if val is None: del p[k]
    return p
variants = [
 ("pick before (DualPipe, README until now)", pick),
 ("pick, 1f1b", v(pick, schedule="1f1b", virtual_stages=1)),
 ("pick, zb-h1", v(pick, schedule="zb-h1", virtual_stages=1)),
 ("pick, selective recompute", v(pick, recompute="selective")),
 ("pick, tp 8 pp 16 dualpipe", v(pick, tp=8, pp=16)),
 ("pick, tp 8 pp 16 interleaved x2", v(pick, tp=8, pp=16, schedule="interleaved", virtual_stages=2)),
 ("pick, unfused attention", v(pick, attention="unfused")),
 ("Korthikanti-style: tp8 pp8 x3 sel SP fp16 unfused", v(pick, tp=8, pp=8, dp=16, schedule="interleaved", virtual_stages=3, recompute="selective", precision="fp16", attention="unfused", zero_stage=0)),
 ("Korthikanti-style, fused attention", v(pick, tp=8, pp=8, dp=16, schedule="interleaved", virtual_stages=3, recompute="selective", precision="fp16", attention="fused", zero_stage=0)),
 ("baseline (Megatron 2021)", base),
 ("baseline + fused attention", v(base, attention="fused")),
 ("baseline + fused + SP + selective", v(base, attention="fused", sequence_parallel=True, recompute="selective")),
 ("baseline + fused + SP + no recompute", v(base, attention="fused", sequence_parallel=True, recompute="none")),
]
print("| variant | step s | MFU | bubble | compute s (rank 0) | idle s | TP exposed s | PP exposed s | DP exposed s | peak GB |")
print("|---|---|---|---|---|---|---|---|---|---|")
rows = []
for name, p in variants:
    f = os.path.join(OUT, 'variant%d.plan.json' % len(rows))
    json.dump(p, open(f, 'w'))
    r = subprocess.run([SIM, '--model', 'models/gpt3.json', '--plan', f, '--gpus', '1024', '--gpu', 'A100-80GB', '--json'], capture_output=True, text=True)
    if r.returncode != 0:
        print("| %s | refused: %s |" % (name, r.stderr.strip().splitlines()[0][:160])); rows.append(None); continue
    d = json.loads(r.stdout)
    rk = max(d['ranks'], key=lambda x: x['peak_memory_bytes'])
    r0 = d['ranks'][0]
    rows.append(name)
    print("| %s | %.2f | %.1f%% | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |" % (name, d['step_time_s'], 100*d['mfu'], d['bubble_fraction'],
        r0['compute_s'], r0['idle_s'], r0['comm']['tp']['exposed_s'], r0['comm']['pp']['exposed_s'], r0['comm']['dp']['exposed_s'], rk['peak_memory_bytes']/1e9))
