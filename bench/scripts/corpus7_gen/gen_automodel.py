"""NeMo AutoModel (PyTorch FSDP2 backend) pre-training row: Llama 3 70B on 64 H100."""
import json, sys
C = '2013a4dd6e932c4e4f48ca6b4a3fc295cdd64e33'
gpus, gbs, mbs, ga, seq, cp = 64, 128, 1, 4, 8192, 2
dp = gpus // cp
assert dp * mbs * ga == gbs
step, tps_gpu = 18.90, 866.77
derived_tps = gbs * seq / step / gpus
assert abs(derived_tps - tps_gpu) / tps_gpu < 0.001, derived_tps
notes = [
    "Table 'Pre-Training Performance / System: DGX-H100, Precision: BF16', row 'Llama3 70B': #GPUs 64, GBS 128, MBS 1, LBS 1, GA 4, Seq Length 8192, TP 1, PP 1, CP 2, EP -, VP -, FSDP 32, Kernel Optimizations 'TE + fsdp2_prefetch', Time per Global Step 18.90 s, Model TFLOPs/sec/GPU 389, Tokens/sec/GPU 866.77 (added by commit 2013a4dd, 2026-04-10, with the recipe; unchanged at e4581201, 2026-04-17).",
    "iteration_time_s = the published Time per Global Step (18.90 s). tokens_per_s DERIVED = 866.77 x 64 = %d (global); check: 128 x 8192 / 18.90 / 64 = %.2f tokens/s/GPU." % (round(tps_gpu * gpus), derived_tps),
    "Layout (examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml @ 2013a4dd): strategy fsdp2, tp 1, cp 2, pp 1, dp auto = 64 / 2 = 32; step_scheduler global_batch_size 128, local_batch_size 1 -> gradient accumulation 128 / (32 x 1) = 4 (the table's GA); sequence_parallel False. dp x mbs x GA = 32 x 1 x 4 = 128.",
    "FSDP: nemo_automodel/components/distributed/parallelizer.py @ 2013a4dd shards over the (dp_replicate, dp_shard_cp) submesh, i.e. over dp x cp = 64 ranks (the table's 'FSDP 32' is the dp_shard degree) -> zero_stage 3 over dp x cp, the plan's default. MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32, output_dtype fp32) -> grad_precision fp32; reshard after forward for the layers (the root keeps its parameters). defer_fsdp_grad_sync False: gradients reduce-scattered after every micro-batch (FSDP2 default), as the plan's ZeRO-3 does.",
    "recompute full: activation_checkpointing True with enable_compile True wraps each layer's self_attn and mlp in checkpoint_wrapper (NO_REENTRANT) before FSDP sharding; the layer norms and residual adds are not recomputed (no plan field for that granularity; 'full' recomputes them too, elementwise). zero3_recompute_gather kept: the checkpoint wrappers sit inside each layer's FSDP unit (wrapped before fully_shard), so a layer is gathered once for its recompute and backward, as torchtitan's rows read.",
    "enable_compile True (nn.Module.compile of the layers) -> elementwise fused (the default). enable_fsdp2_prefetch (backward prefetch depth 2, forward 1): FSDP2 all-gathers issued ahead (the plan overlaps ZeRO-3 gathers with compute; the depth is not a plan field).",
    "Attention: attn_implementation sdpa (the yaml: 'required for cp>1'), PyTorch context parallel over 2 ranks; attention_kernel left generic: which SDPA backend (FlashAttention-2 or cuDNN) the run's PyTorch picked is not stated. Linear layers are torch nn.Linear in the custom Llama model (nemo_automodel/components/models/llama/model.py @ 2013a4dd); RMSNorm torch_fp32; 'TE' in the table is Transformer Engine's FusedAdam (optimizer _target_) and rope fusion.",
    "cross_entropy unfused: the loss is MaskedCrossEntropy on the model's logits, which the mixed-precision policy returns in fp32 (output_dtype float32); not a fused or chunked loss.",
    "Model: meta-llama/Llama-3.1-70B config (from_pretrained, bf16): 80 layers, hidden 8192, 64 heads, 8 KV heads, FFN 28,672, vocab 128,256, RMSNorm, SwiGLU, RoPE, untied; the mock dataset (vocab_size 100, seq_len 8192) only feeds token ids.",
    "Hardware: 'DGX-H100' (table header): 8 nodes of 8 H100-SXM5-80GB, NVLink4/NVSwitch, 8x 400 Gb/s InfiniBand per node (DGX H100 standard; not stated in the doc, the preset's). Software version not stated beyond the repository commit (NeMo AutoModel main, April 2026).",
    "Not entered from the same table: the MoE rows (DeepSeek V3, Kimi K2: torch.distributed.pipelining AutoPipeline splits with layers_per_stage 2 and 'round_virtual_stages_to_pp_multiple: down', whose chunk-to-layer map the table's VP does not pin down; Qwen3 MoE 30B: the table's GBS 512 disagrees with its config at publication, 89e3a9fd, global_batch_size 256; GPT-OSS: sliding-window attention with sinks, not expressible; Nemotron V3: hybrid Mamba layers, not a model the simulator has) and the LoRA rows.",
]
e = {
    "id": "automodel2604_h100_llama3_70b_64gpu_cp2_fsdp",
    "source": "NVIDIA-NeMo/Automodel @ %s (2026-04-10): docs/performance-summary.md 'Pre-Training Performance' table, row 'Llama3 70B'; recipe examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml and nemo_automodel/components/distributed/parallelizer.py, nemo_automodel/components/models/llama/model.py, nemo_automodel/components/models/common/utils.py at the same commit" % C[:9],
    "family": {"source": "nemo-automodel-perf-summary-2026-04", "framework": "nemo-automodel", "gpu_generation": "H100"},
    "model": {"name": "Llama 3.1 70B", "params_b": 70.55, "layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 28672,
              "seq_len": seq, "vocab": 128256, "kv_heads": 8, "activation": "swiglu", "norm": "rmsnorm", "position": "rope",
              "tied_embeddings": False, "bias": False},
    "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": gpus, "gpus_per_node": 8,
                 "interconnect": "DGX-H100 (table header): NVLink4 + NVSwitch; 8x 400 Gb/s InfiniBand per node (DGX H100 standard, not stated in the doc)"},
    "parallel": {"tp": 1, "pp": 1, "dp": dp, "cp": cp, "vp": 1, "zero_stage": 3, "sequence_parallel": False,
                 "recompute": "full", "micro_batch": mbs, "global_batch": gbs},
    "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": step, "tokens_per_s": round(tps_gpu * gpus),
                 "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
    "precision": "bf16", "grad_precision": "fp32", "attention": "fused", "cross_entropy": "unfused",
    "zero3_recompute_gather": "kept", "confidence": "medium", "notes": notes}
json.dump([e], sys.stdout, indent=1)
print()
