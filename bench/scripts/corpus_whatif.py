#!/usr/bin/env python3
"""A what-if copy of the published-run corpus: the entries whose family source or id contains
FILTER get each FIELD=VALUE set (VALUE read as JSON when it parses, else as a string; a dotted
FIELD such as parallel.recompute sets a nested field), the rest are copied unchanged. For a
diagnosis only: run bench/simulator/published_breakdown on the copy to see what a reading the
sources do not settle would move (bench/results/published-2026-11-25-slow/NOTES.md). The copy
is never the corpus: entries change only where a source says so, quoted in their notes.

Usage: corpus_whatif.py CORPUS.json OUT.json FILTER FIELD=VALUE [FIELD=VALUE ...]
Exits 2 with a message when no entry matches, a FIELD=VALUE has no '=', or a dotted FIELD's
parent is not an object. Run by hand in a study; no test: it only edits a JSON copy.
"""
import json
import sys
from pathlib import Path


def parse_setting(text):
    if "=" not in text:
        sys.exit(f"corpus_whatif: '{text}' is not FIELD=VALUE")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.split("."), value


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    corpus, out, needle = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    settings = [parse_setting(s) for s in sys.argv[4:]]
    runs = json.loads(corpus.read_text(encoding="utf-8"))
    matched = 0
    for run in runs:
        if needle not in run["family"]["source"] and needle not in run["id"]:
            continue
        matched += 1
        for path, value in settings:
            node = run
            for part in path[:-1]:
                node = node.get(part)
                if not isinstance(node, dict):
                    print(f"corpus_whatif: {run['id']}: '{'.'.join(path)}' has no object parent",
                          file=sys.stderr)
                    sys.exit(2)
            node[path[-1]] = value
    if matched == 0:
        print(f"corpus_whatif: no entry's family or id contains '{needle}'", file=sys.stderr)
        sys.exit(2)
    out.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    print(f"corpus_whatif: {matched} entries changed -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
