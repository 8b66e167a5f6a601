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
     For an MoE model the executor's routing of every step (PREFIX.routing.tpt) is compared
     with the reference's, and replayed where a token sits within rounding of a tie
     (ROUTE_TIE_ATOL, Routing; --routing free|both to see the curves without it).

Exit status 0 when every check holds, 1 otherwise, 77 (CTest's skip) when torch is missing.
Run by bench/scripts/reference_check.sh (which builds the inputs) and by the test
executor_reference_check (tests/executor/CMakeLists.txt, a reduced shape).
"""
import argparse
import json
import math
import os
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
# Routing at a near-tie (an MoE model's loss curve). Top-k is discontinuous: where a token's
# k-th and (k+1)-th router probabilities are within rounding of each other, the two
# implementations may pick different experts, after which they train different models
# (bench/results/executor-reference-moe-2026-11-25/: seed 1234 first differs at step 4 on a
# token whose gap is 2.6e-6 on the executor's side and 8.5e-7 on PyTorch's, the curves agree
# within 1.1e-5 until then and part by 0.31 after). So the curve check replays the executor's
# routing (execute --dump-reference's PREFIX.routing.tpt) where its choice is within rounding
# of a tie in the reference's own probabilities: the k-th best of them less the weakest of the
# executor's experts is at most twice the two sides' difference on that token's
# probabilities, plus ROUTE_TIE_ATOL. That holds whenever the executor's experts are the top k
# of its own probabilities, ties to the lower index, so a choice beyond it (a FAIL) is a defect
# of the executor's top-k or tie rule, or of the dump. The two sides' router probabilities are
# reported per step: with the routing replayed they stay within 1e-5 for 20 steps and then
# drift apart as the dense curves do (the study's NOTES).
ROUTE_TIE_ATOL = 1e-6

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
        self.routing = None  # a Routing: compare with (and replay) the executor's decisions
        self.idle_experts = 0  # (layer, step) pairs in which an expert got no token
        self.dropped = 0  # assignments dropped over an expert's capacity
        self.drop_margin = math.inf

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
        2.2; Switch Transformer, Fedus et al. 2022, eq. 2 for k = 1). Dropless, unless the dump's
        meta has moe_capacity_factor: then each expert takes at most C = ceil(T*k / E * factor)
        of a micro-batch's T*k assignments (Megatron-Core's get_capacity as
        apply_router_token_dropping calls it) and keeps those of the highest probability, ties to
        the earlier token (its drop policy "probs"); a dropped assignment adds nothing to its
        token's output. The load-balancing loss counts the assignments before dropping.
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
        chosen = probs.topk(k, dim=-1).indices  # (N, k), most probable first
        if self.routing is not None:
            chosen = self.routing.route(probs.detach(), chosen)
        gates = probs.gather(1, chosen)  # (N, k)
        keep = self.capacity_mask(chosen, gates.detach(), E)
        out = torch.zeros_like(x)
        for e in range(E):
            # An expert that no token chose still takes part (its gradient is zero, not
            # absent), so that AdamW steps it as the executor and Megatron-Core do (their
            # gradient buffers are zeroed and stepped whole); torch.optim skips a parameter
            # whose .grad is None.
            token, slot = ((chosen == e) & keep).nonzero(as_tuple=True)
            self.idle_experts += token.numel() == 0
            if token.numel() == 0 and self.meta.get("skip_idle_experts"):
                continue
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

    def capacity_mask(self, chosen, gates, E):
        """Which of the (N, k) assignments their experts keep: all of them without a capacity
        factor; with one, per micro-batch and expert the C of the highest gate (ties to the
        earlier assignment, token-major), the smallest gap across a capacity's edge kept in
        self.drop_margin (below ~1e-6 rounding may drop a different token)."""
        keep = torch.ones_like(chosen, dtype=torch.bool)
        factor = self.meta.get("moe_capacity_factor")
        if factor is None:
            return keep
        k = chosen.shape[1]
        T = self.meta["micro_batch_size"] * self.meta["seq_len"]
        C = math.ceil(T * k / E * factor)
        if C >= T:
            return keep
        for mb in range(chosen.shape[0] // T):
            rows = slice(mb * T, (mb + 1) * T)
            for e in range(E):
                token, slot = (chosen[rows] == e).nonzero(as_tuple=True)
                if token.numel() <= C:
                    continue
                pairs = sorted(zip((-gates[rows][token, slot]).tolist(),
                                   (token * k + slot).tolist()))
                edge = -pairs[C - 1][0] - (-pairs[C][0])
                self.drop_margin = min(self.drop_margin, edge)
                for _, pair in pairs[C:]:
                    keep[mb * T + pair // k, pair % k] = False
                    self.dropped += 1
        return keep

    def loss(self, batch):
        """The logits, the language-model loss (what execute reports) and the objective that
        is differentiated (the loss plus the MoE layers' load-balancing losses)."""
        self.aux = []
        logits = self.logits(batch[:, :-1])
        vocab = self.meta["vocab_size"]  # padding rows of the table are not classes
        lm = F.cross_entropy(logits[:, :vocab], batch[:, 1:].reshape(-1))
        return logits, lm, lm + sum(self.aux)


class Routing:
    """The executor's routing, step by step (execute --dump-reference's PREFIX.routing.tpt:
    probs (steps, micro-batches, MoE layers, tokens, E) and experts (..., k)), against the
    reference's own decisions on the same step. Gpt.moe calls route() once per MoE layer.

    A token is routed differently when its set of k experts differs. The first such token is
    kept with both sides' probabilities, to show whether it sat within rounding of a tie. With
    `replay`, a token the executor routed differently takes the executor's experts when they
    are, in the reference's probabilities, within rounding of its top k (the k-th best minus
    the weakest of the executor's); a choice beyond it is counted as a
    violation and not replayed. The tolerance is ROUTE_TIE_ATOL's rule: twice the two sides'
    difference on that token's probabilities, plus `tolerance`.
    """

    def __init__(self, path, tolerance, replay):
        if not os.path.exists(path):
            raise SystemExit(f"reference_check: {path} is missing: an MoE model's curve needs the "
                             "executor's routing (execute --dump-reference writes it)")
        meta, t = read_tensors(path)
        self.probs, self.experts = t["probs"], t["experts"].long()
        self.steps, self.micro_batches, self.layers, self.tokens, self.E = self.probs.shape
        self.tolerance, self.replay = tolerance, replay
        self.step = self.layer = 0
        self.first = None          # the first differently routed token (a dict)
        self.differing = 0         # tokens routed differently, replayed or not
        self.violations = []       # (step, layer, token, slack) beyond the tolerance
        self.prob_diff = []        # per step: max |executor - reference| router probability
        self.differing_per_step = []

    def start_step(self, step):
        self.step, self.layer = step, 0
        self.prob_diff.append(0.0)
        self.differing_per_step.append(0)

    def route(self, probs, chosen):
        if self.step >= self.steps:
            raise SystemExit(f"reference_check: the routing dump has {self.steps} steps, "
                             f"the curve asks for step {self.step + 1}")
        k = chosen.shape[1]
        theirs = self.experts[self.step, :, self.layer].reshape(-1, k)
        p_theirs = self.probs[self.step, :, self.layer].reshape(-1, self.E)
        self.prob_diff[-1] = max(self.prob_diff[-1], (p_theirs - probs).abs().max().item())
        differ = (theirs.sort(1).values != chosen.sort(1).values).any(1)
        if differ.any():
            kth = probs.topk(k, dim=-1).values[:, k - 1]
            slack = kth - probs.gather(1, theirs).min(1).values  # >= 0; 0 at an exact tie
            apart = (p_theirs - probs).abs().max(1).values  # the two sides, per token
            within = differ & (slack <= 2 * apart + self.tolerance)
            rows = differ.nonzero().flatten().tolist()
            self.differing += len(rows)
            self.differing_per_step[-1] += len(rows)
            if self.first is None:
                self.first = self.describe(rows[0], probs, p_theirs, chosen, theirs,
                                           slack[rows[0]].item())
            for r in (differ & ~within).nonzero().flatten().tolist():
                self.violations.append((self.step + 1, self.layer, r, slack[r].item()))
            if self.replay:
                chosen = torch.where(within[:, None], theirs, chosen)
        self.layer += 1
        return chosen

    def describe(self, row, probs, p_theirs, ours, theirs, slack):
        """Both sides' view of one token: its experts, their probabilities, and the gap between
        the k-th and (k+1)-th probability on each side."""
        k = ours.shape[1]

        def gap(p):
            top = p.topk(k + 1).values
            return (top[k - 1] - top[k]).item()

        return {"step": self.step + 1, "moe_layer": self.layer,
                "micro_batch": row // self.tokens, "token": row % self.tokens,
                "executor_experts": theirs[row].tolist(),
                "torch_experts": ours[row].tolist(),
                "executor_probs": [round(v, 9) for v in p_theirs[row].tolist()],
                "torch_probs": [round(v, 9) for v in probs[row].tolist()],
                "executor_gap": gap(p_theirs[row]), "torch_gap": gap(probs[row]),
                "row_prob_diff": (p_theirs[row] - probs[row]).abs().max().item(),
                "slack": slack}


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
        if meta.get("moe_capacity_factor") is not None:
            print(f"capacity factor {meta['moe_capacity_factor']:g}: {model.dropped} assignments "
                  f"dropped; smallest probability gap across a capacity's edge "
                  f"{model.drop_margin:.2e}")
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
        if model.routing is not None:
            model.routing.start_step(step)
        opt.zero_grad(set_to_none=True)
        _, loss, objective = model.loss(batch)
        objective.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
    return losses, seconds


def curve_diffs(ours, theirs):
    """|executor - torch| per step and the step (from 1) of the largest."""
    diffs = [abs(a - b) for a, b in zip(ours, theirs)]
    return diffs, max(range(len(diffs)), key=diffs.__getitem__)


def routed_curve(meta, weights, corpus, steps, routing):
    model = Gpt(meta, weights)
    model.routing = routing
    losses, _ = loss_curve(model, corpus, meta["seed"], steps, meta["lr"])
    return losses, model.idle_experts


def report_routing(label, routing, diffs):
    """What the routing comparison found; with a free run, where its curve parts."""
    first = routing.first
    print(f"routing ({label}): {routing.differing} tokens routed differently over "
          f"{len(routing.prob_diff)} steps, {len(routing.violations)} beyond rounding of a tie "
          f"(2 x the sides' difference + {routing.tolerance:g}); router probabilities within "
          f"{max(routing.prob_diff):.2e} of the executor's at every step")
    if first is None:
        return
    print(f"  first at step {first['step']}, MoE layer {first['moe_layer']}, micro-batch "
          f"{first['micro_batch']}, token {first['token']}: executor experts "
          f"{first['executor_experts']} (gap {first['executor_gap']:.2e}), torch "
          f"{first['torch_experts']} (gap {first['torch_gap']:.2e}); the two sides' "
          f"probabilities of that token differ by up to {first['row_prob_diff']:.2e}")
    if label == "free":
        before = max(diffs[:first["step"]], default=0.0)
        apart = next((i + 1 for i, d in enumerate(diffs) if d > 1e-3), None)
        print(f"  free curves: max |diff| {before:.2e} through step {first['step']}, first "
              f"above 1e-3 at step {apart}, max {max(diffs):.4f}")
    for step, layer, row, slack in routing.violations[:5]:
        print(f"  beyond rounding of a tie: step {step}, MoE layer {layer}, token row {row}: the "
              f"executor's experts are {slack:.2e} below torch's k-th probability")


def compare_curves(args, meta, weights, corpus):
    """The executor's loss curve (its report) against the reference's over as many steps. For
    an MoE model the reference replays the executor's routing at near-ties (Routing; --routing
    free: it routes on its own, the curves then part after the first differently routed
    token, and --routing both runs both, deciding on the replayed one)."""
    with open(args.executor_report) as f:
        ours = json.load(f)["loss"]
    steps, moe = len(ours), any(n.endswith(".router") for n in weights)
    record = {"seed": meta["seed"], "executor": ours}
    ok = True
    if not moe:
        theirs, _ = loss_curve(Gpt(meta, weights), corpus, meta["seed"], steps, meta["lr"])
    else:
        path = args.prefix + ".routing.tpt"
        modes = {"replay": ["replay"], "free": ["free"], "both": ["free", "replay"]}
        for mode in modes[args.routing]:
            routing = Routing(path, args.routing_tolerance, replay=mode == "replay")
            theirs, idle = routed_curve(meta, weights, corpus, steps, routing)
            diffs, _ = curve_diffs(ours, theirs)
            report_routing(mode, routing, diffs)
            print(f"  experts that no token chose: {idle} (layer, step) cases")
            record[f"torch_{mode}"] = theirs
            record[f"routing_{mode}"] = {"first": routing.first,
                                         "differing_per_step": routing.differing_per_step,
                                         "prob_diff": routing.prob_diff,
                                         "violations": len(routing.violations)}
            ok &= mode == "free" or not routing.violations
    record["torch"] = theirs
    diffs, worst = curve_diffs(ours, theirs)
    print(f"loss curve over {steps} steps: max |diff| {diffs[worst]:.2e} at step "
          f"{worst + 1} (executor {ours[worst]:.4f}, torch {theirs[worst]:.4f}; "
          f"tolerance {args.curve_tolerance:g}); last step executor {ours[-1]:.4f}, "
          f"torch {theirs[-1]:.4f}")
    if args.curve_json:
        with open(args.curve_json, "w") as f:
            json.dump(record, f)
    return ok and diffs[worst] <= args.curve_tolerance


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", required=True, help="execute --dump-reference PREFIX")
    ap.add_argument("--data", required=True, help="the corpus execute trained on")
    ap.add_argument("--executor-report", help="execute --out report (its loss curve)")
    ap.add_argument("--curve-tolerance", type=float, default=0.02,
                    help="largest |loss difference| allowed at any step")
    ap.add_argument("--curve-json", help="write both loss curves here")
    ap.add_argument("--routing", choices=("replay", "free", "both"), default="replay",
                    help="MoE curve: replay the executor's routing at near-ties (the check), "
                         "route freely (the curves part), or both (decides on replay)")
    ap.add_argument("--routing-tolerance", type=float, default=ROUTE_TIE_ATOL,
                    help="how far below the reference's k-th probability a replayed choice may "
                         "be, beyond twice the two sides' difference on the token")
    ap.add_argument("--skip-idle-experts", action="store_true",
                    help="study only: an expert no token chose gets no gradient, so AdamW skips "
                         "it (this script's behaviour before 2026-11-25), instead of a zero one")
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
    meta["skip_idle_experts"] = args.skip_idle_experts
    ok = check_first_step(Gpt(meta, weights), step1, corpus, seed)
    if args.executor_report:
        ok &= compare_curves(args, meta, weights, corpus)
    print("reference_check: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
