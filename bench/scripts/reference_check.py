#!/usr/bin/env python3
"""The executor against an independent PyTorch GPT, in the manner of llm.c's test_gpt2.c.

`execute --dump-reference PREFIX` writes the executor's initial weights (PREFIX.init.tpt) and
its first step (PREFIX.step1.tpt: the batch, the logits, every gradient), in the format of
executor/tensor_file.h. This script loads the same weights into a PyTorch GPT written here from
the model's equations (pre-norm LayerNorm, tanh GELU, learned positions, causal softmax
attention, tied or separate head; for a mixture-of-experts model, the MoE layer of
executor/cpu/moe.h: see Gpt.moe), rebuilds the executor's batches from the corpus with the
same splitmix64 order (executor/data.cc), and checks:

  1. step 1: the batch, the logits, the loss and every gradient, within the fp32 tolerances
     below;
  2. the loss curve: N steps of torch.optim.AdamW with the executor's settings, against the
     `loss` list of execute's report (--executor-report), within --curve-tolerance per step.

Exit status 0 when every check holds, 1 otherwise, 77 (CTest's skip) when torch is missing.
Run by bench/scripts/reference_check.sh (which builds the inputs) and by the test
executor_reference_check (tests/executor/CMakeLists.txt, a reduced shape).
"""
import argparse
import json
import math
import statistics
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # CTest reads 77 as "skipped"
    print(f"reference_check: skipped, PyTorch is not installed ({e}); "
          "apt-get install python3-torch", file=sys.stderr)
    sys.exit(77)

# fp32 tolerances, chosen from the observed differences on the reference shapes (they are
# summation-order effects, ~1e-6 relative) with an order of magnitude of margin, as llm.c
# does per tensor: a real defect (a wrong scale, a missing term) is off by far more.
LOGITS_ATOL = 1e-4         # logits are O(1)
LOSS_ATOL = 1e-5           # mean token loss, O(1)
GRAD_RTOL = 1e-3           # max |executor - torch| / max |torch|, per gradient tensor
# The key bias's gradient is zero in exact arithmetic (a constant added to every score of a
# query leaves its softmax unchanged), so both sides hold rounding noise there. A tensor's
# scale is therefore at least this fraction of the largest gradient of the model.
GRAD_FLOOR = 1e-3

