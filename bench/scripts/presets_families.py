#!/usr/bin/env python3
# Per-family presets errors (simulate --published's own summary), before and after, for the
# families with a context-parallel entry, and all runs.
# Usage: presets_families.py PRESETS_BEFORE.json PRESETS_AFTER.json CORPUS.json  (each a
# `simulate --published CORPUS --json` report; prints a markdown table)
import json, sys
before = json.load(open(sys.argv[1]))["summary"]; after = json.load(open(sys.argv[2]))["summary"]
corpus = json.load(open(sys.argv[3]))
cp = {r["family"]["source"] for r in corpus if (r["parallel"].get("cp") or 1) > 1}
def cell(s):
    return "%.1f%%, %.1f%%, %+.1f%%" % (100 * s["median_abs"], 100 * s["p90_abs"], 100 * s["mean_signed"])
b = {f["family"]: f["throughput"] for f in before["by_family"]}
print("| family (presets: median, p90, mean) | runs | before | after |")
print("|---|---:|---|---|")
for f in after["by_family"]:
    if f["family"].split(" / ")[0] in cp and f["throughput"]["runs"]:
        print("| %s | %d | %s | %s |" % (f["family"], f["throughput"]["runs"], cell(b[f["family"]]), cell(f["throughput"])))
print("| all | %d | %s | %s |" % (after["throughput"]["runs"], cell(before["throughput"]), cell(after["throughput"])))
