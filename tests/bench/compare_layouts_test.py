#!/usr/bin/env python3
"""bench/gpu/compare_layouts.py on synthetic runs (no GPU): the loss and weight checks, the
noise-floor bound, the embedding group counted with pp, and its usage error."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu",
                      "compare_layouts.py")


def write_run(d, name, losses, weights, sent=None, predicted=None):
    """weights: {(tensor, row, col): value}, written as one rank's --params-out file."""
    j = {"loss_per_step": losses}
    if sent is not None:
        j["bytes_sent_per_group_per_rank_last_step"] = sent
        j["predicted_bytes_per_group_per_rank"] = predicted
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(j, f)
    with open(os.path.join(d, "p_" + name + ".rank0.txt"), "w") as f:
        for (t, r, c), v in weights.items():
            f.write(f"{t} {r} {c} {v!r}\n")


def compare(d, run, floor=None):
    args = [sys.executable, SCRIPT, os.path.join(d, "ref.json"), os.path.join(d, "p_ref"),
            os.path.join(d, run + ".json"), os.path.join(d, "p_" + run), run]
    if floor:
        args += [os.path.join(d, floor + ".json"), os.path.join(d, "p_" + floor)]
    return subprocess.run(args, capture_output=True, text=True)


def weights(scale):
    # 1000 weights of 0.02 and a LayerNorm row of ones; `scale` perturbs each by +-scale.
    w = {("w", i, 0): 0.02 + (scale if i % 2 else -scale) for i in range(1000)}
    w.update({("ln", 0, i): 1.0 for i in range(10)})
    return w


class CompareLayoutsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        write_run(self.d, "ref", [5.5, 5.4], weights(0.0))

    def tearDown(self):
        self.dir.cleanup()

    def test_the_floor_widens_the_weight_bound_to_three_times_itself(self):
        # ||ref|| = sqrt(1000 * 4e-4 + 10) = 3.22; a +-s perturbation: rel L2 = s * 31.6 / 3.22.
        write_run(self.d, "floor", [5.5, 5.4], weights(2e-4))   # rel L2 1.96e-3
        write_run(self.d, "near", [5.5, 5.4], weights(5e-4))    # 4.9e-3: within 3 x floor
        write_run(self.d, "far", [5.5, 5.4], weights(8e-4))     # 7.8e-3: beyond it
        self.assertEqual(compare(self.d, "near").returncode, 1)  # > 1e-3 without a floor
        r = compare(self.d, "near", "floor")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("floor 1.96e-03, bound 5.88e-03", r.stdout)
        r = compare(self.d, "far", "floor")
        self.assertEqual(r.returncode, 1)
        self.assertIn("weights rel L2 7.84e-03 > 5.88e-03", r.stdout)

    def test_a_loss_off_by_more_than_half_a_percent_fails(self):
        write_run(self.d, "run", [5.5, 5.5], weights(0.0))
        r = compare(self.d, "run")
        self.assertEqual(r.returncode, 1)
        self.assertIn("step 2 loss", r.stdout)

    def test_the_embedding_group_counts_with_pp(self):
        write_run(self.d, "pp", [5.5, 5.4], weights(0.0),
                  {"pp": [32768.0, 32768.0], "embedding": [32768.0, 32768.0], "tp": [0.0, 0.0]},
                  {"pp": [65536.0, 65536.0], "tp": [0.0, 0.0]})
        r = compare(self.d, "pp")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("bytes = cost model", r.stdout)
        write_run(self.d, "pp", [5.5, 5.4], weights(0.0),
                  {"pp": [32768.0, 32768.0], "tp": [0.0, 0.0]},
                  {"pp": [65536.0, 65536.0], "tp": [0.0, 0.0]})
        self.assertIn("pp: sent [32768.0, 32768.0] predicted", compare(self.d, "pp").stdout)

    def test_a_wrong_argument_count_prints_the_usage(self):
        r = subprocess.run([sys.executable, SCRIPT, "a", "b"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("FLOOR.json", r.stderr)


if __name__ == "__main__":
    unittest.main()
