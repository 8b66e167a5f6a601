#!/usr/bin/env python3
"""Append the Lambda Labs FlashAttention-2 benchmark rows (LambdaLabsML/examples
flash-attention-2/README.md) to validation/corpus/published_runs.json. Idempotent: drops the
family's ids first. Every figure is read from the README table (cited in each entry) or derived
with the arithmetic written in the entry's notes."""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "..", "..", "..", "validation", "corpus", "published_runs.json")
SRC_ID = "lambdalabs-flash-attention-2-2023-07"

H, L, V, S = 2560, 32, 50264, 1024
PARAMS = L * (12 * H * H + 13 * H) + V * H + S * H + 2 * H  # 2,648,949,760
FLOP_PER_TOKEN = 6 * PARAMS + 12 * L * H * S               # FA2 paper's convention
MBS, GBS = 4, 512

SOURCE = ("LambdaLabsML/examples flash-attention-2/README.md: table 'Configurations | Iter/Sec | "
          "Tokens/Sec | BS_per_GPU | Memory_per_GPU (GB) | ...' first published @ 1884943455 "
          "(2023-07-21, lines 40-45), figures unchanged through 9dc2e06bab (2023-08-16, lines 67-72; "
          "the last commit touching the file, HEAD 43462329e0); run settings from the fork the README "
          "builds, LambdaLabsML/flash-attention @ 82dce51643 (2023-07-21, merge of the benchmark "
          "configs; HEAD 5bc271526b only adds gpt3-2.7B-flash-hdim128.yaml): training/configs/"
          "experiment/owt/{base,gpt3s-flash,gpt3xl-flash,gpt3-2.7B-flash}.yaml, configs/model/gpt2.yaml, "
          "configs/optimizer/adamw-zero.yaml, configs/datamodule/openwebtext.yaml, training/Dockerfile")

ROWS = [
    # gpu label, gen, preset string, n gpus, iter/s, tokens/s published, memory published
    ("8xA100 80GB SXM4", "A100", "A100-SXM4-80GB", 8, 2.5, 81920, 56),
    ("A100 80GB SXM4", "A100", "A100-SXM4-80GB", 1, 2.6, 10649.6, 73),
    ("8xH100 80GB SXM5", "H100", "H100-SXM5-80GB", 8, 5.34, 174981.12, 56),
    ("H100 80GB SXM5", "H100", "H100-SXM5-80GB", 1, 5.44, 22282.24, 73),
]


