#!/usr/bin/env python3
"""Appends the FlashAttention training README's GPT3 rows (Dao-AILab/flash-attention
training/README.md, table "more details on the training speed with FlashAttention on 8 x A100
80GB", added in 4a6eaa9f27df) to validation/corpus/published_runs.json.

Every figure below is read from the README or the Hydra configs at that commit (see the notes
written into each entry); nothing is fitted. Run from the repository root; idempotent."""
import json
import sys

PATH = "validation/corpus/published_runs.json"
C = "4a6eaa9f27df6fff7ffb2c24e894938a687dd870"
SRC = ("Dao-AILab/flash-attention @ 4a6eaa9f27df (\"Update configs, add results\", 2022-11-29; "
       "table unchanged through HEAD 0251105a2fb1) training/README.md, section \"Training speed\", "
       "table \"Model | Batch size (tokens) | Through put (tokens/sec) | Hours / 1B tokens\" "
       "(8 x A100 80GB SXM4); run settings from training/configs/experiment/pile/{base,gpt3s-flash,"
       "gpt3m-flash,gpt3l-flash,gpt3xl-flash,gpt3-2.7B-flash-hdim128}.yaml, "
       "configs/model/gpt2.yaml, configs/model/gpt2model/gpt2-{small,medium}.yaml, "
       "configs/optimizer/adamw-{apex,zero}.yaml, flash_attn/models/gpt.py and training/Dockerfile "
       "at the same commit")

# name, config file, layers, hidden, heads, micro batch (A100 80GB branch), global batch,
# README row (batch tokens, tokens/s), zero stage
ROWS = [
    ("GPT3-125M", "gpt3s-flash", 12, 768, 12, 32, 256, "0.5M", 1310000, "1310k", 0.21, 0),
    ("GPT3-355M", "gpt3m-flash", 24, 1024, 16, 32, 256, "0.5M", 503000, "503k", 0.55, 0),
    ("GPT3-760M", "gpt3l-flash", 24, 1536, 16, 16, 256, "0.5M", 245000, "245k", 1.13, 1),
    ("GPT3-1.3B", "gpt3xl-flash", 24, 2048, 16, 8, 512, "1M", 169000, "169k", 1.64, 1),
    ("GPT3-2.7B", "gpt3-2.7B-flash-hdim128", 32, 2560, 20, 4, 512, "1M", 85000, "85k", 3.27, 1),
]
SEQ = 2048
VOCAB = 50264  # 50257 padded to a multiple of 8 (pad_vocab_size_multiple: 8)
GPUS = 8


def params(l, h):
    # GPT-2 block with biases (12h^2 + 13h), tied word embedding, learned positions, final LN.
    return l * (12 * h * h + 13 * h) + VOCAB * h + SEQ * h + 2 * h


