"""bench/scripts/moe_layer_excess.py against the real simulate and corpus: a row per matching MoE
run, and every error path (bad arguments, unreadable corpus, no matching run, simulate that does
not run) exits 2 with a message. argv[1]: the simulate binary."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "scripts", "moe_layer_excess.py")
CORPUS = os.path.join(ROOT, "validation", "corpus", "published_runs.json")
SIMULATE = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class MoeLayerExcessTest(unittest.TestCase):
    def test_a_matching_moe_run_gets_its_excess_per_layer(self):
        done = run(SIMULATE, CORPUS, "mbridge2511_b200_qwen3_30b")
        self.assertEqual(done.returncode, 0, done.stderr)
        rows = done.stdout.splitlines()
        self.assertEqual(len(rows), 1, done.stdout)
        self.assertRegex(rows[0], r"^mbridge2511_b200_qwen3_30b_a3b_8gpu .*MoE layers/stage +48\.0 "
                                  r"excess per MoE layer invocation +[0-9.]+ ms$")

    def test_bad_arguments_print_the_usage(self):
        done = run(SIMULATE)
        self.assertEqual(done.returncode, 2)
        self.assertIn("Run: python3 bench/scripts/moe_layer_excess.py", done.stderr)

    def test_an_unreadable_corpus_is_named(self):
        done = run(SIMULATE, "/no/such/corpus.json")
        self.assertEqual(done.returncode, 2)
        self.assertIn("cannot read corpus '/no/such/corpus.json'", done.stderr)

    def test_no_matching_run_names_the_filter(self):
        done = run(SIMULATE, CORPUS, "no_such_run_id")
        self.assertEqual(done.returncode, 2)
        self.assertIn("no MoE run with tokens_per_s matches 'no_such_run_id'", done.stderr)

    def test_a_simulate_that_does_not_run_is_named(self):
        done = run("/no/such/simulate", CORPUS, "mbridge2511_b200_qwen3_30b")
        self.assertEqual(done.returncode, 2)
        self.assertIn("cannot run simulate '/no/such/simulate'", done.stderr)
        with tempfile.TemporaryDirectory() as d:
            failing = os.path.join(d, "simulate")
            with open(failing, "w") as f:
                f.write("#!/bin/sh\necho broken >&2\nexit 4\n")
            os.chmod(failing, 0o755)
            done = run(failing, CORPUS, "mbridge2511_b200_qwen3_30b")
            self.assertEqual(done.returncode, 2)
            self.assertIn("exited 4: broken", done.stderr)


if __name__ == "__main__":
    SIMULATE = sys.argv.pop(1)
    unittest.main()
