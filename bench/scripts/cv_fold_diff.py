#!/usr/bin/env python3
"""Prints the folds whose chosen constants differ between two cross-validation reports
(`simulate --published ... --cross-validate --json`, raw/cv.json), and each report's fit over all
runs.  Usage: cv_fold_diff.py BEFORE_cv.json AFTER_cv.json"""
import json
import sys

a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
print("fit over all runs:", a["fit_all"], "->", b["fit_all"])
fa = {f["family"]: f for f in a["folds"]}
same = 0
for f in b["folds"]:
    o = fa.get(f["family"])
    key = ("gemm_share", "memory_efficiency")
    if o and all(o[k] == f[k] for k in key):
        same += 1
        continue
    before = "-" if not o else f"{o['gemm_share']} / {o['memory_efficiency']}"
    print(f"{f['family']}: {before} -> {f['gemm_share']} / {f['memory_efficiency']}")
print(f"{same} of {len(b['folds'])} folds chose the same constants")
