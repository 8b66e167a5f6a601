#!/usr/bin/env python3
"""Tests of the Python module `trainplan` (python/trainplan_module.cc), run by ctest
(python_module): loading models and clusters, plan() and simulate() equal to the tools'
--json output, and errors raised as ValueError naming the field and value.

Usage: test_trainplan.py SOURCE_DIR TOOLS_DIR   (PYTHONPATH holds the built module)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import trainplan

SRC, TOOLS = sys.argv[1], sys.argv[2]
TINY = os.path.join(SRC, "models", "tiny.json")


def tool_json(*args):
    out = subprocess.run([os.path.join(TOOLS, args[0]), *args[1:], "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


class TrainplanModule(unittest.TestCase):
    def test_version_and_build(self):
        build = trainplan.build_info()
        self.assertEqual(build["version"], trainplan.__version__)
        self.assertTrue(build["git_commit"] and build["compiler"])

    def test_load_model_from_path_and_dict(self):
        from_path = trainplan.load_model(TINY)
        with open(TINY) as f:
            from_dict = trainplan.load_model(json.load(f))
        self.assertEqual(from_path, from_dict)
        hf = trainplan.load_model(os.path.join(SRC, "tests/data/hf/gemma-2-2b-config.json"),
                                  seq_len=4096)
        self.assertTrue(hf["tie_word_embeddings"])
        self.assertEqual(hf["seq_len"], 4096)

    def test_plan_equals_the_tool(self):
        cluster = trainplan.make_cluster("H100-80GB", 8)
        got = trainplan.plan(TINY, cluster)
        want = tool_json("plan", "--model", TINY, "--gpus", "8")
        self.assertEqual(got, want)
        self.assertEqual(got["schema"], "trainplan.plan_report/1")

    def test_plan_options_equal_the_tool(self):
        cluster = trainplan.make_cluster("A100-80GB", 16)
        got = trainplan.plan(TINY, cluster, {"top": 3, "global_batch": 64, "tokens": 1e9})
        want = tool_json("plan", "--model", TINY, "--gpus", "16", "--gpu", "A100-80GB",
                         "--top", "3", "--global-batch", "64", "--tokens", "1e9")
        self.assertEqual(got, want)

    def test_no_prefer_measured_equals_the_tool(self):
        cluster = trainplan.make_cluster("A100-80GB", 16)
        got = trainplan.plan(TINY, cluster, {"top": 3, "no_prefer_measured": True})
        want = tool_json("plan", "--model", TINY, "--gpus", "16", "--gpu", "A100-80GB",
                         "--top", "3", "--no-prefer-measured")
        self.assertEqual(got, want)
        with self.assertRaisesRegex(ValueError, "no_prefer_measured"):
            trainplan.plan(TINY, cluster, {"no_prefer_measured": "yes"})

    def test_simulate_equals_the_tool(self):
        with tempfile.TemporaryDirectory() as tmp:
            plan_file = os.path.join(tmp, "plan.json")
            subprocess.run([os.path.join(TOOLS, "plan"), "--model", TINY, "--gpus", "8",
                            "--emit-plan", plan_file], check=True, capture_output=True)
            cluster = trainplan.make_cluster("H100-80GB", 8)
            with open(plan_file) as f:
                got = trainplan.simulate(TINY, cluster, json.load(f))
            want = tool_json("simulate", "--model", TINY, "--gpus", "8", "--plan", plan_file)
        self.assertEqual(got, want)
        self.assertEqual(got["kind"], "predicted")

    def test_readme_example(self):
        # README.md's example, on the tiny model so that it runs in a second.
        cluster = trainplan.make_cluster("H100-80GB", 8)
        report = trainplan.plan(TINY, cluster, {"top": 3})
        best = report["recommendation"]
        step = trainplan.simulate(TINY, cluster, best["plan"])
        self.assertGreater(step["step_time_s"], 0)

    def test_errors_name_the_field(self):
        with open(TINY) as f:
            model = json.load(f)
        model["num_layers"] = 0
        with self.assertRaisesRegex(ValueError, "field 'num_layers': value 0"):
            trainplan.load_model(model)
        cluster = trainplan.make_cluster("H100-80GB", 8)
        with self.assertRaisesRegex(ValueError, "unknown field 'colour'"):
            trainplan.plan(TINY, cluster, {"colour": "blue"})
        with self.assertRaisesRegex(ValueError, "is a hybrid model"):
            trainplan.load_model(os.path.join(SRC, "tests/data/hf/jamba-1.5-mini-config.json"))
        with self.assertRaisesRegex(ValueError, "unknown GPU"):
            trainplan.make_cluster("V100", 8)
        with self.assertRaisesRegex(ValueError, "cannot read"):
            trainplan.load_model(os.path.join(SRC, "no-such-model.json"))
        bad_plan = {"tp": 3, "pp": 1, "dp": 1, "micro_batch_size": 1, "global_batch_size": 1}
        with self.assertRaises(ValueError):
            trainplan.simulate(TINY, cluster, bad_plan)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
