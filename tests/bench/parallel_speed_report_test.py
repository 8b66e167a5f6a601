#!/usr/bin/env python3
"""bench/scripts/parallel_speed_report.py on synthetic rounds: the medians of wall and CPU time
(user + system), the AFTER/BEFORE ratio of the medians, failed runs left out and listed, the
checks copied, and its errors (a missing value, a field that is not a number, no runs); and
parallel_speed.sh's input errors, which it checks before it runs anything."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scripts")
SCRIPT = os.path.join(SCRIPTS, "parallel_speed_report.py")
HEAD = "case\ttools\tthreads\tround\twall_s\tuser_s\tsys_s\trss_mb\tminor_faults\texit\tload1\n"


def run_report(out, rows, checks=None):
    with open(os.path.join(out, "rounds.tsv"), "w") as f:
        f.write(HEAD + "".join("\t".join(str(v) for v in r) + "\n" for r in rows))
    if checks is not None:
        with open(os.path.join(out, "checks.md"), "w") as f:
            f.write(checks)
    return subprocess.run([sys.executable, SCRIPT, out, "the command", "2 cores"],
                          capture_output=True, text=True)


class ParallelSpeedReport(unittest.TestCase):
    def test_medians_ratio_failures_and_checks(self):
        rows = [("sim", "before", "-", 1, 40, 5.0, 1.0, 1800, 500000, 0, 9.5),
                ("sim", "before", "-", 2, 30, 6.0, 1.0, 1800, 500000, 0, 10.5),
                ("sim", "before", "-", 3, 50, 7.0, 1.0, 1800, 500000, 0, 11.0),
                ("sim", "after", "1", 1, 20, 3.0, 0.5, 1700, 3000, 0, 8.0),
                ("sim", "after", "1", 2, 22, 3.5, 0.5, 1700, 3000, 0, 8.0),
                ("sim", "after", "1", 3, 99, 0.1, 0.0, 10, 10, 1, 8.0)]
        with tempfile.TemporaryDirectory() as out:
            done = run_report(out, rows, "- round 1, sim: byte-identical\n")
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(os.path.join(out, "report.md")) as f:
                text = f.read()
        # before: wall median 40, CPU 6, 7, 8 -> 7.00, range 6.00-8.00.
        self.assertIn("| sim | before | - | 3 | 40.00 | 7.00 | 6.00-8.00 | 6.00 | 1.00 | 1800 | 500000 |",
                      text)
        # after: the failed round is left out: CPU 3.5 and 4.0 -> 3.75.
        self.assertIn("| sim | after | 1 | 2 | 21.00 | 3.75 | 3.50-4.00 |", text)
        self.assertIn("| sim | 1 | 7.00 | 3.75 | 0.536 |", text)
        self.assertIn("- sim, after, threads 1, round 3: exit 1", text)
        self.assertIn("load average before the runs: 8.00 to 11.00", text)
        self.assertIn("- round 1, sim: byte-identical", text)

    def test_a_missing_value_names_the_line_and_field(self):
        with tempfile.TemporaryDirectory() as out:
            done = run_report(out, [("sim", "before", "-", 1, 40, "", 1.0, 1, 1, 0, 1.0)])
        self.assertEqual(done.returncode, 1)
        self.assertIn("rounds.tsv line 2: no value for user_s", done.stderr)

    def test_a_field_that_is_not_a_number_is_named(self):
        with tempfile.TemporaryDirectory() as out:
            done = run_report(out, [("sim", "before", "-", 1, "abc", 1, 1.0, 1, 1, 0, 1.0)])
        self.assertEqual(done.returncode, 1)
        self.assertIn("wall_s is not a number: 'abc'", done.stderr)

    def test_no_runs_and_no_file_are_errors(self):
        with tempfile.TemporaryDirectory() as out:
            done = run_report(out, [])
            self.assertEqual(done.returncode, 1)
            self.assertIn("holds no runs", done.stderr)
            os.remove(os.path.join(out, "rounds.tsv"))
            done = subprocess.run([sys.executable, SCRIPT, out, "c", "m"], capture_output=True,
                                  text=True)
            self.assertEqual(done.returncode, 1)
            self.assertIn("rounds.tsv", done.stderr)

    def test_usage(self):
        done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertEqual(done.returncode, 2)
        self.assertIn("usage:", done.stderr)


class ParallelSpeedScriptInputs(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run(["bash", os.path.join(SCRIPTS, "parallel_speed.sh"), *args],
                              capture_output=True, text=True)

    def test_usage(self):
        done = self.run_script("a", "b")
        self.assertEqual(done.returncode, 2)
        self.assertIn("usage:", done.stderr)

    def test_rounds_must_be_a_positive_integer(self):
        with tempfile.TemporaryDirectory() as d:
            done = self.run_script(d, d, os.path.join(d, "out"), "0")
        self.assertEqual(done.returncode, 2)
        self.assertIn("ROUNDS must be a positive integer, got '0'", done.stderr)

    def test_a_build_without_the_tools_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            done = self.run_script(d, d, os.path.join(d, "out"))
            self.assertEqual(done.returncode, 2)
            self.assertIn(f"{d} has no tools/plan and tools/simulate", done.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "out")))


if __name__ == "__main__":
    unittest.main()
