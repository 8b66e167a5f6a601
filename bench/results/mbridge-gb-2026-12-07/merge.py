#!/usr/bin/env python3
"""Append the helpers' drafted Megatron-Bridge GB200 / GB300 / B300 entries to a copy of the corpus.

Usage: merge.py CORPUS_IN CORPUS_OUT DRAFT.json [DRAFT.json ...]
Refuses duplicate ids and entries outside the three new families (the fifty-fourth pass's rules,
validation/corpus/NOTES.md)."""
import json
import sys

corpus_in, corpus_out, drafts = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = json.load(open(corpus_in))
ids = {r["id"] for r in runs}
added = 0
for path in drafts:
    for entry in json.load(open(path)):
        fam = entry["family"]
        if fam["source"] != "megatron-bridge-perf-summary" or fam["gpu_generation"] not in (
                "GB200", "GB300", "B300"):
            sys.exit(f"{path}: {entry['id']}: family {fam} is outside the pass")
        if entry["id"] in ids:
            sys.exit(f"{path}: duplicate id {entry['id']}")
        ids.add(entry["id"])
        runs.append(entry)
        added += 1
json.dump(runs, open(corpus_out, "w"), indent=1, ensure_ascii=False)
open(corpus_out, "a").write("\n")
print(f"{added} entries added; {len(runs)} in {corpus_out}")