def entry(label, gen, gpu, n, ips, tps, mem):
    ga = -(-GBS // (n * MBS))
    step = ga / ips
    tok_check = ips * S * MBS * n
    tflops = tps / n * FLOP_PER_TOKEN / 1e12
    gid = gen.lower()
    rid = f"lambdafa2_{gid}_gpt3_2p7b_{n}x{gid}_80g"
    notes = [
        f"README row '{label}': Iter/Sec {ips}, Tokens/Sec {tps}, BS_per_GPU 4, Memory_per_GPU (GB) {mem}. "
        "The README (9dc2e06bab line 56) says Tokens/Sec 'is calculated as Iter/Sec x max_length x batch_size'; "
        f"check: {ips} x 1024 x 4 x {n} GPU(s) = {tok_check:g} (the table's figure, so Iter/Sec counts Lightning's "
        "per-GPU micro-batch iterations, and Tokens/Sec is the whole job's). Iter/Sec is given to 2-3 significant digits.",
        f"DERIVED: accumulate_grad_batches = div_up(global_batch_size 512, devices {n} x batch_size 4 x num_nodes 1) = {ga} "
        f"(owt/base.yaml); iteration_time_s = {ga} / {ips} = {step:.4f} s per optimizer step. tokens_per_s = the published "
        f"Tokens/Sec (global; = 512 x 1024 / {step:.4f}).",
        "Layout: the README's command runs experiment=owt/gpt3-2.7B-flash with trainer.devices=8 ('Change trainer.devices "
        "accordingly to match the number of GPUs'); the 1-GPU rows are INFERRED to be the same config with trainer.devices=1. "
        "datamodule.batch_size 4 (gpt3-2.7B-flash.yaml, fixed since 6206fa7c9a; the table's BS_per_GPU 4), "
        "datamodule.max_length 1024 (owt/base.yaml and datamodule/openwebtext.yaml), train.global_batch_size 512 "
        "(gpt3xl-flash.yaml). One node; no TP/PP.",
        "Parallelism: gpt3xl-flash.yaml (inherited) sets optimizer adamw-zero = torch.distributed.optim."
        "ZeroRedundancyOptimizer over torch.optim.AdamW under src.utils.ddp_zero1.DDPStrategyZero1 "
        "(find_unused_parameters False, gradient_as_bucket_view True) -> zero_stage 1. NOT MODELLED: DDP all-reduces the "
        "whole gradient and ZeroRedundancyOptimizer broadcasts the updated shards, where the plan's ZeRO-1 is one "
        "reduce-scatter and one all-gather (as in the flash-attention-training-readme-2022-11 family). On the 1-GPU rows "
        "the same strategy runs with a world of one (nothing sharded).",
        "Precision: owt/base.yaml trainer.precision 16 (NOT bf16 as in the repository's pile configs) under "
        "pytorch-lightning==1.8.6 (training/Dockerfile) = native AMP: torch.autocast fp16 over fp32 parameters with a "
        "GradScaler -> precision fp16, grad_precision fp32. NOT MODELLED: the GradScaler's unscale / inf check over the "
        "gradients each step.",
        "Kernels: gpt3s-flash.yaml (inherited): use_flash_attn, fused_dropout_add_ln, fused_mlp, fused_bias_fc, "
        "residual_in_fp32 (not modelled), pad_vocab_size_multiple 8 -> attention fused, elementwise fused (default); loss "
        "flash_attn.losses.cross_entropy.CrossEntropyLoss with inplace_backward (owt/base.yaml) -> cross_entropy fused. "
        "flash-attn==2.0.0.post1 from pip (training/Dockerfile; the fork's 30fd8c17d8 only unpinned the csrc extensions' "
        "clone) -> attention_kernel flash2. Container nvcr.io/nvidia/pytorch:22.12-py3 (CUDA 11.8) on both GPUs: "
        "FlashAttention-2's sm80 kernels, no Hopper-specific path. mlp_checkpoint_lvl 0 -> recompute none.",
        "Model: flash_attn.models.gpt.GPTLMHeadModel from a transformers GPT2Config (configs/model/gpt2.yaml, "
        "transformers==4.25.1): n_layer 32, n_embd 2560, n_head 32 (gpt3-2.7B-flash.yaml; head dim 80, which the "
        "README states: 'we set headdim to 80'), n_inner None -> 4 x n_embd, tanh GELU, pre-LayerNorm, biases, learned "
        "positions of n_positions = max_length 1024, lm_head tied, vocab 50257 padded to 50264, dropout 0.1 "
        f"(GPT2Config defaults, not overridden). params_b DERIVED = {PARAMS} (12h^2+13h per layer + V h + s h + 2h).",
        f"Check (DERIVED, notes only): by the FlashAttention-2 paper's count (6 x params + 12 x layers x hidden x seq per "
        f"token = {FLOP_PER_TOKEN/1e9:.4f} GFLOP) the row is {tps/n:g} tokens/s/GPU x that = {tflops:.1f} TFLOP/s per GPU.",
        f"memory_gb left null: Memory_per_GPU (GB) {mem} is published but how it was read is not stated, and the configs "
        "log no memory (callbacks default + norm-monitor: no memory monitor); most likely a device-level reading "
        "(nvidia-smi: allocator cache and CUDA context included), not a peak of allocated memory. Kept here only.",
        "Hardware: the README names the part (A100 80GB SXM4 / H100 80GB SXM5) on Lambda Cloud; the 8-GPU rows are "
        "INFERRED to run on one 8-GPU SXM node with NVLink/NVSwitch (SXM parts come on HGX boards); the interconnect "
        "is not stated.",
    ]
    return {
        "id": rid,
        "source": SOURCE + f"; row '{label}'",
        "family": {"source": SRC_ID, "framework": "flash-attention-lightning", "gpu_generation": gen},
        "model": {
            "name": "GPT3-2.7B 1k, head dim 80 (Lambda Labs' FlashAttention-2 benchmark, OpenWebText)",
            "params_b": round(PARAMS / 1e9, 4),
            "layers": L, "hidden": H, "heads": 32, "ffn_hidden": 4 * H, "seq_len": S, "vocab": V,
            "activation": "gelu", "norm": "layernorm", "position": "learned",
            "tied_embeddings": True, "bias": True, "dropout": True,
        },
        "hardware": {
            "gpu": gpu, "num_gpus": n, "gpus_per_node": 8,
            "interconnect": ("README: '" + label + "' on Lambda Cloud; one node, NVLink INFERRED (not stated)")
            if n > 1 else ("README: '" + label + "' on Lambda Cloud; one GPU"),
        },
        "parallel": {
            "tp": 1, "pp": 1, "dp": n, "cp": 1, "vp": 1, "zero_stage": 1, "sequence_parallel": False,
            "recompute": "none", "micro_batch": MBS, "global_batch": GBS,
        },
        "measured": {
            "tflops_per_gpu": None, "mfu": None, "iteration_time_s": round(step, 4), "tokens_per_s": tps,
            "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None,
        },
        "precision": "fp16",
        "grad_precision": "fp32",
        "attention": "fused",
        "attention_kernel": "flash2",
        "cross_entropy": "fused",
        "confidence": "medium",
        "notes": notes,
    }


def main():
    with open(PATH) as f:
        runs = json.load(f)
    runs = [r for r in runs if r.get("family", {}).get("source") != SRC_ID]
    runs += [entry(*row) for row in ROWS]
    with open(PATH, "w") as f:
        f.write(json.dumps(runs, indent=1) + "\n")
    print(len(runs), "entries")


if __name__ == "__main__":
    main()
