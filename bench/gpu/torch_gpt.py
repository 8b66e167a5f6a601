#!/usr/bin/env python3
"""PyTorch reference for the CUDA executor's throughput benchmark (bench/gpu/run_all.sh).

The same model and training step as trainplan's executor on one GPU: GPT-2 style decoder
(learned positions, pre-LayerNorm blocks, causal multi-head attention, GELU-tanh MLP, biases,
tied LM head, no dropout), vocabulary padded as trainplan pads it, cross-entropy over the
global batch (gradient accumulation over micro-batches), AdamW (lr 1e-3, betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices only), bf16 autocast with float32 master weights and
optimizer state. Written for speed the way PyTorch users do: torch.compile, fused
F.scaled_dot_product_attention (causal), fused AdamW.

  python3 bench/gpu/torch_gpt.py --model models/gpt2-124m.json --micro-batch 8 \
      --global-batch 8 --steps 12 --warmup 4 --model-flops F --out torch.json

--model-flops: model FLOPs per step as trainplan counts them (from the C++ result), so the two
MFUs share one numerator.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def padded_vocab(v, multiple=128):
    # trainplan pads the vocabulary to a multiple of 128 * tp (Megatron-LM's
    # make_vocab_size_divisible_by); tp = 1 here.
    return (v + multiple - 1) // multiple * multiple


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        h, v = m["hidden_size"], padded_vocab(m["vocab_size"])
        self.wte = nn.Embedding(v, h)
        self.wpe = nn.Embedding(m["seq_len"], h)
        self.blocks = nn.ModuleList(
            Block(h, m["num_attention_heads"], m["ffn_hidden_size"]) for _ in range(m["num_layers"]))
        self.lnf = nn.LayerNorm(h, eps=1e-5)
        self.vocab = m["vocab_size"]
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        logits = logits[..., : self.vocab]  # padding never wins (trainplan masks it to -inf)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               reduction="sum")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--model-flops", type=float, default=0.0)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    m = json.load(open(a.model))
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    model = GPT(m).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = model if a.no_compile else torch.compile(model)
    s, mbs, gbs = m["seq_len"], a.micro_batch, a.global_batch
    micro = gbs // mbs
    scale = 1.0 / (gbs * s)
    g = torch.Generator(device=dev).manual_seed(1234)
    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        batch = torch.randint(0, m["vocab_size"], (gbs, s + 1), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        total = 0.0
        for k in range(micro):
            chunk = batch[k * mbs:(k + 1) * mbs]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(chunk[:, :-1], chunk[:, 1:]) * scale
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(total))
        if step >= a.warmup:
            times.append(dt)
        print(f"torch step {step + 1}/{a.steps} loss {losses[-1]:.4f} time {dt * 1e3:.1f} ms",
              flush=True)
    med = statistics.median(times)
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops * 1e12 if a.peak_tflops > 0 else (
        989.4e12 if ("H100" in name or "H200" in name) else 312e12 if "A100" in name else 0.0)
    out = {
        "implementation": "pytorch " + torch.__version__ + (" eager" if a.no_compile else " compile"),
        "device": name,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "",
        "model": m.get("name", a.model),
        "micro_batch": mbs, "global_batch": gbs, "seq_len": s,
        "loss_per_step": losses,
        "median_step_s": med,
        "tokens_per_s": gbs * s / med,
        "mfu": a.model_flops / (med * peak) if peak > 0 and a.model_flops > 0 else 0.0,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "first_loss_expected": math.log(m["vocab_size"]),
    }
    with open(a.out + ".tmp", "w") as f:
        json.dump(out, f, indent=2)
    import os
    os.replace(a.out + ".tmp", a.out)
    print(f"{name}  pytorch  {out['tokens_per_s']:.0f} tokens/s  MFU {out['mfu']:.3f}  "
          f"peak {out['peak_allocated_bytes'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
