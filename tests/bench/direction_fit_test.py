#!/usr/bin/env python3
"""bench/scripts/direction_fit.py on a synthetic profile: each direction's own error and the
single figure's (fallback) error, the spans it skips, and the errors on bad input."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scripts",
                      "direction_fit.py")


def span(name, time_us, fit_us, probe="tiny GPT"):
    return {"name": name, "probe": probe, "tasks": [name], "time_us": time_us, "fit_us": fit_us}


def profile():
    # Forward 0.8, weight gradient 0.4: a 10 us wgrad fitted exactly at its own efficiency is
    # 5 us at the forward's (overhead 0). Attention backward 0.6 against forward 0.2: its fit
    # of 9 us (measured 10) is 27 us at the forward's.
    return {"gemm_efficiency": 0.8, "gemm_weight_gradient_efficiency": 0.4,
            "attention_efficiency": 0.2, "attention_backward_efficiency": 0.6,
            "kernel_overhead_us": 0.0,
            "measurements": {"tasks": [
                span("fc2_wgrad", 10.0, 10.0),
                span("fc1", 4.0, 5.0),
                span("attention_bwd", 10.0, 9.0),
                span("layernorm", 3.0, 3.0),                    # not a GEMM: skipped
                span("sweep_wgrad", 1.0, 2.0, probe="sweep"),   # the sweep's: skipped
                {"name": "a+b", "probe": "p", "tasks": ["fc1", "fc2"], "time_us": 1, "fit_us": 1},
            ]}}


def run(*paths):
    return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True)


class DirectionFit(unittest.TestCase):
    def test_own_and_single_figure_errors(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.profile.json")
            with open(path, "w") as f:
                json.dump(profile(), f)
            r = run(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {line.split("|")[2].strip(): line for line in r.stdout.splitlines()[2:]}
        self.assertEqual(set(rows), {"weight_gradient", "forward", "attention_backward"})
        self.assertIn("| 1 | 0.400 | +0.0% | -50.0% |", rows["weight_gradient"])
        self.assertIn("| 1 | 0.800 | +25.0% | +25.0% |", rows["forward"])
        self.assertIn("| 1 | 0.600 | -10.0% | +170.0% |", rows["attention_backward"])

    def test_bad_input_names_the_file_and_fails(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.json")
            with open(path, "w") as f:
                f.write("{\"gemm_efficiency\": 0.8}")
            r = run(path)
            self.assertEqual(r.returncode, 1)
            self.assertIn("bad.json", r.stderr)
            self.assertIn("measurements", r.stderr)
            r = run(os.path.join(d, "missing.json"))
            self.assertEqual(r.returncode, 1)
            self.assertIn("missing.json", r.stderr)
        self.assertEqual(run().returncode, 2)


if __name__ == "__main__":
    unittest.main()