MASK64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64's finaliser (Steele et al. 2014), as executor/data.cc's mix()."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def corpus_batch(corpus, seed, step, sequences, seq_len):
    """executor/data.cc corpus_batch: windows of seq_len + 1 bytes at splitmix64 offsets."""
    window = seq_len + 1
    starts = len(corpus) - window + 1
    base = splitmix64(seed ^ 0x5EED5EED5EED)
    rows = []
    for j in range(sequences):
        draw = splitmix64((base + splitmix64((step * 1000003 + j) & MASK64)) & MASK64)
        start = draw % starts
        rows.append(np.frombuffer(corpus[start:start + window], dtype=np.uint8))
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def read_tensors(path):
    """executor/tensor_file.h: magic, header length, JSON header, float32 data."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != b"TPTENS01":
        raise SystemExit(f"reference_check: {path} is not a trainplan tensor file")
    (n,) = struct.unpack("<Q", blob[8:16])
    header = json.loads(blob[16:16 + n])
    data = np.frombuffer(blob, dtype="<f4", offset=16 + n)
    tensors = {}
    for t in header["tensors"]:
        count = math.prod(t["shape"])
        tensors[t["name"]] = torch.from_numpy(
            data[t["offset"]:t["offset"] + count].reshape(t["shape"]).copy())
    return header["meta"], tensors


class Gpt:
    """The executor's GPT from its equations, parameters as (in, out) matrices like the dump."""

    def __init__(self, meta, weights):
        self.meta = meta
        self.params = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
        self.moe_layers = sum(1 for name in weights if name.endswith(".router"))
        self.route_margin = math.inf
        self.aux = []

    def logits(self, tokens):
        m, p = self.meta, self.params
        b, s = tokens.shape
        heads, h = m["num_heads"], m["hidden_size"]
        hd = h // heads
        x = p["wte"][tokens] + p["wpe"][:s]
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        for layer in range(m["num_layers"]):
            w = lambda name: p[f"h{layer}.{name}"]
            y = F.layer_norm(x, (h,), w("ln1.g"), w("ln1.b"), eps=1e-5)
            q, k, v = (y @ w("w" + c) + w("b" + c) for c in "qkv")
            q, k, v = (t.view(b, s, heads, hd).transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            att = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
            x = x + att.transpose(1, 2).reshape(b, s, h) @ w("wo") + w("bo")
            y = F.layer_norm(x, (h,), w("ln2.g"), w("ln2.b"), eps=1e-5)
            if f"h{layer}.router" in p:
                x = x + self.moe(f"h{layer}.", y)
            else:
                x = x + self.mlp(f"h{layer}.", y)
        x = F.layer_norm(x, (h,), p["lnf.g"], p["lnf.b"], eps=1e-5)
        head = p["wte"] if m["tie_word_embeddings"] else p["lm_head"]
        return (x @ head.T).reshape(b * s, -1)

    def mlp(self, prefix, y):
        w = lambda name: self.params[prefix + name]
        return F.gelu(y @ w("w1") + w("b1"), approximate="tanh") @ w("w2") + w("b2")

    def moe(self, prefix, y):
        """An MoE layer's MLP from executor/cpu/moe.h's equations, written independently of it.

        Router: probabilities P = softmax(y Wr) over the E experts (Wr: h x E, no bias); each
        token goes to its k most probable experts and its output is the sum of their outputs
        weighted by their probabilities, not renormalised (GShard, Lepikhin et al. 2020, sec.
        2.2; Switch Transformer, Fedus et al. 2022, eq. 2 for k = 1). Dropless: no capacity.
        Shared experts (hL.shared.*) add a dense MLP on every token. The load-balancing loss
        (Switch, eqs. 4-6) of each micro-batch of T tokens is coeff * E * sum_i f_i P_i, f_i the
        fraction of the T*k assignments that chose expert i (a count: no gradient) and P_i the
        mean probability of expert i; each micro-batch's term is weighted by 1 / micro-batches,
        and the terms are collected in self.aux for the objective.
        """
        m, p = self.meta, self.params
        b, s, h = y.shape
        k = m["experts_per_token"]
        x = y.reshape(b * s, h)
        probs = (x @ p[prefix + "router"]).softmax(-1)  # (N, E)
        E = probs.shape[1]
        gates, chosen = probs.topk(k, dim=-1)  # (N, k) each, most probable first
        out = torch.zeros_like(x)
        for e in range(E):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                out = out.index_add(0, token, gates[token, slot, None] *
                                    self.mlp(f"{prefix}e{e}.", x[token]))
        if prefix + "shared.w1" in p:
            out = out + self.mlp(prefix + "shared.", x)
        # Each micro-batch's load-balancing loss, from its own tokens.
        micro_batches = b // m["micro_batch_size"]
        tokens = m["micro_batch_size"] * s
        counts = F.one_hot(chosen, E).sum(1).reshape(micro_batches, tokens, E).sum(1)
        f = counts.to(probs.dtype) / (tokens * k)  # (M, E)
        mean_probs = probs.reshape(micro_batches, tokens, E).mean(1)  # (M, E)
        self.aux.append(m["router_aux_loss_coef"] / micro_batches * E *
                        (f * mean_probs).sum())
        # The smallest gap between a token's k-th and (k+1)-th probabilities: below ~1e-6 the
        # two implementations' rounding may route that token differently.
        if k < E:
            top = probs.detach().topk(k + 1, dim=-1).values
            self.route_margin = min(self.route_margin, (top[:, k - 1] - top[:, k]).min().item())
        return out.reshape(b, s, h)

    def loss(self, batch):
        """The logits, the language-model loss (what execute reports) and the objective that
        is differentiated (the loss plus the MoE layers' load-balancing losses)."""
        self.aux = []
        logits = self.logits(batch[:, :-1])
        vocab = self.meta["vocab_size"]  # padding rows of the table are not classes
        lm = F.cross_entropy(logits[:, :vocab], batch[:, 1:].reshape(-1))
        return logits, lm, lm + sum(self.aux)


def decayed(name):
    """The executor decays matrices (params.cc: wte, wpe, lm_head, wq/wk/wv/wo, w1, w2 of every
    MLP, shared and routed experts included, and the router)."""
    return name in ("wte", "wpe", "lm_head") or name.split(".")[-1] in (
        "wq", "wk", "wv", "wo", "w1", "w2", "router")


def check_first_step(model, step1, corpus, seed):
    meta = model.meta
    ok = True
    batch = corpus_batch(corpus, seed, 0, meta["global_batch_size"], meta["seq_len"])
    same_batch = torch.equal(batch, step1["tokens"].long())
    print(f"batch of step 1: {'identical' if same_batch else 'DIFFERENT'} "
          f"({batch.shape[0]} sequences of {batch.shape[1]} tokens)")
    ok &= same_batch
    logits, loss, objective = model.loss(batch)
    objective.backward()
    if model.moe_layers:
        print(f"MoE: {model.moe_layers} layers, top-{meta['experts_per_token']}, load-balancing "
              f"loss {objective.item() - loss.item():.6e} (coefficient "
              f"{meta['router_aux_loss_coef']:g}); smallest top-k probability gap "
              f"{model.route_margin:.2e}")
    vocab = meta["vocab_size"]
    d_logits = (logits[:, :vocab].detach() - step1["logits"][:, :vocab]).abs().max().item()
    d_loss = abs(loss.item() - meta["loss"])
    print(f"logits: max |diff| {d_logits:.3e} (tolerance {LOGITS_ATOL:g})")
    print(f"loss: executor {meta['loss']:.6f}, torch {loss.item():.6f}, |diff| {d_loss:.3e} "
          f"(tolerance {LOSS_ATOL:g})")
    ok &= d_logits <= LOGITS_ATOL and d_loss <= LOSS_ATOL
    worst = 0.0
    largest = max(p.grad.abs().max().item() for p in model.params.values())
    for name, p in model.params.items():
        ours = step1["grad." + name]
        scale = max(p.grad.abs().max().item(), GRAD_FLOOR * largest)
        rel = (ours - p.grad).abs().max().item() / scale
        worst = max(worst, rel)
        if rel > GRAD_RTOL:
            print(f"  gradient {name}: max |diff| / max |torch| = {rel:.3e} > {GRAD_RTOL:g}")
            ok = False
    print(f"gradients: {len(model.params)} tensors, worst max |diff| / max |torch| = {worst:.3e} "
          f"(tolerance {GRAD_RTOL:g})")
    return ok


def loss_curve(model, corpus, seed, steps, lr):
    params = model.params
    groups = [{"params": [p for n, p in params.items() if decayed(n)], "weight_decay": 0.1},
              {"params": [p for n, p in params.items() if not decayed(n)], "weight_decay": 0.0}]
    # executor/params.h AdamW defaults: betas (0.9, 0.95), eps 1e-8, decoupled decay 0.1.
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)
    # execute --lr-warmup W: step k (from 1) uses lr * min(1, k / W).
    warmup = model.meta.get("lr_warmup", 0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
    losses, seconds = [], []
    for step in range(steps):
        batch = corpus_batch(corpus, seed, step, model.meta["global_batch_size"],
                             model.meta["seq_len"])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss, objective = model.loss(batch)
        objective.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
    return losses, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", required=True, help="execute --dump-reference PREFIX")
    ap.add_argument("--data", required=True, help="the corpus execute trained on")
    ap.add_argument("--executor-report", help="execute --out report (its loss curve)")
    ap.add_argument("--curve-tolerance", type=float, default=0.02,
                    help="largest |loss difference| allowed at any step")
    ap.add_argument("--curve-json", help="write both loss curves here")
    ap.add_argument("--time-steps", type=int, default=0,
                    help="only time this many training steps on one thread (the first two are "
                         "warm-up) and print {\"tokens_per_s\": median} as JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    meta, weights = read_tensors(args.prefix + ".init.tpt")
    if args.time_steps:
        with open(args.data, "rb") as f:
            corpus = f.read()
        meta["lr"] = meta.get("lr", 1e-3)
        _, seconds = loss_curve(Gpt(meta, weights), corpus, meta["seed"], args.time_steps,
                                meta["lr"])
        tokens = meta["global_batch_size"] * meta["seq_len"]
        print(json.dumps({"tokens_per_s": tokens / statistics.median(seconds[2:]),
                          "torch": torch.__version__, "threads": torch.get_num_threads()}))
        return 0
    step_meta, step1 = read_tensors(args.prefix + ".step1.tpt")
    with open(args.data, "rb") as f:
        corpus = f.read()
    seed = meta["seed"]
    meta["loss"] = step_meta["loss"]
    ok = check_first_step(Gpt(meta, weights), step1, corpus, seed)
    if args.executor_report:
        with open(args.executor_report) as f:
            ours = json.load(f)["loss"]
        theirs, _ = loss_curve(Gpt(meta, weights), corpus, seed, len(ours), meta["lr"])
        diffs = [abs(a - b) for a, b in zip(ours, theirs)]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        print(f"loss curve over {len(ours)} steps: max |diff| {diffs[worst]:.4f} at step "
              f"{worst + 1} (executor {ours[worst]:.4f}, torch {theirs[worst]:.4f}; "
              f"tolerance {args.curve_tolerance:g}); last step executor {ours[-1]:.4f}, "
              f"torch {theirs[-1]:.4f}")
        ok &= diffs[worst] <= args.curve_tolerance
        if args.curve_json:
            with open(args.curve_json, "w") as f:
                json.dump({"seed": seed, "executor": ours, "torch": theirs}, f)
    print("reference_check: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
