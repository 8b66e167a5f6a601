#!/usr/bin/env python3
"""bench/scripts/report.py on synthetic rounds: each plan's steadiness gate (the reference runs
around its attempt), the median over its steady rounds, the attempts, and the malformed-input
errors."""
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


def make_round(root, k, plans, references, attempts=None, round_profile=False):
    """plans: [(name, predicted_ms, measured_ms)]; references: [(label, ms)] in run order;
    attempts: {name: text of runs/NAME.attempts}. Each plan gets its own profile, as the script
    writes them; round_profile adds round-K/profile.json (the older layout)."""
    d = os.path.join(root, f"round-{k}")
    if round_profile:
        write(os.path.join(d, "profile.json"), json.dumps({"device": "cpu: round", "date": "2026-11-20"}))
    for name, predicted, measured in plans:
        write(os.path.join(d, "runs", name + ".plan.json"), json.dumps({"tp": 1, "pp": 1, "dp": 2}))
        write(os.path.join(d, "runs", name + ".profile.json"),
              json.dumps({"device": "cpu: test", "date": "2026-11-21"}))
        write(os.path.join(d, "runs", name + ".compare.json"), json.dumps({
            "schema": "trainplan.compare/1",
            "rows": [{"quantity": "step_time", "predicted": predicted / 1e3,
                      "measured": measured / 1e3}],
            "step_time_error_pct": 100.0 * (predicted - measured) / measured,
            "bytes_exact": True, "max_abs_memory_error_pct": 1.0}))
    for name, text in (attempts or {}).items():
        write(os.path.join(d, "runs", name + ".attempts"), text)
    write(os.path.join(d, "reference.txt"), "".join(f"{l} {ms}\n" for l, ms in references))


def load(path):
    with open(path) as f:
        return json.load(f)


def run_report(root, *extra):
    return subprocess.run([sys.executable, REPORT, *extra, root], capture_output=True, text=True)


def err(predicted, measured):
    return 100.0 * (predicted - measured) / measured


