#!/usr/bin/env python3
"""Inputs for llm.c's CPU trainer (train_gpt2.c) on issue 28's speed shape, written offline.

llm.c reads two binary files, and this script writes both in its formats, from scratch:

  CHECKPOINT  a random GPT-2 checkpoint. Format as llm.c's train_gpt2.c reads it in
              gpt2_build_from_checkpoint(): 256 int32 of header, [0] = magic 20240326,
              [1] = version 3, [2] = maxT, [3] = V, [4] = L, [5] = NH, [6] = C, [7] = Vp (the
              padded vocabulary), then every parameter as float32, the 16 tensors in the order
              and sizes of fill_in_parameter_sizes(): wte (Vp, C), wpe (maxT, C), ln1w, ln1b
              (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb, ln2w, ln2b
              (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw,
              lnfb (C).
  TOKENS      the corpus as tokens. Format as llm.c's llmc/dataloader.h reads a shard in
              dataloader_load_shard_(): 256 int32 of header, [0] = magic 20240520,
              [1] = version 1, [2] = number of tokens, then the tokens as uint16.

The vocabulary is the executor's: one token per byte (V = Vp = 256), so llm.c trains on the same
corpus bytes as `execute` (its own batch order: contiguous windows, shuffled by its loader).
The weights follow GPT-2's initialisation as llm.c's train_gpt2.py describes it (normal,
std 0.02; the two residual projections 0.02 / sqrt(2 L); LayerNorm weight 1, biases 0): the
values do not change the step time, but a sane start keeps the loss finite for the whole run.

  llmc_inputs.py --layers 4 --hidden 256 --heads 4 --seq-len 128 --corpus data/kjv-genesis.txt \
      --checkpoint OUT.bin --tokens OUT_tokens.bin [--seed 1234]

Used by bench/scripts/executor_cpu_speed.sh (the llm.c row of the CPU speed table).
Tested by tests/bench/speed_report_test.py.
"""
import argparse
import array
import math
import random
import struct
import sys

CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3   # train_gpt2.c, gpt2_build_from_checkpoint
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1           # llmc/dataloader.h, dataloader_load_shard_
HEADER_INTS = 256                                    # both headers
VOCAB = 256                                          # bytes, as the executor's corpus reader
INIT_STD = 0.02                                      # GPT-2 (Radford et al. 2019), llm.c's train_gpt2.py


def header(values):
    """256 little-endian int32, the given values first and zeros after."""
    return struct.pack(f"<{HEADER_INTS}i", *values, *([0] * (HEADER_INTS - len(values))))


def tensor_specs(L, C, maxT, Vp):
    """(name, element count, init) in fill_in_parameter_sizes() order."""
    residual_std = INIT_STD / math.sqrt(2 * L)
    return [("wte", Vp * C, INIT_STD), ("wpe", maxT * C, INIT_STD),
            ("ln1w", L * C, "one"), ("ln1b", L * C, "zero"),
            ("qkvw", L * 3 * C * C, INIT_STD), ("qkvb", L * 3 * C, "zero"),
            ("attprojw", L * C * C, residual_std), ("attprojb", L * C, "zero"),
            ("ln2w", L * C, "one"), ("ln2b", L * C, "zero"),
            ("fcw", L * 4 * C * C, INIT_STD), ("fcb", L * 4 * C, "zero"),
            ("fcprojw", L * C * 4 * C, residual_std), ("fcprojb", L * C, "zero"),
            ("lnfw", C, "one"), ("lnfb", C, "zero")]


def tensor_values(count, init, rng):
    """One tensor's float32 values (array 'f' is the machine's float, 4 bytes here)."""
    if init == "one":
        return array.array("f", [1.0]) * count
    if init == "zero":
        return array.array("f", [0.0]) * count
    return array.array("f", (rng.gauss(0.0, init) for _ in range(count)))


def write_checkpoint(path, L, NH, C, maxT, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(header([CHECKPOINT_MAGIC, CHECKPOINT_VERSION, maxT, VOCAB, L, NH, C, VOCAB]))
        for _, count, init in tensor_specs(L, C, maxT, VOCAB):
            values = tensor_values(count, init, rng)
            if sys.byteorder != "little":
                values.byteswap()
            values.tofile(f)


def write_tokens(path, corpus_path):
    data = open(corpus_path, "rb").read()
    if len(data) < 2:
        raise SystemExit(f"llmc_inputs: --corpus {corpus_path} holds {len(data)} bytes, needs 2+")
    tokens = array.array("H", iter(data))  # from bytes, array() would reinterpret byte pairs
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(header([TOKENS_MAGIC, TOKENS_VERSION, len(tokens)]))
        tokens.tofile(f)


def positive(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got '{text}'")
        return value
    return parse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=positive("--layers"), required=True)
    p.add_argument("--hidden", type=positive("--hidden"), required=True)
    p.add_argument("--heads", type=positive("--heads"), required=True)
    p.add_argument("--seq-len", type=positive("--seq-len"), required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    write_checkpoint(a.checkpoint, a.layers, a.heads, a.hidden, a.seq_len, a.seed)
    write_tokens(a.tokens, a.corpus)


if __name__ == "__main__":
    main()
