#!/usr/bin/env python3
"""bench/scripts/report.py on synthetic rounds: the steadiness gate, the drift-removed figure
(a plan's error relative to the reference plan run around it) and the malformed-input errors."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scripts",
                      "report.py")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make_round(root, k, plans, references, reference_predicted_ms):
    """plans: [(name, predicted_ms, measured_ms)]; references: [(label, ms)] in run order."""
    d = os.path.join(root, f"round-{k}")
    write(os.path.join(d, "profile.json"), json.dumps({"device": "cpu: test", "date": "2026-11-21"}))
    for name, predicted, measured in plans:
        write(os.path.join(d, "runs", name + ".plan.json"), json.dumps({"tp": 1, "pp": 1, "dp": 2}))
        write(os.path.join(d, "runs", name + ".compare.json"), json.dumps({
            "schema": "trainplan.compare/1",
            "rows": [{"quantity": "step_time", "predicted": predicted / 1e3,
                      "measured": measured / 1e3}],
            "step_time_error_pct": 100.0 * (predicted - measured) / measured,
            "bytes_exact": True, "max_abs_memory_error_pct": 1.0}))
    write(os.path.join(d, "reference.txt"), "".join(f"{l} {ms}\n" for l, ms in references))
    if reference_predicted_ms is not None:
        write(os.path.join(d, "reference.predicted.json"),
              json.dumps({"step_time_s": reference_predicted_ms / 1e3}))


def load(path):
    with open(path) as f:
        return json.load(f)


def run_report(root, *extra):
    return subprocess.run([sys.executable, REPORT, *extra, root], capture_output=True, text=True)


class ReportTest(unittest.TestCase):
    def test_drift_removed_divides_out_the_reference_around_each_plan(self):
        with tempfile.TemporaryDirectory() as root:
            # The reference is predicted at 10 ms. The machine runs at 1.0x for plan a (refs 10,
            # 10) and at 1.5x for plan b (refs 15, 15): both plans' models are exact relative to
            # the reference, though b's raw error is -33%.
            make_round(root, 1, [("a", 20, 20), ("b", 20, 30)],
                       [("calibrated", 10), ("a", 10), ("b", 15)], 10)
            done = run_report(root)
            self.assertEqual(done.returncode, 0, done.stderr)
            runs = {r["name"]: r for r in load(os.path.join(root, "report.json"))["runs"]}
            self.assertAlmostEqual(runs["a"]["drift_removed_error_pct"], 0.0)
            # b's bracket is 10 before and 15 after: mean 12.5, speed 1.25; 20 x 1.25 = 25 against
            # 30 measured.
            self.assertAlmostEqual(runs["b"]["drift_removed_error_pct"], 100.0 * (25 - 30) / 30)
            self.assertEqual(runs["a"]["drift_removed_rounds"], 1)
            self.assertEqual(runs["b"]["drift_removed_rounds"], 0)  # its bracket moved 40%
            self.assertAlmostEqual(runs["b"]["step_error_pct"], -100.0 / 3)
            with open(os.path.join(root, "report.md")) as f:
                self.assertIn("Drift removed", f.read())

    def test_a_plan_takes_its_median_over_the_rounds_whose_bracket_agreed(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 22)], [("calibrated", 10), ("a", 10)], 10)
            make_round(root, 2, [("a", 20, 30)], [("calibrated", 10), ("a", 20)], 10)
            make_round(root, 3, [("a", 20, 24)], [("calibrated", 10), ("a", 10.2)], 10)
            done = run_report(root)
            self.assertEqual(done.returncode, 0, done.stderr)
            a = load(os.path.join(root, "report.json"))["runs"][0]
            self.assertEqual(a["drift_removed_rounds"], 2)  # round 2's bracket moved
            # Rounds 1 and 3: (20 - 22) / 22 and (20 x 1.01 - 24) / 24; their median is the mean.
            self.assertAlmostEqual(a["drift_removed_error_pct"],
                                   (100 * (20 - 22) / 22 + 100 * (20 * 1.01 - 24) / 24) / 2)

    def test_without_the_reference_prediction_there_is_no_drift_removed_figure(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("calibrated", 10), ("a", 10)], None)
            done = run_report(root)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = load(os.path.join(root, "report.json"))
            self.assertNotIn("drift_removed_error_pct", report["runs"][0])
            self.assertNotIn("drift_removed", report["summary"])

    def test_a_malformed_reference_line_names_the_file_line_and_value(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("calibrated", "fast")], 10)
            done = run_report(root)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("reference.txt:1", done.stderr)
            self.assertIn("'fast'", done.stderr)

    def test_steady_gate(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("calibrated", 10), ("a", 10.4)], 10)
            self.assertEqual(run_report(os.path.join(root, "round-1"), "--steady", "5").returncode, 0)
            self.assertEqual(run_report(os.path.join(root, "round-1"), "--steady", "3").returncode, 1)


if __name__ == "__main__":
    unittest.main()
