#!/usr/bin/env python3
"""Sets parallel.dp_bucket_elements (Plan::dp_bucket_elements) on the corpus entries a source
survey found running apex's DistributedFusedAdam with a bucket size their own configs give, with
the survey's rule and quoted evidence as a note; every other byte of the file is left as it was.

usage: bench/scripts/dp_bucket_apply.py CORPUS.json SURVEY.json
SURVEY.json: bench/results/dp-buckets-2026-12-06/survey.json (id, framework_optimizer,
bucket_elements, bucket_rule, splits_parameters, fp8_param_gather, evidence). Taken: the
framework_optimizer is apex DistributedFusedAdam tied to the run (not a launcher default), the
survey found the bucket (bucket_elements) and that it fragments parameters (splits_parameters).
Megatron-Core's and PyTorch DDP's buckets close at a parameter's end and are left at 0
(validation/corpus/NOTES.md, thirty-seventh pass).
"""
import collections, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_edit import set_parallel_field

path = sys.argv[1]  # the corpus file, edited in place
s = open(path).read()
survey = json.load(open(sys.argv[2]))
sizes = collections.Counter()
for e in survey:
    fo = e.get('framework_optimizer') or ''
    if not fo.startswith('apex DistributedFusedAdam') or 'not tied to the run' in fo:
        continue
    if not e.get('bucket_elements') or e.get('splits_parameters') is not True:
        continue
    n = int(e['bucket_elements'])
    note = ('parallel.dp_bucket_elements %d (thirty-seventh pass; apex DistributedFusedAdam\'s '
            'fixed-size buckets, one reduce-scatter and one all-gather each): %s. %s'
            % (n, e['bucket_rule'], e['evidence']))
    s = set_parallel_field(s, e['id'], 'dp_bucket_elements', n, note)
    sizes[n] += 1
open(path, 'w').write(s)
json.loads(s)
print(sum(sizes.values()), 'entries', dict(sizes))