class ReportTest(unittest.TestCase):
    def test_a_plan_takes_its_median_over_its_steady_rounds(self):
        with tempfile.TemporaryDirectory() as root:
            # Round 2's reference moved from 10 to 20 ms around plan a: not steady, left out.
            make_round(root, 1, [("a", 20, 22)], [("a:before", 10), ("a", 10.2)])
            make_round(root, 2, [("a", 20, 40)], [("a:before", 10), ("a", 20)])
            make_round(root, 3, [("a", 20, 24), ("b", 10, 10)],
                       [("a:before", 10), ("a", 10), ("b:before", 10), ("b", 10.4)])
            report = self.report_of(root)
            runs = {r["name"]: r for r in report["runs"]}
            a = runs["a"]
            self.assertEqual(a["steady_rounds"], 2)
            self.assertEqual(a["round_steady"], [True, False, True])
            # Rounds 1 and 3 (-9.1% and -16.7%): the median of two is their mean; the row shows
            # the times of one of them (equally near).
            self.assertAlmostEqual(a["step_error_pct"], (err(20, 22) + err(20, 24)) / 2)
            self.assertIn(a["round"], (1, 3))
            self.assertAlmostEqual(a["measured_step_s"], {1: 22e-3, 3: 24e-3}[a["round"]])
            self.assertEqual(a["round_step_errors_pct"], [err(20, 22), err(20, 40), err(20, 24)])
            self.assertEqual(a["reference_around_ms"], {1: [10, 10.2], 3: [10, 10]}[a["round"]])
            self.assertEqual(runs["b"]["steady_rounds"], 1)  # 4% apart: within the 5% default
            self.assertEqual(report["summary"]["steady_samples"], 3)
            self.assertEqual(report["summary"]["samples"], 4)
            self.assertEqual(report["device"], "cpu: test")
            # With a 3% limit b's round is no longer steady and b uses every round it has.
            report = self.report_of(root, "--drift-pct", "3")
            self.assertEqual(report["summary"]["plans_without_steady_round"], ["b"])
            with open(os.path.join(root, "report.md")) as f:
                self.assertIn("Plans with no steady round (their rows use every round): b.", f.read())

    def test_rounds_without_a_reference_plan_say_so(self):
        # The GPU script calibrates once and runs no reference plan: the text must not describe
        # the CPU study's brackets, nor count steady attempts.
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 25), ("b", 10, 10)], [])
            report = self.report_of(root)
            self.assertEqual(report["summary"]["steady_samples"], 0)
            with open(os.path.join(root, "report.md")) as f:
                md = f.read()
            self.assertIn("No reference plan brackets the runs here", md)
            self.assertNotIn("both cores", md)
            self.assertNotIn("Steady attempts kept", md)

    def test_without_a_steady_round_every_round_counts(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 30)], [("a:before", 10), ("a", 20)], {"a": "3\n"})
            make_round(root, 2, [("a", 20, 20)], [("a:before", 20), ("a", 10)], {"a": "2"})
            make_round(root, 3, [("a", 20, 25)], [("a:before", 10), ("a", 30)], {"a": "3"})
            report = self.report_of(root)
            a = report["runs"][0]
            self.assertEqual(a["steady_rounds"], 0)
            self.assertAlmostEqual(a["step_error_pct"], err(20, 25))  # the middle of three
            self.assertEqual(a["round_attempts"], [3, 2, 3])
            self.assertEqual(report["summary"]["attempts"], 8)
            with open(os.path.join(root, "report.md")) as f:
                self.assertIn("+0.0% (2)", f.read())

    def test_the_older_layout_brackets_a_plan_with_the_line_before_it(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20), ("b", 20, 30)],
                       [("calibrated", 10), ("a", 10), ("b", 15)], round_profile=True)
            report = self.report_of(root)
            runs = {r["name"]: r for r in report["runs"]}
            self.assertEqual(runs["a"]["reference_around_ms"], [10, 10])
            self.assertEqual(runs["b"]["reference_around_ms"], [10, 15])
            self.assertEqual(runs["b"]["steady_rounds"], 0)
            self.assertEqual(report["device"], "cpu: round")

    def test_other_processes_cpu_share_gates_a_round_and_is_reported(self):
        with tempfile.TemporaryDirectory() as root:
            # Both rounds' references agree; round 1's run shared the cores (40% of their time
            # went to other processes), round 2's did not. The fastest step is shown.
            make_round(root, 1, [("a", 20, 30)], [("a:before", 10), ("a", 10)])
            make_round(root, 2, [("a", 20, 21)], [("a:before", 10), ("a", 10)])
            write(os.path.join(root, "round-1", "runs", "a.contention"),
                  "other_cpu_pct 40.0 load1 6.5 own_cpu_s 1.0 wall_s 1.2\n")
            write(os.path.join(root, "round-2", "runs", "a.contention"),
                  "other_cpu_pct 3.0 load1 0.9 own_cpu_s 1.1 wall_s 0.6\n")
            write(os.path.join(root, "round-2", "runs", "a.measured.json"),
                  json.dumps({"step_times_s": [0.025, 0.019, 0.021]}))
            report = self.report_of(root)
            a = report["runs"][0]
            self.assertEqual(a["round_steady"], [False, True])
            self.assertAlmostEqual(a["step_error_pct"], err(20, 21))
            self.assertEqual(a["round_other_cpu_pct"], [40.0, 3.0])
            self.assertAlmostEqual(a["fastest_step_s"], 0.019)
            self.assertEqual(report["summary"]["load1_range"], [0.9, 6.5])
            with open(os.path.join(root, "report.md")) as f:
                md = f.read()
            self.assertIn("(1; 40%)", md)
            self.assertIn("at most 10% of the cores' time", md)
            # With a 50% limit both rounds count.
            self.assertEqual(self.report_of(root, "--other-pct", "50")["runs"][0]["steady_rounds"], 2)

    def test_the_in_run_reference_gate_refuses_a_round(self):
        with tempfile.TemporaryDirectory() as root:
            # Both rounds' references agree and no other process ran; round 1's in-run
            # reference kernel ran 30% slower than calibrated (compare's reference_gate).
            make_round(root, 1, [("a", 20, 30)], [("a:before", 10), ("a", 10)])
            make_round(root, 2, [("a", 20, 21)], [("a:before", 10), ("a", 10)])
            for k, steady, dev in ((1, False, -30.0), (2, True, 1.5)):
                path = os.path.join(root, f"round-{k}", "runs", "a.compare.json")
                cmp = load(path)
                cmp["reference_gate"] = {"steady": steady, "deviation_pct": dev}
                write(path, json.dumps(cmp))
            report = self.report_of(root)
            a = report["runs"][0]
            self.assertEqual(a["round_steady"], [False, True])
            self.assertAlmostEqual(a["step_error_pct"], err(20, 21))
            self.assertEqual(a["round_reference_gate_pct"], [-30.0, 1.5])
            self.assertEqual(report["summary"]["refused_by_reference_gate"], 1)
            with open(os.path.join(root, "report.md")) as f:
                md = f.read()
            self.assertIn("(1; ref -30.0%)", md)
            self.assertIn("in-run reference kernel", md)

    def test_the_slowest_ranks_reference_gemm_is_named_per_round(self):
        with tempfile.TemporaryDirectory() as root:
            # Round 1: rank 1's reference GEMM ran 20% below rank 0's (a slow vCPU under it:
            # cpu-2026-12-05c); round 2: 2% apart (not named); round 3: one rank's rate only.
            for k in (1, 2, 3):
                make_round(root, k, [("a", 20, 25)], [("a:before", 10), ("a", 10)])
            per_round = {1: [[150e9, 150e9, 140e9], [120e9, 110e9, 130e9]],
                         2: [[150e9], [147e9]], 3: [[150e9]]}
            for k, rates in per_round.items():
                write(os.path.join(root, f"round-{k}", "runs", "a.measured.json"), json.dumps({
                    "step_times_s": [0.025],
                    "cluster": {"reference_gemm": {"per_rank": [
                        {"rank": r, "flops_per_s": f} for r, f in enumerate(rates)]}}}))
            a = self.report_of(root)["runs"][0]
            (slow1, pct1), (slow2, pct2), none = a["round_slowest_rank"]
            self.assertEqual((slow1, slow2), (1, 1))
            self.assertAlmostEqual(pct1, 20.0)
            self.assertAlmostEqual(pct2, 2.0)
            self.assertIsNone(none)
            with open(os.path.join(root, "report.md")) as f:
                md = f.read()
            self.assertIn("(1; slow r1 -20%)", md)
            self.assertEqual(md.count("slow r1 -"), 1)  # 2% apart is not named

    def test_a_malformed_contention_file_names_the_file(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("a:before", 10), ("a", 10)])
            write(os.path.join(root, "round-1", "runs", "a.contention"), "other_cpu_pct busy\n")
            self.assert_fails_naming(root, "a.contention", "other_cpu_pct busy")

    def report_of(self, root, *extra):
        """Runs report.py over root, asserts it succeeded and returns its report.json."""
        done = run_report(root, *extra)
        self.assertEqual(done.returncode, 0, done.stderr)
        return load(os.path.join(root, "report.json"))

    def assert_fails_naming(self, root, *names):
        done = run_report(root)
        self.assertNotEqual(done.returncode, 0)
        for name in names:
            self.assertIn(name, done.stderr)

    def test_a_malformed_reference_line_names_the_file_line_and_value(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("a:before", "fast")])
            self.assert_fails_naming(root, "reference.txt:1", "'fast'")

    def test_a_malformed_attempts_file_names_the_file_and_value(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("a:before", 10), ("a", 10)], {"a": "two"})
            self.assert_fails_naming(root, "a.attempts", "'two'")

    def test_the_fit_only_prediction_is_reported_over_the_same_rounds(self):
        with tempfile.TemporaryDirectory() as root:
            # Round 2 is unsteady (its reference moved): its fit-only error is left out too.
            make_round(root, 1, [("a", 20, 22)], [("a:before", 10), ("a", 10)])
            make_round(root, 2, [("a", 20, 40)], [("a:before", 10), ("a", 20)])
            make_round(root, 3, [("a", 20, 24)], [("a:before", 10), ("a", 10)])
            for k, fit_ms in ((1, 18), (2, 10), (3, 20)):
                write(os.path.join(root, f"round-{k}", "runs", "a.predicted_fit.json"),
                      json.dumps({"step_time_s": fit_ms / 1e3}))
            report = self.report_of(root)
            a = report["runs"][0]
            self.assertAlmostEqual(a["fit_only_step_error_pct"], (err(18, 22) + err(20, 24)) / 2)
            s = report["summary"]
            self.assertAlmostEqual(s["median_abs_fit_only_step_error_pct"],
                                   abs(a["fit_only_step_error_pct"]))
            self.assertAlmostEqual(s["max_abs_fit_only_step_error_pct"],
                                   abs(a["fit_only_step_error_pct"]))
            with open(os.path.join(root, "report.md")) as f:
                self.assertIn("fit only", f.read())

    def test_without_fit_only_predictions_the_column_reads_na(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 22)], [("a:before", 10), ("a", 10)])
            report = self.report_of(root)
            self.assertIsNone(report["runs"][0]["fit_only_step_error_pct"])
            self.assertIsNone(report["summary"]["median_abs_fit_only_step_error_pct"])

    def test_a_malformed_fit_only_prediction_names_the_file_and_field(self):
        with tempfile.TemporaryDirectory() as root:
            make_round(root, 1, [("a", 20, 20)], [("a:before", 10), ("a", 10)])
            write(os.path.join(root, "round-1", "runs", "a.predicted_fit.json"), "{}")
            self.assert_fails_naming(root, "a.predicted_fit.json", "step_time_s")

    def test_no_runs_is_an_error_naming_the_directory(self):
        with tempfile.TemporaryDirectory() as root:
            self.assert_fails_naming(root, root)

if __name__ == "__main__":
    unittest.main()
