// Parameter layout and initialisation; see params.h. Tested by tests/executor/cpu/gpt_test.cc
// (layouts against the cost model's blocks) and tests/executor/parallel_check.cc (the same
// initial weights in every layout).
#include "executor/params.h"

#include <cmath>

namespace trainplan::executor {

Status check_executor_supports(const ModelSpec& m, const Plan& p) {
  auto no = [](const std::string& why) {
    return Status::Error("the CPU executor does not support " + why, ExitCode::kInvalidInput);
  };
  if (p.fp8)
    return Status::Error("fp8: the executors compute in fp32 (CPU) or bf16 (CUDA); plan and "
                         "simulate model FP8 training",
                         ExitCode::kInvalidInput);
  if (p.recompute == Recompute::kSelectiveOp)
    return no("recompute selective-op (torchtitan's op-level checkpoint; plan and simulate model "
              "it): use none, selective or full");
  // Megatron-LM asserts the same (arguments.py, validate_args: "When using MoE and tensor
  // parallelism, sequence parallelism must be used"); the router's TP gradient sum is the
  // sequence-parallel one (executor/cpu/moe.h).
  if (m.is_moe() && p.tp > 1 && !p.sequence_parallel)
    return no("tp=" + std::to_string(p.tp) +
              " with a mixture-of-experts model without sequence_parallel (Megatron-LM requires "
              "it too); set \"sequence_parallel\": true or tp 1");
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll)
    return no("moe_dispatcher " + std::string(to_string(p.moe_dispatcher)) +
              " (another dispatcher's network traffic, for plan and simulate): the executors "
              "send every routed copy through the all-to-all; use alltoall");
  if (p.ep_overlap)
    return Status::Error("ep_overlap: the executors run each expert all-to-all whole, between "
                         "the kernels around it; plan and simulate model the overlap",
                         ExitCode::kInvalidInput);
  // The executors run their own loss and attention kernels; these two fields describe other
  // frameworks' kernels for plan and simulate.
  if (p.cross_entropy != CrossEntropy::kFused)
    return no("cross_entropy " + std::string(to_string(p.cross_entropy)) +
              " (another framework's loss, modelled by plan and simulate): use fused");
  if (p.attention_kernel != AttentionKernel::kGeneric)
    return no("attention_kernel " + std::string(to_string(p.attention_kernel)) +
              " (a GPU kernel's published rates, for plan and simulate): use generic");
  // Its context parallelism all-gathers K and V before the attention and reduce-scatters their
  // gradients (executor/cpu/gpt.cc). The other forms would need the attention split into ring
  // steps whose partial outputs are merged by their softmax statistics, a kernel of their own.
  if (p.cp > 1 && p.cp_comm != CpComm::kAllGather)
    return no("cp_comm " + std::string(to_string(p.cp_comm)) +
              " (another framework's exchange of keys and values, modelled by plan and "
              "simulate): it runs context parallelism as an all-gather; use all-gather");
  if (m.is_mla()) return no("multi-head latent attention (kv_lora_rank > 0)");
  if (m.router_groups > 0)
    return no("group-limited routing (router_groups=" + std::to_string(m.router_groups) +
              "); it routes each token's top-k over every expert");
  if (m.v_dim() != m.head_dim)
    return no("v_head_dim=" + std::to_string(m.v_dim()) + " different from head_dim=" +
              std::to_string(m.head_dim));
  if (m.activation != Activation::kGelu) return no("activation " + std::string(to_string(m.activation)) + " (GELU only)");
  if (m.norm != NormKind::kLayerNorm) return no("norm " + std::string(to_string(m.norm)) + " (LayerNorm only)");
  if (m.position != PositionKind::kLearned) return no("rotary positions (learned only)");
  if (!m.bias) return no("linear layers without biases");
  if (m.dropout) return no("dropout (set \"dropout\": false in the model)");
  if (m.num_kv_heads != m.num_attention_heads) return no("grouped-query attention (num_kv_heads != num_attention_heads)");
  // Before the precision check: the pass needs a 16-bit plan, which is refused below.
  // shard-add is what the executors do under ZeRO-2/3 (CpuStage::grads, reduce_scatter_grad).
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone &&
      p.grad_accumulation_pass != GradAccumulationPass::kShardAdd)
    return no("grad_accumulation_pass " + std::string(to_string(p.grad_accumulation_pass)) +
              " (a separate per-micro-batch gradient accumulation pass, modelled by plan and "
              "simulate): the executors accumulate in "
              "the backward; use none (or shard-add with ZeRO 2 or 3)");
  if (p.precision != Precision::kFp32)
    return no("precision " + std::string(to_string(p.precision)) +
              ": it computes and communicates float32, so the plan must say \"precision\": \"fp32\" "
              "for its byte counts to be comparable");
  if (p.optimizer != Optimizer::kAdamW) return no("optimizer " + std::string(to_string(p.optimizer)) + " (AdamW only)");
  if (p.offload_checkpoints)
    return Status::Error("offload_checkpoints: the executors keep checkpoints in device memory "
                         "(on the CPU executor host and device are one memory); plan and "
                         "simulate model the offload",
                         ExitCode::kInvalidInput);
  if (p.zero3_gather != ZeroGather::kFlat)
    return no("zero3_gather " + std::string(to_string(p.zero3_gather)) +
              " (DeepSpeed 0.3-0.5's gather per parameter tensor, modelled by plan and "
              "simulate): the executors gather each block flat; use flat");
  if (p.zero1_collectives != ZeroCollectives::kFlat)
    return no("zero1_collectives " + std::string(to_string(p.zero1_collectives)) +
              " (nanotron 0.5's ZeRO-1 whole-gradient all-reduce and gather into one tensor per "
              "rank, or DeepSpeed's BF16_Optimizer's whole-gradient all-reduce, modelled by plan "
              "and simulate): the "
              "executors reduce and gather each block flat; use flat");
  if (p.param_gather != ParamGather::kAfterStep)
    return no("param_gather " + std::string(to_string(p.param_gather)) +
              " (the parameter all-gather overlapped with the next step's forward, modelled by "
              "plan and simulate): the executors gather the updated shards after the step; use "
              "after-step");
  if (p.dp_bucket_elements != 0)
    return no("dp_bucket_elements " + std::to_string(p.dp_bucket_elements) +
              " (the data-parallel collectives split into buckets, modelled by plan and "
              "simulate): the executors run one collective per parameter block; use 0");
  if (p.pipeline_scatter_gather)
    return no("pipeline_scatter_gather (Megatron-LM 2021's split pipeline sends, modelled by plan "
              "and simulate): the executors send a pipeline message whole from each TP rank; "
              "set it false");
  if (p.ddp_bucket_copy)
    return no("ddp_bucket_copy (PyTorch DDP's second copy of the gradients, modelled by plan "
              "and simulate): the executors keep one gradient buffer; leave it false");
  if (p.zero3_recompute_gather != ZeroRecomputeGather::kAgain)
    return no("zero3_recompute_gather " + std::string(to_string(p.zero3_recompute_gather)) +
              " (FSDP's one gather for a recomputed layer's recompute and backward, modelled by "
              "plan and simulate): the executors gather for each; use again");
  if (p.zero3_backward_prefetch != ZeroBackwardPrefetch::kAfterReduce)
    return no("zero3_backward_prefetch " + std::string(to_string(p.zero3_backward_prefetch)) +
              " (FSDP2's gather of the next block issued before this block's reduce-scatter, "
              "modelled by plan and simulate): the executors gather when the backward reaches a "
              "block; use after-reduce");
  if (p.zero3_copies != ZeroCopies::kNone)
    return no("zero3_copies " + std::string(to_string(p.zero3_copies)) +
              " (PyTorch FSDP's copies around its gathers and reduce-scatters, modelled by plan "
              "and simulate): the executors gather into and reduce from each block's own "
              "buffer; use none");
  if (p.elementwise != Elementwise::kFused)
    return no("elementwise " + std::string(to_string(p.elementwise)) +
              " (PyTorch eager's unfused norm, rotary and activation kernels, modelled by plan "
              "and simulate): the executors run each as one kernel; use fused");
  if (p.tp_comm_overlap_impl != TpOverlapImpl::kTeUserbuffers)
    return no("tp_comm_overlap_impl " + std::string(to_string(p.tp_comm_overlap_impl)) +
              " (PyTorch's micro-pipelined TP, modelled by plan and simulate): the executors run "
              "each TP collective whole");
  if (p.tp_comm_overlap)
    return Status::Error("tp_comm_overlap: the executors run each TP collective whole, between "
                         "the kernels around it; plan and simulate model the overlap",
                         ExitCode::kInvalidInput);
  if (p.defer_embedding_wgrad)
    return Status::Error("defer_embedding_wgrad: the executors compute the head's weight "
                         "gradient in each micro-batch's backward; plan and simulate model the "
                         "deferral to the pipeline flush",
                         ExitCode::kInvalidInput);
  return Status::Ok();
}

