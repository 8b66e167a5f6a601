#!/usr/bin/env python3
"""llm.c's train_gpt2.c with its hardcoded run settings made into build and environment settings.

  llmc_patch.py SRC/train_gpt2.c OUT/train_gpt2.c

train_gpt2.c's main() fixes the checkpoint path, the token files, B = 4, T = 64, 41 steps, a
validation pass every 10 steps and text sampling every 20. For the speed table (bench/scripts/
executor_cpu_speed.sh) the copy reads the checkpoint from $LLMC_CHECKPOINT and the tokens from
$LLMC_TOKENS, takes B, T and the step count from -DLLMC_B, -DLLMC_T, -DLLMC_STEPS, and runs
neither validation nor sampling, so that only training steps run. Nothing else changes: the
timed region (forward, zero_grad, backward, update, with llm.c's own clock) is llm.c's.
Each pattern must match exactly once; a changed upstream stops here, naming the pattern, rather
than timing something else. The copy lives in a temporary folder; nothing of llm.c is kept.
Tested by tests/bench/speed_report_test.py.
"""
import re
import sys

EDITS = [  # (a regular expression on llm.c's main(), its replacement)
    (r'gpt2_build_from_checkpoint\(&model, "gpt2_124M\.bin"\);',
     'gpt2_build_from_checkpoint(&model, getenv("LLMC_CHECKPOINT"));'),
    (r'const char\* train_tokens = [^;]*;', 'const char* train_tokens = getenv("LLMC_TOKENS");'),
    (r'const char\* val_tokens = [^;]*;', 'const char* val_tokens = getenv("LLMC_TOKENS");'),
    (r'int B = 4;', 'int B = LLMC_B;'),
    (r'int T = 64;', 'int T = LLMC_T;'),
    (r'for \(int step = 0; step <= 40; step\+\+\)', 'for (int step = 0; step < LLMC_STEPS; step++)'),
    (r'if \(step % 10 == 0\) \{', 'if (0) { /* validation off */'),
    (r'if \(step > 0 && step % 20 == 0\) \{', 'if (0) { /* sampling off */'),
]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: llmc_patch.py SRC/train_gpt2.c OUT/train_gpt2.c")
    text = open(sys.argv[1]).read()
    for pattern, replacement in EDITS:
        text, count = re.subn(pattern, lambda _m, r=replacement: r, text)
        if count != 1:
            sys.exit(f"llmc_patch: {sys.argv[1]} matches /{pattern}/ {count} times, expected once "
                     "(a different llm.c version?)")
    open(sys.argv[2], "w").write(text)


if __name__ == "__main__":
    main()
