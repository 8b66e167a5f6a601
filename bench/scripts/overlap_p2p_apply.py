#!/usr/bin/env python3
"""Sets parallel.overlap_p2p true (SimOptions::overlap_p2p: Megatron-LM's
--overlap-p2p-communication, NeMo's overlap_p2p_comm) on the corpus entries a source survey found
running their pipeline sends behind compute, with the survey's quoted evidence as a note; every
other byte of the file is left as it was.

usage: bench/scripts/overlap_p2p_apply.py CORPUS.json SURVEY.json
SURVEY.json: bench/results/p2p-overlap-2026-12-06/survey.json (id, overlap_p2p true / false /
null, batch_p2p_comm, evidence, doubt). Taken: overlap_p2p true. false and null (cannot tell) are
left as the simulator's default, blocking sends (validation/corpus/NOTES.md, thirty-ninth pass).
"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_edit import set_parallel_field

path = sys.argv[1]  # the corpus file, edited in place
s = open(path).read()
n = 0
for e in json.load(open(sys.argv[2])):
    if e.get('overlap_p2p') is not True:
        continue
    note = ('parallel.overlap_p2p true (thirty-ninth pass survey; pipeline sends behind compute): '
            + e['evidence'])
    s = set_parallel_field(s, e['id'], 'overlap_p2p', True, note)
    n += 1
open(path, 'w').write(s)
json.loads(s)
print(n, 'entries')