namespace {

struct Builder {
  BlockLayout b;
  std::int64_t dense_params = 0;  // before the expert part's padding
  void add(TensorSlice t) {
    t.offset = b.size;
    if (t.valid_rows == 0) t.valid_rows = t.full_rows;
    b.size += t.size();
    b.tensors.push_back(std::move(t));
  }
  // Pads the buffer to a multiple of n elements (a gap no tensor covers).
  void pad_to(std::int64_t n) {
    if (b.expert_offset < 0) dense_params = b.size;
    b.size = (b.size + n - 1) / n * n;
  }
};

TensorSlice full(std::string name, std::int64_t rows, std::int64_t cols, float std_, float value,
                 bool decay) {
  TensorSlice t;
  t.name = std::move(name);
  t.full_rows = t.rows = rows;
  t.full_cols = t.cols = cols;
  t.init_std = std_;
  t.init_value = value;
  t.decay = decay;
  return t;
}
TensorSlice cols_of(TensorSlice t, std::int64_t tp, std::int64_t r) {
  t.cols = t.full_cols / tp;
  t.col0 = r * t.cols;
  return t;
}
TensorSlice rows_of(TensorSlice t, std::int64_t tp, std::int64_t r) {
  t.rows = t.full_rows / tp;
  t.row0 = r * t.rows;
  return t;
}

constexpr float kInitStd = 0.02f;  // GPT-2 (Radford et al. 2019)

// A GELU MLP of inner width f under `prefix` ("h3.", "h3.shared.", "h3.e5."): w1 and b1
// column-parallel, w2 row-parallel, b2 whole (Megatron-LM's ColumnParallelLinear /
// RowParallelLinear), over tp ranks of which this is rank r.
void add_mlp(Builder& bl, const std::string& prefix, std::int64_t f, std::int64_t tp,
             std::int64_t r, float resid_std) {
  const std::int64_t h = bl.b.tensors.front().full_cols;  // every layer starts with a norm (h)
  bl.add(cols_of(full(prefix + "w1", h, f, kInitStd, 0, true), tp, r));
  bl.add(cols_of(full(prefix + "b1", 1, f, 0, 0, false), tp, r));
  bl.add(rows_of(full(prefix + "w2", f, h, resid_std, 0, true), tp, r));
  bl.add(full(prefix + "b2", 1, h, 0, 0, false));
}

}  // namespace

