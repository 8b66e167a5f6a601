#!/usr/bin/env python3
"""Run-by-run step-time errors of the nanotron family under successive corpora (issue 23, study
bench/results/published-2026-11-25-nanotron). Each argument is LABEL=FILE, FILE the output of
`build/bench/simulator/published_breakdown CORPUS nanotron` (one JSON object per run, at the
presets' constants). Prints a markdown table: measured step, then each corpus's predicted step
and throughput error (measured / predicted - 1; + is predicted too fast).

Usage: nanotron_step_table.py before=a.txt zero1=b.txt final=c.txt > steps.md
"""
import json
import sys


def load(path):
    runs = {}
    for line in open(path):
        line = line.strip()
        if line.startswith('{'):
            j = json.loads(line)
            runs[j['id']] = j
    return runs


def main():
    cols = [arg.split('=', 1) for arg in sys.argv[1:]]
    data = [(label, load(path)) for label, path in cols]
    first = data[0][1]
    head = '| run | layout | measured s |' + ''.join(f' {l} s | {l} err |' for l, _ in data)
    print(head)
    print('|---|---|---:|' + '---:|---:|' * len(data))
    for rid, r in first.items():
        p = r['plan']
        lay = f"tp{p['tp']} pp{p['pp']} dp{p['dp']} z{p['zero_stage']} mbs{p['micro_batch_size']}"
        m = r['measured_step_s']
        cells = ''
        for _, d in data:
            s = d[rid]['predicted_step_s']
            cells += f' {s:.4f} | {m / s - 1:+.1%} |'
        print(f"| {rid.replace('nanotron_ultrascale_h100_', '')} | {lay} | {m:.4f} |{cells}")


if __name__ == '__main__':
    main()
