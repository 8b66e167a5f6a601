import json
SRC = ("yandex/YaFSDP @ a61a4a6e (2024-06-14, 'Add absolute iteration times to README.md (#4)'; table unchanged at 7dae63a0, 2024-08-19): "
       "README.md 'Benchmarks' table, FSDP iteration time (s) column; FSDP1 and PyTorch version from yandex/YaFSDP issue #3 (antony-frolov, 2024-06-12); "
       "run settings ASSUMED from the repository's own example at the same commit: examples/clm.md, examples/fsdp_config.yaml, patches/transformers.diff, patches/accelerate.diff, docker/Dockerfile")
MODELS = {
 "llama2_7b": dict(name="Llama 2 7B", params_b=6.738, layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000),
 "llama2_13b": dict(name="Llama 2 13B", params_b=13.016, layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824, vocab=32000),
 "llama3_8b": dict(name="Llama 3 8B", params_b=8.03, layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256),
}
# (model key, README model label, gpus, seq, speedup, YaFSDP s, FSDP s)
ROWS = [
 ("llama2_7b", "Llama 2 7B", 64, 2048, "9.92%", 0.81, 0.90),
 ("llama2_7b", "Llama 2 7B", 64, 4096, "3.43%", 1.16, 1.21),
 ("llama2_7b", "Llama 2 7B", 64, 8192, "2.68%", 2.23, 2.29),
 ("llama2_7b", "Llama 2 7B", 128, 2048, "9.57%", 0.87, 0.97),
 ("llama2_7b", "Llama 2 7B", 128, 4096, "2.42%", 1.19, 1.22),
 ("llama2_7b", "Llama 2 7B", 128, 8192, "2.32%", 2.25, 2.31),
 ("llama2_13b", "Llama 2 13B", 128, 2048, "12.10%", 1.55, 1.76),
 ("llama2_13b", "Llama 2 13B", 128, 4096, "3.49%", 2.06, 2.14),
 ("llama3_8b", "Llama 3 8B", 64, 2048, "11.91%", 0.97, 1.10),
 ("llama3_8b", "Llama 3 8B", 64, 4096, "7.86%", 1.36, 1.48),
]
COMMON_NOTES = [
 "Batch: README 'Details: In each run per-device batch size is set to 1.' -> micro_batch 1. global_batch = GPUs x 1 ASSUMED (no gradient accumulation: the README names none; the example's run_clm.py leaves the HF Trainer default gradient_accumulation_steps 1). Arithmetic check, not proof: at 0.90 s for Llama 2 7B seq 2048 on 64 GPUs, (6N + 12 l h s) x 2048 tokens / 0.90 s = 100 TFLOP/s per GPU (32% of 312); two micro-batches per step would need 64%, implausible for ZeRO-3 at this size.",
 "Framework: PyTorch FSDP v1 ('The benchmarks were conducted against FSDP1, we used an early version of PyTorch 2.3.0 (pytorch/pytorch@81ea7a48) of November 2023', yandex/YaFSDP issue #3, antony-frolov, 2024-06-12). sharding FULL_SHARD over all GPUs -> zero_stage 3, no zero_shard_size: examples/fsdp_config.yaml (fsdp_sharding_strategy FULL_SHARD) ASSUMED to be the benchmark's; the README does not name the strategy.",
 "Settings ASSUMED from the repository's example at a61a4a6 (the README does not say the table was produced with it; its docker image is NGC PyTorch 24.02 with transformers v4.39-release and accelerate v0.27.0 patched, not the November 2023 PyTorch of issue #3): patches/transformers.diff makes run_clm.py build FullyShardedDataParallelPlugin(mixed_precision_policy=MixedPrecision(param_dtype=bfloat16, reduce_dtype=float32)) -> precision bf16, grad_precision fp32 (gradients reduce-scattered in fp32); auto-wrap of embed_tokens, each decoder layer and lm_head; config attn_implementation 'flash_attention_2', use_cache False. fsdp_config.yaml: backward_prefetch BACKWARD_PRE, forward_prefetch true (no plan field), use_orig_params false, mixed_precision bf16.",
 "zero3_backward_prefetch before-reduce: FSDP1 BACKWARD_PRE (fsdp_config.yaml), as the corpus's fms-fsdp entries. zero3_copies flat-param: FSDP1's FlatParameter (use_orig_params false), as fms-fsdp. forward_prefetch true (FSDP1 issues the next block's forward all-gather early) has no plan field.",
 "attention_kernel flash2: attn_implementation 'flash_attention_2' in the patched run_clm.py (flash-attn package through transformers' LlamaFlashAttention2) ASSUMED for the benchmark. elementwise eager and cross_entropy unfused: Hugging Face LlamaForCausalLM in eager PyTorch (no torch.compile in the example): LlamaRMSNorm through fp32, rotary by rotate_half, act_fn(gate) * up; the loss on logits cast to fp32 (transformers 4.39's LlamaForCausalLM casts logits.float() before CrossEntropyLoss: from memory of that release, NOT re-read in this pass; check before landing).",
 "Hardware: README 'Performance was measured using a cluster of hosts with A100 80 GB GPUs.' Form factor, GPUs per host and network are not stated. A100-SXM4-80GB in HGX nodes of 8 ASSUMED (Yandex's published clusters Chervonenkis / Galushkin / Lyapunov are 'NVIDIA HGX A100' nodes joined by InfiniBand HDR, per a secondary page, perceptiode.com 'Суперкомпьютеры «Яндекса»'; which cluster ran the table is not stated). NICs left out: the preset's DGX/HGX rails are used. The seq-2048 rows are probably communication-bound under ZeRO-3 (Llama 2 7B: two bf16 all-gathers of 13.5 GB and one fp32 reduce-scatter of 27 GB, about 54 GB of collective volume per GPU per step, against 0.90 s), so the network assumption decides their prediction.",
 "Model: shapes are the public Hugging Face configs of the named models (meta-llama/Llama-2-7b-hf: 32 layers, 4096, 32 heads, ffn 11008, vocab 32000; Llama-2-13b-hf: 40, 5120, 40, 13824, 32000; Meta-Llama-3-8B: 32, 4096, 32 heads / 8 KV, 14336, 128256; untied embeddings, RMSNorm, RoPE, SwiGLU, no bias), the same as the corpus's existing Llama 2 / Llama 3 8B entries; the README names the models only, and examples/clm.md passes --config_name meta-llama/Meta-Llama-3-8B (trained from the config, not the weights).",
 "Metric: 'FSDP iteration time (s)' entered as measured.iteration_time_s as published (two decimals, so +/-0.005 s). How the iteration time was averaged is not stated. Memory not published.",
 "Confidence low: the figure is first-hand and the layout (FSDP1 FULL_SHARD?, batch 1 per GPU, no recompute, GPU count, sequence) is stated, but the training harness, mixed-precision policy, attention kernel and network are read from the repository's example and not stated for the table.",
]
out = []
for mk, label, g, s, sp, ya, fs in ROWS:
    m = dict(MODELS[mk]); m.update(seq_len=s, activation="swiglu", norm="rmsnorm", position="rope", tied_embeddings=False, bias=False, dropout=False)
    m = {k: m[k] for k in ["name","params_b","layers","hidden","heads","kv_heads","ffn_hidden","seq_len","vocab","activation","norm","position","tied_embeddings","bias","dropout"]}
    tps = round(g * s / fs, 1)
    e = {
     "id": f"yafsdp2406_a100_fsdp_{mk}_{g}gpu_seq{s}",
     "source": SRC,
     "family": {"source": "yafsdp-readme-2024-06", "framework": "pytorch-fsdp", "gpu_generation": "A100"},
     "model": m,
     "hardware": {"gpu": "A100-SXM4-80GB", "num_gpus": g, "gpus_per_node": 8,
                  "interconnect": "README: 'a cluster of hosts with A100 80 GB GPUs'; form factor, GPUs per host and network not stated (HGX A100 nodes of 8 with InfiniBand HDR ASSUMED; preset's rails)"},
     "parallel": {"tp": 1, "pp": 1, "dp": g, "cp": 1, "vp": 1, "zero_stage": 3, "sequence_parallel": False,
                  "recompute": "none", "micro_batch": 1, "global_batch": g},
     "measured": {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": fs, "tokens_per_s": tps,
                  "memory_gb": None, "pct_of_peak": None, "aggregate_pflops": None},
     "precision": "bf16",
     "grad_precision": "fp32",
     "attention": "fused",
     "attention_kernel": "flash2",
     "cross_entropy": "unfused",
     "elementwise": "eager",
     "confidence": "low",
     "zero3_backward_prefetch": "before-reduce",
     "zero3_copies": "flat-param",
     "notes": [
       f"README row: | {label} | {g} | {s} | 0 | {sp} | {ya:.2f} | {fs:.2f} | (model | gpu-count | seq-len | num-ckpt-layers | speedup | YaFSDP iteration time (s) | FSDP iteration time (s)). The FSDP column is entered; the YaFSDP figure {ya:.2f} s is kept here (YaFSDP is not a plan setting).",
       f"iteration_time_s = {fs:.2f} s as published. tokens_per_s DERIVED = {g} GPUs x 1 sequence x {s} tokens / {fs:.2f} s = {tps} (global). recompute none: num-ckpt-layers 0.",
     ] + COMMON_NOTES,
    }
    out.append(e)
json.dump(out, open("entries.json", "w"), indent=1, ensure_ascii=False)
print(len(out))
