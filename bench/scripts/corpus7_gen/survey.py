import os, sys, statistics, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mllog
repo, folder = sys.argv[1], sys.argv[2]
files = subprocess.run(['git','-C',repo,'ls-tree','--name-only','HEAD',folder+'/'],capture_output=True,text=True).stdout.split()
files = [f for f in files if f.endswith('.txt')]
logs = mllog.summarize(repo, 'HEAD', files)
for l in logs:
    t = l['timer']
    print(l['path'].split('/')[-1], l['status'], 'gbs', l['gbs'], 'ga', l['ga'], 'seq', l['seq'], 'blocks', l['nblocks'], 'steps', l['steps'],
          'median %.4f min %.4f max %.4f' % (l['median'], l['min'], l['max']) if l['median'] else None,
          'timer-med %.4f' % statistics.median(t) if t else '', 'mem', l['mem'][:3], len(l['mem']))
    keys = {}
    for e in l['ev']:
        if e['key'] in ('fp4','fp4_recipe','fp8','fp8_recipe','submission_platform','tensor_model_parallel_size','pipeline_model_parallel_size'):
            keys[e['key']] = e['value']
    print('   ', keys, l['method'])
meds = [l['median'] for l in logs if l['median'] and l['status']=='success']
print('MEDIAN over logs', statistics.median(meds) if meds else None, len(meds))
