#!/usr/bin/env python3
"""Sets parallel.param_gather (Plan::param_gather) on the corpus entries a source survey found
overlapping the distributed optimizer's parameter all-gather with the next forward, with the
survey's quoted evidence as a note; every other byte of the file is left as it was.

usage: bench/scripts/param_gather_apply.py CORPUS.json SURVEY.json
SURVEY.json: bench/results/param-gather-2026-12-06/survey.json (id, overlap_param_gather,
overlap_param_gather_with_optimizer_step, evidence). aligned: ALIGN_PARAM_GATHER=True quoted,
overlap_param_gather_with_optimizer_step true, or NeMo 1.x with apex's DistributedFusedAdam and
pp > 1 (NeMo hands the schedule param_sync_func); next-forward otherwise.
(validation/corpus/NOTES.md, thirty-sixth pass: not applied to the corpus on main; see there.)
"""
import collections, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_edit import set_parallel_field
values = []
path = sys.argv[1]  # the corpus file, edited in place
s = open(path).read()
o = json.load(open(sys.argv[2]))
pps = {e['id']: e['parallel'].get('pp', 1) for e in json.loads(s)}
n = 0
for e in o:
    if not e['overlap_param_gather']:
        continue
    ev = e['evidence']
    aligned = 'ALIGN_PARAM_GATHER=True' in ev or bool(e['overlap_param_gather_with_optimizer_step'])
    apex = 'distributed_fused_adam' in ev.lower() or 'DistributedFusedAdam' in ev
    pp = pps[e['id']]
    nemo_apex_pipeline = apex and pp > 1 and not aligned
    value = 'aligned' if aligned or nemo_apex_pipeline else 'next-forward'
    values.append(value)
    why = ('with overlap_param_gather_with_optimizer_step' if e['overlap_param_gather_with_optimizer_step']
           else 'with align_param_gather' if aligned
           else ("apex's DistributedFusedAdam under NeMo 1.x, whose fwd_bwd_step hands the pipeline "
                 "schedule param_sync_func = self.sync_overlap_parameters with the distributed "
                 "optimizer (NVIDIA/NeMo v1.17.0-v1.23.0 megatron_gpt_model.py), so each model "
                 "chunk's parameters are dispatched together ahead of its first forward, as "
                 "align_param_gather does") if nemo_apex_pipeline
           else 'one bucket ahead')
    note = ('parallel.param_gather %s (thirty-sixth pass; the parameter all-gather overlapped with the '
            'next forward, %s): %s' % (value, why, ev))
    s = set_parallel_field(s, e['id'], 'param_gather', value, note)
    n += 1
open(path, 'w').write(s)
json.loads(s)
print(n, 'entries', collections.Counter(values))