std::vector<BlockLayout> stage_layouts(const ModelSpec& m, const Plan& p, std::int64_t stage,
                                       std::int64_t r, std::int64_t ep_rank,
                                       std::int64_t expert_tp_rank) {
  const std::int64_t t = p.tp, h = m.hidden_size, q = m.q_width(), f = m.ffn_hidden_size;
  const std::int64_t vp = padded_vocab(m, t);
  const bool sp = p.sequence_parallel && t > 1;
  // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
  const float resid_std = kInitStd / std::sqrt(2.0f * static_cast<float>(m.num_layers));
  auto table = [&](const std::string& name, bool tied) {
    TensorSlice w = rows_of(full(name, vp, h, kInitStd, 0, true), t, r);
    w.valid_rows = m.vocab_size;
    w.tied = tied;
    return w;
  };
  auto norm = [&](const std::string& name, Builder& out) {
    TensorSlice g = full(name + ".g", 1, h, 0, 1.0f, false);
    TensorSlice b = full(name + ".b", 1, h, 0, 0.0f, false);
    g.sp_norm = b.sp_norm = sp;
    out.add(g);
    out.add(b);
  };
  const bool tied_copies = m.tie_word_embeddings && splits_tied_embedding(p);

  std::vector<BlockLayout> out;
  const std::vector<ParamBlock> expected = param_blocks_on_stage(m, p, stage);
  for (const ParamBlock& pb : expected) {
    Builder bl;
    bl.b.kind = pb.kind;
    bl.b.layer = pb.layer;
    switch (pb.kind) {
      case BlockKind::kEmbedding:
        bl.add(table("wte", tied_copies));
        bl.add(full("wpe", m.max_position_embeddings, h, kInitStd, 0, true));
        break;
      case BlockKind::kLayer: {
        const std::string L = "h" + std::to_string(pb.layer) + ".";
        const ModelSpec lm = layer_model(m, layer_kind(m, pb.layer));
        norm(L + "ln1", bl);
        for (const char* w : {"q", "k", "v"}) {
          bl.add(cols_of(full(L + "w" + w, h, q, kInitStd, 0, true), t, r));
          bl.add(cols_of(full(L + "b" + w, 1, q, 0, 0, false), t, r));
        }
        bl.add(rows_of(full(L + "wo", q, h, resid_std, 0, true), t, r));
        bl.add(full(L + "bo", 1, h, 0, 0, false));
        norm(L + "ln2", bl);
        if (!lm.is_moe()) {
          add_mlp(bl, L, lm.ffn_hidden_size, t, r, resid_std);
          break;
        }
        // The router: one h x num_experts matrix, no bias, whole on every rank (Megatron-Core's
        // TopKRouter; the cost model's router_params). Its weight is marked sequence-parallel,
        // as Megatron-Core's TopKRouter marks it: its gradient is summed over TP once per step.
        TensorSlice router = full(L + "router", h, lm.num_experts, kInitStd, 0, true);
        router.sp_norm = sp;
        bl.add(router);
        if (lm.shared_expert_ffn_size > 0)
          add_mlp(bl, L + "shared.", lm.shared_expert_ffn_size, t, r, resid_std);
        // This EP rank's experts: global indices [ep_rank * local, (ep_rank + 1) * local), each
        // split like a dense MLP over the experts' tensor-parallel ranks (the cost model's
        // expert parameters, f / expert_tp wide): the attention's tp ranks when carved
        // (Megatron-Core's expert tensor parallelism equal to tp), the expert_tp group when
        // folded (Plan::expert_tp_size; this rank is expert_tp_rank of it).
        bl.pad_to(p.zero_shard_ranks());
        bl.b.expert_offset = bl.b.size;
        const std::int64_t local = lm.num_experts / p.ep;
        const bool folded = p.expert_layout == ExpertLayout::kFolded;
        for (std::int64_t j = 0; j < local; ++j)
          add_mlp(bl, L + "e" + std::to_string(ep_rank * local + j) + ".", f,
                  folded ? p.expert_tp_size() : t, folded ? expert_tp_rank : r, resid_std);
        break;
      }
      case BlockKind::kHead:
        norm("lnf", bl);
        if (!m.tie_word_embeddings) bl.add(table("lm_head", false));
        else if (tied_copies) bl.add(table("wte", true));  // the tied copy: same name, same init
        break;
    }
    const std::int64_t dense = bl.b.expert_offset < 0 ? bl.b.size : bl.dense_params;
    const std::int64_t expert = bl.b.expert_offset < 0 ? 0 : bl.b.size - bl.b.expert_offset;
    TRAINPLAN_CHECK(dense == pb.dense_params && expert == pb.expert_params)
        << "executor layout of block " << static_cast<int>(pb.kind) << " layer " << pb.layer
        << " has " << dense << " dense and " << expert << " expert parameters, the cost model "
        << "counts " << pb.dense_params << " and " << pb.expert_params;
    if (bl.b.expert_offset >= 0) {
      bl.pad_to(expert_dp_cp(p));
      bl.b.expert_size = bl.b.size - bl.b.expert_offset;
    }
    out.push_back(std::move(bl.b));
  }
  return out;
}

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}
}  // namespace

float init_value(std::uint64_t seed, const TensorSlice& t, std::int64_t row, std::int64_t col) {
  if (row >= t.valid_rows) return 0.0f;
  if (t.init_std == 0.0f) return t.init_value;
  // A counter-based generator: element (row, col) of tensor `name` draws the same normal
  // (Box-Muller) on every layout.
  const std::uint64_t key = splitmix64(seed ^ fnv1a(t.name));
  const std::uint64_t idx = static_cast<std::uint64_t>(row * t.full_cols + col);
  const std::uint64_t a = splitmix64(key + 2 * idx), b = splitmix64(key + 2 * idx + 1);
  const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(z) * t.init_std;
}

void init_slice(std::uint64_t seed, const TensorSlice& t, float* data) {
  for (std::int64_t i = 0; i < t.rows; ++i)
    for (std::int64_t j = 0; j < t.cols; ++j)
      data[i * t.cols + j] = init_value(seed, t, t.row0 + i, t.col0 + j);
}

}  // namespace trainplan::executor