def entry(row):
    name, cfg, l, h, heads, mb, gb, btok, tps, tps_txt, hours, zero = row
    n = params(l, h)
    accum = gb // (GPUS * mb)
    step = gb * SEQ / tps
    notes = [
        f"README row: {name}, Batch size (tokens) {btok}, Through put (tokens/sec) {tps_txt}, "
        f"Hours / 1B tokens {hours}; \"We measure the wallclock training speed on one node with 8 x "
        "A100 80GB SXM4 80GB (400W) with NVLink\". tokens_per_s is the README's global figure "
        f"({tps_txt} = {tps}; given to 2-3 significant digits). DERIVED check: 1e9 / {tps} / 3600 = "
        f"{1e9 / tps / 3600:.3f} h per 1B tokens (README {hours}). iteration_time_s DERIVED = "
        f"{gb} x {SEQ} / {tps} = {step:.4f} s.",
        f"Layout ({cfg}.yaml at {C[:12]}): trainer.devices 8, num_nodes 1; "
        f"train.global_batch_size {gb} sequences of datamodule.max_length {SEQ} "
        f"(= the README's {btok} tokens); datamodule.batch_size is chosen by the config from "
        "train.gpu_mem = round(nvidia-smi memory.total MiB / 1000), which an A100-SXM4-80GB "
        "reports as 81920 MiB -> 82 (an nvidia-smi listing of that part: '0MiB / 81920MiB'), "
        f"so the >= 80 branch: micro batch {mb}; accumulate_grad_batches = "
        f"div_up({gb}, 8 x {mb}) = {accum}. dp 8, no TP/PP.",
    ]
    if zero == 0:
        notes.append(
            "Parallelism: trainer.strategy null with 8 devices -> PyTorch Lightning's DDP "
            "(pytorch-lightning==1.7.7, training/Dockerfile); optimizer adamw-apex "
            "(apex.optimizers.FusedAdam, adam_w_mode) unsharded -> zero_stage 0. Whether that "
            "DDP sets gradient_as_bucket_view was not read (memory only; no memory measured).")
    else:
        notes.append(
            "Parallelism: optimizer adamw-zero = torch.distributed.optim.ZeroRedundancyOptimizer "
            "over torch.optim.AdamW under src.utils.ddp_zero1.DDPStrategyZero1 (Lightning "
            "DDPStrategy, find_unused_parameters False, gradient_as_bucket_view True) -> "
            "zero_stage 1 (optimizer states sharded over the 8 ranks). NOT MODELLED: PyTorch DDP "
            "all-reduces the whole gradient (twice a reduce-scatter's bytes) and "
            "ZeroRedundancyOptimizer then broadcasts each rank's updated parameters; the plan's "
            "ZeRO-1 'flat' is one reduce-scatter and one all-gather. On one NVLink node the "
            "difference is one parameter all-gather per step against a step of "
            f"{step:.1f} s.")
    notes += [
        "Precision: trainer.precision bf16 under Lightning 1.7.7 = native torch.autocast with "
        "fp32 parameters, so DDP reduces fp32 gradients -> grad_precision fp32. Container "
        "nvcr.io/nvidia/pytorch:22.11-py3, flash-attn 0.2.2 (FlashAttention-1), transformers "
        "4.24.0 (training/Dockerfile).",
        "Kernels (gpt3s-flash.yaml, inherited by all rows): use_flash_attn -> attention fused "
        "(attention_kernel generic on A100, as for the other A100 entries); fused_dense_gelu_dense "
        "and fused_bias_fc (fused matmul+bias+GELU), fused_dropout_add_ln -> elementwise fused "
        "(default); loss src.losses.cross_entropy_apex.CrossEntropyLossApex with "
        "inplace_backward (base.yaml) -> cross_entropy fused. No activation checkpointing "
        "(README: 'we don't need any activation checkpointing'; mlp_checkpoint_lvl 0 / unset) "
        "-> recompute none.",
        f"Model: flash_attn.models.gpt.GPTLMHeadModel from a transformers GPT2Config "
        f"(configs/model/gpt2.yaml): n_layer {l}, n_embd {h}, n_head {heads} (head dim "
        f"{h // heads}), n_inner None -> 4 x n_embd, GELU (tanh), pre-LayerNorm, biases, "
        "learned positions of n_positions = max_length 2048 (no rotary in the -flash configs), "
        "lm_head tied to the word embedding (tie_weights), vocab 50257 padded to 50264 "
        "(pad_vocab_size_multiple 8). Dropout on: GPT2Config's defaults resid/embd/attn_pdrop "
        f"0.1 are not overridden. params_b DERIVED = {n / 1e9:.4f} (12h^2+13h per layer + "
        "V h + s h + 2h).",
    ]
    if cfg == "gpt3-2.7B-flash-hdim128":
        notes.append("README: 'For the GPT3-2.7B model, we set head dimension to 128 (instead of "
                     "80) for better efficiency' -> the hdim128 config (n_head 20), the one the "
                     "README's 8-GPU command names.")
    return {
        "id": f"flashattn2211_gpt3_{name.split('-')[1].lower().replace('.', 'p')}_8xa100_80g",
        "source": SRC,
        "family": {"source": "flash-attention-training-readme-2022-11",
                   "framework": "flash-attention-lightning",
                   "gpu_generation": "A100"},
        "model": {
            "name": f"{name} (flash-attention training, The Pile)",
            "params_b": round(n / 1e9, 4), "layers": l, "hidden": h, "heads": heads,
            "ffn_hidden": 4 * h, "seq_len": SEQ, "vocab": VOCAB, "activation": "gelu",
            "norm": "layernorm", "position": "learned", "tied_embeddings": True, "bias": True,
            "dropout": True,
        },
        "hardware": {"gpu": "A100-SXM4-80GB", "num_gpus": GPUS, "gpus_per_node": 8,
                     "interconnect": "README: one node, 8 x A100 80GB SXM4 (400W) with NVLink"},
        "parallel": {"tp": 1, "pp": 1, "dp": GPUS, "cp": 1, "vp": 1, "zero_stage": zero,
                     "sequence_parallel": False, "recompute": "none", "micro_batch": mb,
                     "global_batch": gb},
        "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": round(step, 4),
                     "tokens_per_s": tps, "memory_gb": None, "pct_of_peak": None,
                     "aggregate_pflops": None},
        "precision": "bf16",
        "grad_precision": "fp32",
        "attention": "fused",
        "cross_entropy": "fused",
        "confidence": "medium",
        "notes": notes,
    }


def main():
    runs = json.load(open(PATH))
    runs = [r for r in runs if r["family"]["source"] != "flash-attention-training-readme-2022-11"]
    runs += [entry(r) for r in ROWS]
    with open(PATH, "w") as f:
        json.dump(runs, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(len(runs), "runs")


if __name__ == "__main__":
    sys.exit(main())
