"""MaxText (JAX) Llama2-7B on one DGX H100, from NVIDIA/JAX-Toolbox's MaxText README (2024-05)."""
import json, sys
C = 'db0968810ec4f2207d909f6df89bf0847422b3b3'
gpus, bs, seq, gbs, step, sps = 8, 2, 4096, 16, 0.721, 22.19
assert abs(gbs / step - sps) / sps < 0.002
notes = [
    "Table 'Configs / LLaMA' of rosetta/rosetta/projects/maxtext/README.md (row added by 5a25a146 and unit fixed by db096881, both 2024-05-01): 7B, H100 80G SXM, BF16, Sequence Length 4096, #GPUs 8, BS/GPU 2, DP 1, FSDP 8, TP 1, GBS 16, Attention Flash, Remat Policy minimal_flash, Scan Off, Step Time 0.721 s, Sequences/Sec 22.19.",
    "iteration_time_s = the published step time; tokens_per_s DERIVED = 16 x 4096 / 0.721 = %d (global); check: 16 / 0.721 = %.2f sequences/s (published 22.19)." % (round(gbs * seq / step), gbs / step),
    "Command (scripts/example_slurm.sub @ 5a25a146, container ghcr.io/nvidia/jax:maxtext-2024-04-15; the README names nvcr.io/nvidia/jax:24.04-maxtext-py3): MaxText/train.py base.yml model_name=llama2-7b per_device_batch_size=2 steps=15 scan_layers=false remat_policy=minimal_flash attention=cudnn_flash_te max_target_length=4096 use_iota_embed=true logits_dot_in_fp32=false dataset_type=synthetic hardware=gpu_multiprocess, NVTE_FUSED_ATTN=1, XLA flags with the latency-hiding scheduler and pipelined/async all-gather and reduce-scatter.",
    "Layout: the table's FSDP 8 (MaxText base.yml ici_fsdp_parallelism -1 on one node) -> zero_stage 3 over the 8 GPUs; no gradient accumulation (GBS = 8 x 2).",
    "recompute none: remat_policy minimal_flash is jax.checkpoint_policies.save_from_both_policies(checkpoint_dots_with_no_batch_dims, save_only_these_names('context')) in MaxText's decoder of that time (later renamed minimal_with_context: saves query/key/value/out projections, mlpwi and mlpwo, and the attention context). jax's dot_with_no_batch_dims_saveable saves every dot_general without batch dimensions, i.e. every linear layer's output (jax/_src/ad_checkpoint.py); with the flash context saved, only elementwise ops (RMSNorm, RoPE, SiLU x gate) are recomputed in backward. The plan has no 'recompute elementwise only' setting; none is the nearest (the elementwise recompute is not charged).",
    "attention_kernel cudnn: attention=cudnn_flash_te is Transformer Engine's fused attention with NVTE_FUSED_ATTN=1 (cuDNN) on Hopper.",
    "precision bf16, grad_precision fp32: MaxText's base.yml dtype bfloat16 with weight_dtype float32 (fp32 parameters cast to bf16 in each layer), so the gradients and their reduce-scatter are fp32. Whether XLA all-gathers the fp32 parameters or casts before the gather is not stated (no plan field for the gather's precision; the plan gathers in the compute precision).",
    "Model: MaxText configs/models/llama2-7b.yml: 32 layers, emb 4096, 32 query and 32 KV heads (MHA), MLP 11,008 (SiLU x linear), vocab 32,000, RMSNorm, RoPE, untied logits (logits_via_embedding false), no dropout.",
    "Hardware: 'NVIDIA DGX H100 80G nodes' (README): 8 H100-SXM5-80GB, NVLink4 + NVSwitch; one node, so the network does not enter.",
    "Framework version: MaxText main as built into the 2024-04-15 nightly container (no MaxText commit pinned in the README or script), JAX/XLA of that container.",
]
e = {
    "id": "maxtext2405_h100_llama2_7b_8gpu_fsdp",
    "source": "NVIDIA/JAX-Toolbox @ %s (2024-05-01): rosetta/rosetta/projects/maxtext/README.md 'Configs / LLaMA' table and rosetta/rosetta/projects/maxtext/scripts/example_slurm.sub at the same commit; MaxText's remat policies (MaxText/layers: minimal_flash) and configs/models/llama2-7b.yml as of the 2024-04-15 container" % C[:8],
    "family": {"source": "jax-toolbox-maxtext-readme-2024-05", "framework": "maxtext", "gpu_generation": "H100"},
    "model": {"name": "Llama 2 7B (MaxText llama2-7b)", "params_b": 6.74, "layers": 32, "hidden": 4096, "heads": 32,
              "kv_heads": 32, "ffn_hidden": 11008, "seq_len": seq, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm",
              "position": "rope", "tied_embeddings": False, "bias": False},
    "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": gpus, "gpus_per_node": 8,
                 "interconnect": "one NVIDIA DGX H100: 8x H100 80G SXM, NVLink4 + NVSwitch"},
    "parallel": {"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "vp": 1, "zero_stage": 3, "sequence_parallel": False,
                 "recompute": "none", "micro_batch": bs, "global_batch": gbs},
    "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": step, "tokens_per_s": round(gbs * seq / step),
                 "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
    "precision": "bf16", "grad_precision": "fp32", "attention": "fused", "attention_kernel": "cudnn",
    "confidence": "medium", "notes": notes}
json.dump([e], sys.stdout, indent=1)
print()
