#!/usr/bin/env python3
"""The CPU speed benchmark's helpers without a build or PyTorch: llmc_inputs.py's two binary
files read back field by field as llm.c reads them, llmc_patch.py on a stand-in of train_gpt2.c's
main() and on one that does not match, the report's medians and paired ratios on synthetic
rounds, and executor_cpu_speed.sh's input errors (LLMC_SRC, EXECUTE_THREADS), which it checks
before it runs anything."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scripts")

# The lines of llm.c's train_gpt2.c main() that llmc_patch.py rewrites (facts of its interface,
# written here from its description, not its code): the checkpoint, the token files, B, T, the
# step loop, the validation and the sampling conditions.
MAIN_STAND_IN = """int main() {
    gpt2_build_from_checkpoint(&model, "gpt2_124M.bin");
    const char* train_tokens = access(a, F_OK) != -1 ? a : b;
    const char* val_tokens = access(c, F_OK) != -1 ? c : d;
    int B = 4; // batch
    int T = 64; // sequence
    for (int step = 0; step <= 40; step++) {
        if (step % 10 == 0) { validate(); }
        if (step > 0 && step % 20 == 0) { sample(); }
    }
}
"""


def write_file(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def read_file(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def run(*args, env=None):
    return subprocess.run([sys.executable if args[0].endswith(".py") else "bash", *args],
                          capture_output=True, text=True, env=env)


class LlmcInputs(unittest.TestCase):
    def write(self, tmp, corpus=b"In the beginning", **shape):
        write_file(os.path.join(tmp, "corpus.txt"), corpus)
        args = {"layers": 2, "hidden": 8, "heads": 2, "seq-len": 4, **shape}
        flags = [f"--{k}={v}" for k, v in args.items()]
        return run(os.path.join(SCRIPTS, "llmc_inputs.py"), *flags,
                   "--corpus", os.path.join(tmp, "corpus.txt"),
                   "--checkpoint", os.path.join(tmp, "c.bin"), "--tokens", os.path.join(tmp, "t.bin"))

    def test_checkpoint_header_and_size(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.write(tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            data = read_file(os.path.join(tmp, "c.bin"), "rb")
            header = struct.unpack("<256i", data[:1024])
            self.assertEqual(header[:8], (20240326, 3, 4, 256, 2, 2, 8, 256))
            L, C, T, V = 2, 8, 4, 256
            params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
            self.assertEqual(len(data), 1024 + 4 * params)
            floats = struct.unpack(f"<{params}f", data[1024:])
            ln1w = floats[V * C + T * C:V * C + T * C + L * C]
            self.assertTrue(all(x == 1.0 for x in ln1w))
            wte = floats[:V * C]
            self.assertLess(abs(sum(x * x for x in wte) / len(wte) - 0.02 ** 2), 0.3 * 0.02 ** 2)

    def test_tokens_are_the_corpus_bytes(self):
        with tempfile.TemporaryDirectory() as tmp:
            corpus = bytes(range(256)) + b"\n\xff"
            r = self.write(tmp, corpus=corpus)
            self.assertEqual(r.returncode, 0, r.stderr)
            data = read_file(os.path.join(tmp, "t.bin"), "rb")
            self.assertEqual(struct.unpack("<3i", data[:12]), (20240520, 1, len(corpus)))
            self.assertEqual(list(struct.unpack(f"<{len(corpus)}H", data[1024:])), list(corpus))

    def test_bad_shape_and_corpus_are_refused_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.write(tmp, heads=3)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--hidden 8 is not a multiple of --heads 3", r.stderr)
            r = self.write(tmp, layers=0)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--layers must be a positive integer, got '0'", r.stderr)
            r = self.write(tmp, corpus=b"x")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("corpus.txt holds 1 bytes", r.stderr)


class LlmcPatch(unittest.TestCase):
    def test_rewrites_each_setting_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "src.c"), os.path.join(tmp, "out.c")
            write_file(src, MAIN_STAND_IN)
            r = run(os.path.join(SCRIPTS, "llmc_patch.py"), src, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = read_file(out)
            for expected in ['getenv("LLMC_CHECKPOINT")', 'train_tokens = getenv("LLMC_TOKENS");',
                             'val_tokens = getenv("LLMC_TOKENS");', "int B = LLMC_B;",
                             "int T = LLMC_T;", "step < LLMC_STEPS", "validation off", "sampling off"]:
                self.assertIn(expected, text)
            self.assertNotIn("access(", text)

    def test_a_different_source_is_refused_naming_the_pattern(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "src.c"), os.path.join(tmp, "out.c")
            write_file(src, MAIN_STAND_IN.replace("int B = 4;", "int B = 16;"))
            r = run(os.path.join(SCRIPTS, "llmc_patch.py"), src, out)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("matches /int B = 4;/ 0 times, expected once", r.stderr)
            self.assertFalse(os.path.exists(out))


class Report(unittest.TestCase):
    def test_medians_and_paired_ratios(self):
        rows = []
        # Round 2 is twice as slow for everyone (a busy machine): ratios within a round hold.
        for rnd, scale in [(1, 1.0), (2, 0.5), (3, 1.0)]:
            rows += [{"round": rnd, "implementation": "execute e, 1 thread(s)", "tokens_per_s": 3000 * scale},
                     {"round": rnd, "implementation": "pytorch", "tokens_per_s": 2000 * scale},
                     {"round": rnd, "implementation": "llm.c", "tokens_per_s": 1000 * scale,
                      "last_loss": 4.5}]
        with tempfile.TemporaryDirectory() as tmp:
            write_file(os.path.join(tmp, "rounds.json"), json.dumps(rows))
            r = run(os.path.join(SCRIPTS, "executor_cpu_speed_report.py"), tmp, "12", "2", "3.5", "9.25")
            self.assertEqual(r.returncode, 0, r.stderr)
            text = read_file(os.path.join(tmp, "report.md"))
            svg = read_file(os.path.join(tmp, "tokens_per_s.svg"))
        self.assertIn("| execute e, 1 thread(s) | 3,000 | 1.50x | — |", text)
        self.assertIn("![tokens/s](tokens_per_s.svg)", text)
        # One bar per implementation at its median, one dot per round.
        self.assertEqual(svg.count("<rect"), 3)
        self.assertEqual(svg.count("<circle"), 9)
        self.assertIn(">3,000<", svg)
        self.assertIn(">2,000<", svg)
        self.assertIn("| pytorch | 2,000 | 1.00x | 1.50x |", text)
        self.assertIn("| llm.c | 1,000 | 0.50x | 3.00x |", text)
        self.assertIn("3 paired rounds of 12 steps", text)
        self.assertIn("3.5 to 9.2", text)

    def test_rounds_without_pytorch_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_file(os.path.join(tmp, "rounds.json"),
                       json.dumps([{"round": 1, "implementation": "execute e", "tokens_per_s": 1.0}]))
            r = run(os.path.join(SCRIPTS, "executor_cpu_speed_report.py"), tmp, "12", "2")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("needs an execute row and a pytorch row", r.stderr)


class SpeedScriptInputs(unittest.TestCase):
    def run_script(self, **env):
        with tempfile.TemporaryDirectory() as tmp:
            return run(os.path.join(SCRIPTS, "executor_cpu_speed.sh"), os.path.join(tmp, "no-build"),
                       os.path.join(tmp, "out"), env={**os.environ, **env})

    def test_missing_arguments_print_the_usage(self):
        r = run(os.path.join(SCRIPTS, "executor_cpu_speed.sh"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: executor_cpu_speed.sh BUILD_DIR OUT_DIR", r.stderr)

    def test_llmc_src_not_a_checkout(self):
        r = self.run_script(LLMC_SRC="/no/such/llm.c")
        self.assertEqual(r.returncode, 1)
        self.assertIn("LLMC_SRC=/no/such/llm.c is not an llm.c checkout", r.stderr)

    def test_execute_threads_not_a_count(self):
        r = self.run_script(EXECUTE_THREADS="1 0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("EXECUTE_THREADS holds '0', not a positive integer", r.stderr)


if __name__ == "__main__":
    unittest.main()
