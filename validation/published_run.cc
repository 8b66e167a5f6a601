// Published runs onto our model, plan and cluster. See published_run.h; tested by
// tests/validation/published_run_test.cc.
#include "validation/published_run.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"

namespace trainplan {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The first of several spellings of one field that is present (e.g. kv_heads, num_kv_heads).
bool get_int_any(JsonReader& r, std::initializer_list<const char*> keys, std::int64_t& out,
                 std::int64_t min, std::int64_t max) {
  bool found = false;
  for (const char* k : keys) {
    if (found) r.accept(k);
    else found = r.get_int(k, out, min, max, false);
  }
  return found;
}

// Every key of `json` that `r` did not read, as "prefix.key".
void collect_ignored(const Json& json, const JsonReader& r, const std::string& prefix,
                     std::vector<std::string>& out) {
  for (const std::string& k : r.unknown_keys()) {
    if (!json.at(k).is_null()) out.push_back(prefix + k);
  }
}

// Two architecture families cover the published dense decoders: GPT as Megatron-LM trains it
// (GELU MLP, LayerNorm, learned positions, biases, dropout, tied embeddings) and Llama
// (SwiGLU, RMSNorm, RoPE, no biases, no dropout, untied head).
void set_family(ModelSpec& m, bool llama) {
  m.activation = llama ? Activation::kSwiglu : Activation::kGelu;
  m.norm = llama ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  m.position = llama ? PositionKind::kRope : PositionKind::kLearned;
  m.bias = !llama;
  m.dropout = !llama;
  m.tie_word_embeddings = !llama;
}

// Four significant figures, as "5.75".
std::string format_number(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

std::string fmt_params(double n) { return format_number(n / 1e9) + "B"; }

Status read_model(const Json& j, const std::string& where, PublishedRun& run) {
  ModelSpec& m = run.model;
  JsonReader r(j, where + " model");
  r.get_string("name", m.name, false);
  double params_b = 0;
  const bool has_params = r.get_double("params_b", params_b, 1e-6, 1e6, false);
  r.get_int("layers", m.num_layers, 1, ModelLimits::kMaxLayers, true);
  r.get_int("hidden", m.hidden_size, 1, ModelLimits::kMaxHidden, true);
  const bool has_heads =
      r.get_int("heads", m.num_attention_heads, 1, ModelLimits::kMaxHeads, false);
  r.get_int("seq_len", m.seq_len, 1, ModelLimits::kMaxSeq, true);
  // The GPT-2 BPE vocabulary (50257) as Megatron-LM pads it: the dev set's and most GPT-style
  // runs' table. A few thousand rows either way move a large model's step by well under 1%.
  if (!r.get_int("vocab", m.vocab_size, 1, ModelLimits::kMaxVocab, false) && !r.failed())
    run.assumptions.push_back("model.vocab: 51200 (GPT-2 BPE padded; not given)");
  if (m.vocab_size == 0) m.vocab_size = 51200;
  if (!r.get_int("ffn_hidden", m.ffn_hidden_size, 1, ModelLimits::kMaxFfn, false)) {
    m.ffn_hidden_size = 4 * m.hidden_size;
    if (!r.failed()) run.assumptions.push_back("model.ffn_hidden: 4 x hidden");
  }
  get_int_any(r, {"kv_heads", "num_kv_heads", "num_key_value_heads", "num_query_groups"},
              m.num_kv_heads, 1, ModelLimits::kMaxHeads);
  r.get_int("head_dim", m.head_dim, 1, ModelLimits::kMaxHidden, false);
  get_int_any(r, {"num_experts", "experts"}, m.num_experts, 1, ModelLimits::kMaxExperts);
  get_int_any(r, {"experts_per_token", "top_k"}, m.experts_per_token, 1,
              ModelLimits::kMaxExperts);
  // Non-uniform MoE stacks (DeepSeek, Qwen-MoE): the experts' width, where given, makes
  // ffn_hidden the dense layers' width; shared experts by count (of the experts' width) or by
  // width; dense layers as a list or as the first k.
  std::int64_t expert_ffn = 0, shared_count = 0, shared_ffn = 0, first_dense = 0, nope = 0;
  get_int_any(r, {"moe_ffn_hidden", "expert_ffn_hidden", "moe_intermediate_size"}, expert_ffn, 1,
              ModelLimits::kMaxFfn);
  get_int_any(r, {"shared_experts", "n_shared_experts"}, shared_count, 0,
              ModelLimits::kMaxExperts);
  get_int_any(r, {"shared_expert_ffn_hidden", "shared_expert_intermediate_size"}, shared_ffn, 0,
              ModelLimits::kMaxFfn);
  get_int_any(r, {"router_groups", "n_group"}, m.router_groups, 0, ModelLimits::kMaxExperts);
  get_int_any(r, {"router_group_topk", "topk_group"}, m.router_group_topk, 0,
              ModelLimits::kMaxExperts);
  if (m.router_groups <= 1) m.router_groups = m.router_group_topk = 0;
  r.get_int_list("dense_layers", m.dense_layers, 0, ModelLimits::kMaxLayers - 1, false);
  get_int_any(r, {"first_dense_layers", "first_k_dense_replace"}, first_dense, 0,
              ModelLimits::kMaxLayers);
  // Multi-head latent attention (DeepSeek-V2/V3): head_dim = qk_nope_head_dim + the rotary part.
  r.get_int("q_lora_rank", m.q_lora_rank, 0, ModelLimits::kMaxHidden, false);
  r.get_int("kv_lora_rank", m.kv_lora_rank, 0, ModelLimits::kMaxHidden, false);
  r.get_int("qk_rope_head_dim", m.qk_rope_head_dim, 0, ModelLimits::kMaxHidden, false);
  r.get_int("qk_nope_head_dim", nope, 1, ModelLimits::kMaxHidden, false);
  r.get_int("v_head_dim", m.v_head_dim, 0, ModelLimits::kMaxHidden, false);
  if (expert_ffn > 0) {
    m.dense_ffn_hidden_size = m.ffn_hidden_size;
    m.ffn_hidden_size = expert_ffn;
  }
  m.shared_expert_ffn_size = shared_ffn + shared_count * m.ffn_hidden_size;
  if (m.dense_layers.empty())
    for (std::int64_t k = 0; k < first_dense; ++k) m.dense_layers.push_back(k);
  if (nope > 0) m.head_dim = nope + m.qk_rope_head_dim;
  int activation = -1, norm = -1, position = -1;
  // ReLU (OPT) has GELU's two matrices and FLOPs; it is costed as the GELU MLP.
  r.get_choice("activation", activation, {"gelu", "swiglu", "relu"}, false);
  if (activation == 2) {
    activation = 0;
    run.assumptions.push_back("model.activation: relu costed as the two-matrix GELU MLP");
  }
  r.get_choice("norm", norm, {"layernorm", "rmsnorm"}, false);
  r.get_choice("position", position, {"learned", "rope"}, false);
  bool tied = true, bias = true, dropout = true;
  const bool has_tied = r.get_bool("tied_embeddings", tied, false);
  const bool has_bias = r.get_bool("bias", bias, false);
  const bool has_dropout = r.get_bool("dropout", dropout, false);
  r.get_double("glu_clamp", m.glu_clamp, 0.0, 1e6, false);
  if (r.failed()) return r.finish(true);
  collect_ignored(j, r, "model.", run.ignored_fields);
  if (!has_heads) {
    // Heads of 128 dimensions: GPT-3's (Brown et al. 2020, Table 2.1) and Llama's.
    if (m.hidden_size % 128 != 0)
      return Status::Error(where + " model: missing required field 'heads' (hidden=" +
                           std::to_string(m.hidden_size) + " is not a multiple of 128)");
    m.num_attention_heads = m.hidden_size / 128;
    run.assumptions.push_back("model.heads: hidden / 128 = " +
                              std::to_string(m.num_attention_heads) + " (not given)");
  }
  if (m.num_kv_heads == 0) m.num_kv_heads = m.num_attention_heads;
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0)
      return Status::Error(where + " model: field 'heads': " +
                           std::to_string(m.num_attention_heads) + " does not divide hidden=" +
                           std::to_string(m.hidden_size) + " (give head_dim)");
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  m.max_position_embeddings = m.seq_len;

  // The family: the activation when given; otherwise the one whose parameter count is nearer
  // the published params_b (a GELU MLP has 2 matrices of h x f, SwiGLU 3, so the two differ by
  // a third or more of the MLP); otherwise GPT.
  bool llama = activation == 1;
  if (activation < 0) {
    if (has_params) {
      ModelSpec gpt = m, lla = m;
      set_family(gpt, false);
      set_family(lla, true);
      const double n_gpt = count_parameters(gpt).total(), n_llama = count_parameters(lla).total();
      const double want = params_b * 1e9;
      llama = std::fabs(n_llama - want) < std::fabs(n_gpt - want);
      run.assumptions.push_back(std::string("model family: ") + (llama ? "Llama" : "GPT") +
                                " (its " + fmt_params(llama ? n_llama : n_gpt) +
                                " parameters are nearer params_b " + fmt_params(want) +
                                " than the other's " + fmt_params(llama ? n_gpt : n_llama) + ")");
    } else {
      run.assumptions.push_back("model family: GPT (no activation or params_b given)");
    }
  }
  set_family(m, llama);
  if (norm >= 0) m.norm = static_cast<NormKind>(norm);
  if (position >= 0) m.position = static_cast<PositionKind>(position);
  if (has_tied) m.tie_word_embeddings = tied;
  if (has_bias) m.bias = bias;
  if (has_dropout) m.dropout = dropout;
  if (m.name.empty()) m.name = run.id;
  TRAINPLAN_RETURN_IF_ERROR(validate_model(m, where));
  if (has_params) {
    const double n = count_parameters(m).total(), want = params_b * 1e9;
    if (std::fabs(n - want) > 0.1 * want)
      run.assumptions.push_back("model: " + fmt_params(n) + " parameters by our count against " +
                                "params_b " + fmt_params(want) + " (check the shape)");
  }
  return Status::Ok();
}

// The family, all three fields when given; without one the run is its own "unknown" family.
Status read_family(const Json* j, const std::string& where, PublishedRun& run) {
  PublishedFamily& f = run.family;
  if (j == nullptr) {
    f = {"unknown", "unknown", "unknown"};
    run.assumptions.push_back("family: unknown (not given)");
    return Status::Ok();
  }
  JsonReader r(*j, where + " family");
  r.get_string("source", f.source, true);
  r.get_string("framework", f.framework, true);
  r.get_string("gpu_generation", f.gpu_generation, true);
  return r.finish(false);
}

Status read_hardware(const Json& j, const std::string& where, PublishedRun& run) {
  JsonReader r(j, where + " hardware");
  std::string gpu;
  std::int64_t num_gpus = 0, per_node = 0;  // 0: the preset's node (8, or DGX-2's 16)
  r.get_string("gpu", gpu, true);
  r.get_int("num_gpus", num_gpus, 1, ClusterLimits::kMaxGpus, true);
  r.get_int("gpus_per_node", per_node, 1, ClusterLimits::kMaxGpusPerNode, false);
  r.accept("interconnect");  // prose; the preset's DGX/HGX links unless the NICs are given
  // A node whose GPUs share fewer NICs than a DGX/HGX (one per GPU) has: its NIC count and
  // line rate, together.
  std::int64_t nics = 0;
  double nic_Gbps = 0;
  const bool has_nics = r.get_int("nics_per_node", nics, 1, ClusterLimits::kMaxGpusPerNode, false);
  const bool has_rate = r.get_double("nic_Gbps", nic_Gbps, 1e-3, 1e6, false);
  // A board power limit below the part's own (a 750 W B200): its peaks at that power.
  double limit_w = 0;
  const bool limited = r.get_double("power_limit_W", limit_w, 1, 1e5, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish(true));
  if (has_nics != has_rate)
    return Status::Error(where + " hardware: " +
                         (has_nics ? "nics_per_node=" + std::to_string(nics) + " needs nic_Gbps"
                                   : "nic_Gbps=" + format_number(nic_Gbps) +
                                         " needs nics_per_node") +
                         " (the two go together)");
  collect_ignored(j, r, "hardware.", run.ignored_fields);
  auto node = [&](const std::string& preset) {
    auto n = preset_gpus_per_node(preset);
    return std::min(per_node > 0 ? per_node : n.ok() ? *n : 8, num_gpus);
  };
  auto c = make_cluster(gpu, num_gpus, node(gpu));
  if (!c.ok()) {
    // A description rather than a preset name ("H100 96GB HBM2e @500W (...)"): the preset of
    // the same part and memory, said so.
    const std::string key = lower(gpu);
    auto has = [&](const char* w) { return key.find(w) != std::string::npos; };
    std::string preset;
    if (has("a100")) preset = has("40") ? "A100-40GB" : "A100-80GB";
    else if (has("h100")) preset = has("96") ? "H100-96GB" : "H100-80GB";
    else if (has("h800")) preset = "H800-80GB";
    else if (has("h200")) preset = "H200-141GB";
    else if (has("gb200"))
      preset = "GB200-186GB";
    else if (has("gb300"))
      preset = "GB300-288GB";
    else if (has("b300"))
      preset = "B300-270GB";
    else if (has("b200")) preset = "B200-192GB";
    else if (has("v100")) preset = has("16") ? "V100-16GB" : "V100-32GB";
    if (!preset.empty()) {
      auto again = make_cluster(preset, num_gpus, node(preset));
      if (again.ok()) {
        run.assumptions.push_back("hardware.gpu \"" + gpu + "\" read as preset " + preset);
        c = std::move(again);
      }
    }
  }
  if (!c.ok()) return Status::Error(where + " hardware: " + c.status().message());
  run.cluster = *c;
  if (limited) {
    auto limited_gpu = at_power_limit(run.cluster.gpu, limit_w);
    if (!limited_gpu.ok())
      return Status::Error(where + " hardware: field 'power_limit_W': " +
                           limited_gpu.status().message());
    run.cluster.gpu = *limited_gpu;
  }
  if (has_nics) {
    ClusterSpec& cl = run.cluster;
    cl.inter_node_bytes_per_s = shared_nic_bytes_per_s(nics, nic_Gbps, cl.gpus_per_node);
    cl.nics_per_node = nics;
    run.assumptions.push_back(
        "inter-node: " + std::to_string(nics) + " x " + format_number(nic_Gbps) +
        " Gb/s NICs shared by " + std::to_string(cl.gpus_per_node) + " GPUs, " +
        format_number(cl.inter_node_bytes_per_s / kGB) + " GB/s per GPU at " +
        format_number(kNicAchievableFraction * 100) + "% of line rate");
  }
  return Status::Ok();
}

// Whether the source is dated before 2023, read from its arXiv identifier (YYMM.NNNNN); a
// source without one is taken as recent. FlashAttention (arXiv:2205.14135) entered Megatron-LM
// (--use-flash-attn) and PyTorch (scaled_dot_product_attention, 2.0) in early 2023; runs
// published before then materialised the scores.
bool dated_before_2023(const std::string& text) {
  // text is lower-case: "arxiv:" then optional spaces, YYMM, a dot, 4 or 5 digits.
  auto digits = [&](std::size_t at, std::size_t n) {
    if (at + n > text.size()) return false;
    for (std::size_t i = at; i < at + n; ++i)
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
    return true;
  };
  for (std::size_t at = text.find("arxiv:"); at != std::string::npos;
       at = text.find("arxiv:", at + 1)) {
    std::size_t i = at + 6;
    while (i < text.size() && text[i] == ' ') ++i;
    if (digits(i, 4) && i + 4 < text.size() && text[i + 4] == '.' && digits(i + 5, 4)) {
      return std::stoi(text.substr(i, 4)) < 2301;
    }
  }
  return false;
}

Status read_parallel(const Json& j, const std::string& where, std::int64_t num_gpus,
                     PublishedRun& run) {
  Plan& p = run.plan;
  JsonReader r(j, where + " parallel");
  using PL = PlanLimits;
  r.get_int("tp", p.tp, 1, PL::kMaxDegree, true);
  r.get_int("pp", p.pp, 1, PL::kMaxDegree, true);
  r.get_int("cp", p.cp, 1, PL::kMaxDegree, false);
  const bool has_dp = r.get_int("dp", p.dp, 1, PL::kMaxDegree, false);
  r.get_int("ep", p.ep, 1, PL::kMaxDegree, false);
  // Plan::expert_layout and Plan::expert_tp: Megatron-Core's MoE parallel folding (from
  // core_v0.10.0) and its --expert-tensor-parallel-size, where the entry's source runs them.
  int expert_layout = -1;
  if (r.get_choice("expert_layout", expert_layout, {"carved", "folded"}, false))
    p.expert_layout = static_cast<ExpertLayout>(expert_layout);
  r.get_int("expert_tp", p.expert_tp, 1, PL::kMaxDegree, false);
  r.get_int("vp", p.virtual_stages, 1, PL::kMaxVirtualStages, false);
  std::int64_t zero = 0;
  run.zero_stage_given = r.get_int("zero_stage", zero, 0, 3, false);
  p.zero_stage = static_cast<int>(zero);
  // Hybrid sharding's shard group (Plan::zero_shard_size; torchtitan's
  // data_parallel_shard_degree with a replicate degree, DeepSpeed's mics_shard_size).
  r.get_int("zero_shard_size", p.zero_shard_size, 0, PL::kMaxDegree, false);
  r.get_bool("sequence_parallel", p.sequence_parallel, false);
  r.get_bool("ep_overlap", p.ep_overlap, false);  // Plan::ep_overlap; checked with the plan
  int dispatcher = 0;  // Plan::moe_dispatcher; likewise
  if (r.get_choice("moe_dispatcher", dispatcher, {"alltoall", "deepep"}, false))
    p.moe_dispatcher = static_cast<MoeDispatcher>(dispatcher);
  int gather = 0;  // Plan::param_gather (Megatron-Core's overlap_param_gather); likewise
  if (r.get_choice("param_gather", gather, {"after-step", "next-forward", "aligned"}, false))
    p.param_gather = static_cast<ParamGather>(gather);
  // Plan::dp_bucket_elements (apex DistributedFusedAdam's bucket_cap_mb, in elements); likewise
  r.get_int("dp_bucket_elements", p.dp_bucket_elements, 0, PL::kMaxBucketElements, false);
  r.get_bool("tp_comm_overlap", p.tp_comm_overlap, false);  // Plan::tp_comm_overlap; likewise
  // Plan::defer_embedding_wgrad (Megatron-Core's defer_embedding_wgrad_compute) and its
  // wgrad_deferral_limit; likewise checked with the plan.
  r.get_bool("defer_embedding_wgrad", p.defer_embedding_wgrad, false);
  r.get_int("wgrad_deferral_limit", p.wgrad_deferral_limit, 0, PL::kMaxBatch, false);
  int recompute = -1;
  r.get_choice("recompute", recompute, {"none", "selective", "full", "selective-op"}, false);
  r.get_string("selective_ac_option", run.selective_ac_option, false);
  // Megatron-LM's --recompute-num-layers with --recompute-method block (Plan field's meaning).
  r.get_int("recompute_num_layers", p.recompute_num_layers, 0, ModelLimits::kMaxLayers, false);
  // DeepSpeed's activation_checkpointing.partition_activations (Megatron-DeepSpeed's
  // --partition-activations).
  r.get_bool("partition_activations", p.partition_activations, false);
  // DeepSpeed's activation_checkpointing.cpu_checkpointing (Plan::offload_checkpoints).
  r.get_bool("offload_checkpoints", p.offload_checkpoints, false);
  const bool has_mbs = r.get_int("micro_batch", p.micro_batch_size, 1, PL::kMaxBatch, false);
  r.get_int("global_batch", p.global_batch_size, 1, PL::kMaxBatch, true);
  // In Schedule's order. zb-h1: Qi et al. 2024's ZB-1p runs (arXiv:2401.10241 Table 5 gives it
  // ZB-H1's bubble rate in every setting). zb-v and dualpipe (with vp 2): the simulator plays
  // both (docs/inputs.md); dualpipe is DeepSeek-V3's own schedule (arXiv:2412.19437 sec. 3.2.1).
  int schedule = -1;
  r.get_choice("schedule", schedule,
               {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe"}, false);
  // Plan::layers_per_stage: a framework's own uneven split (nanotron balances its pipeline
  // stages by block cost, the LM head counted as vocab x hidden; models/base.py build_model).
  r.get_int_list("layers_per_stage", p.layers_per_stage, 1, ModelLimits::kMaxLayers, false);
  bool overlap = true;
  const bool has_overlap = r.get_bool("overlap_grad_reduce", overlap, false);
  // Megatron-LM's --overlap-p2p-communication (NeMo's overlap_p2p_comm): the pipeline sends run
  // behind compute (SimOptions::overlap_p2p); absent, the sender waits for its send.
  r.get_bool("overlap_p2p", run.options.overlap_p2p, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish(true));
  collect_ignored(j, r, "parallel.", run.ignored_fields);
  const std::int64_t model_parallel = p.tp * p.cp * p.pp;
  if (!has_dp) {
    if (num_gpus % model_parallel != 0)
      return Status::Error(where + " parallel: dp not given and tp*cp*pp=" +
                           std::to_string(model_parallel) + " does not divide num_gpus=" +
                           std::to_string(num_gpus));
    p.dp = num_gpus / model_parallel;
    run.assumptions.push_back("parallel.dp: num_gpus / (tp*cp*pp) = " + std::to_string(p.dp));
  }
  if (p.world_size() != num_gpus)
    return Status::Error(where + " parallel: tp*cp*pp*dp = " + std::to_string(p.tp) + "*" +
                         std::to_string(p.cp) + "*" + std::to_string(p.pp) + "*" +
                         std::to_string(p.dp) + " = " + std::to_string(p.world_size()) +
                         " but hardware.num_gpus is " + std::to_string(num_gpus));
  if (recompute < 0) run.assumptions.push_back("parallel.recompute: none (not given)");
  p.recompute = recompute < 0 ? Recompute::kNone : static_cast<Recompute>(recompute);
  if (!has_mbs) run.assumptions.push_back("parallel.micro_batch: 1 (not given)");
  if (schedule >= 0) p.schedule = static_cast<Schedule>(schedule);
  else p.schedule = p.virtual_stages > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  // Megatron-LM 2021's "local" DDP all-reduces after the pipeline flush; its launch scripts
  // say which implementation they used, and the entries quote them in notes.
  if (has_overlap) run.options.overlap_grad_reduce = overlap;
  return Status::Ok();
}

Status read_measured(const Json& j, const std::string& where, PublishedRun& run) {
  JsonReader r(j, where + " measured");
  PublishedMeasurement& m = run.measured;
  double v = 0;
  if (r.get_double("tflops_per_gpu", v, 1e-9, 1e9, false)) m.tflops_per_gpu = v;
  if (r.get_double("mfu", v, 1e-9, 100, false)) {
    if (v > 1) {
      run.assumptions.push_back("measured.mfu " + std::to_string(v) + " read as a percentage");
      v /= 100;
    }
    m.mfu = v;
  }
  if (r.get_double("iteration_time_s", v, 1e-9, 1e9, false)) m.iteration_time_s = v;
  if (r.get_double("tokens_per_s", v, 1e-9, 1e15, false)) m.tokens_per_s = v;
  if (r.get_double("memory_gb", v, 1e-9, 1e6, false)) m.memory_gb = v;
  int measure = -1;
  if (r.get_choice("memory_measure", measure, {"allocated", "reserved", "device"}, false)) {
    if (!m.memory_gb)
      return Status::Error(where + " measured: memory_measure '" +
                           std::string(measure == 0   ? "allocated"
                                       : measure == 1 ? "reserved"
                                                      : "device") +
                           "' given without memory_gb");
    m.memory_measure = static_cast<PublishedMeasurement::MemoryMeasure>(measure);
  }
  // Restatements of tflops_per_gpu (over the peak, times the GPUs).
  r.accept("pct_of_peak");
  r.accept("aggregate_pflops");
  TRAINPLAN_RETURN_IF_ERROR(r.finish(true));
  collect_ignored(j, r, "measured.", run.ignored_fields);
  return Status::Ok();
}

// The largest device memory of any stage, by the cost model.
double peak_stage_bytes(const ModelSpec& m, const Plan& p) {
  double peak = 0;
  for (std::int64_t stage = 0; stage < p.pp; ++stage)
    peak = std::max(peak, memory_on_stage(m, p, stage).device_total());
  return peak;
}

// The largest ZeRO stage a framework offers without a flag the source would name. Megatron-LM,
// NeMo and Megatron-Bridge shard with Megatron-Core's distributed optimizer, which distributes
// the optimizer states and fp32 main weights but "[no] distribute model gradients, [no]
// distribute model parameters" (Megatron Core User Guide, "Distributed Optimizer"); gradients
// and weights are sharded only by FSDP, a separate option those sources list (Megatron-Bridge's
// performance summary has an FSDP column). Other frameworks go up to ZeRO-3.
int largest_unnamed_zero_stage(std::string_view framework) {
  return framework == "megatron" || framework == "nemo" ? 1 : 3;
}

// A run that really ran fit its GPUs. Where the source does not give the ZeRO stage, take the
// smallest with which it fits the device's memory (a team does not shard what fits unsharded),
// among the stages its framework offers, and say so; if none fits, the largest of those, said
// likewise (then our memory count is above what the run used).
void choose_zero_stage(PublishedRun& run) {
  Plan& p = run.plan;
  const double capacity = run.cluster.gpu.hbm_bytes;
  const int largest = largest_unnamed_zero_stage(run.family.framework);
  std::string tried;
  for (int z = 0; z <= largest; ++z) {
    p.zero_stage = z;
    if (!validate_plan(p).ok() || !check_plan_fits_model(p, run.model).ok()) continue;
    const double need = peak_stage_bytes(run.model, p);
    if (need <= capacity) {
      run.assumptions.push_back("parallel.zero_stage: " + std::to_string(z) +
                                " (not given; the smallest stage with which the run fits " +
                                format_number(capacity / kGB) + " GB" +
                                (tried.empty() ? "" : ": " + tried) + ")");
      return;
    }
    tried += (tried.empty() ? "" : ", ") + std::string("stage ") + std::to_string(z) +
             " needs " + format_number(need / kGB) + " GB";
  }
  p.zero_stage = largest;
  const std::string why =
      largest == 3 ? "" : "; " + run.family.framework +
                              " shards no gradients or weights without FSDP, which the source "
                              "does not name";
  run.assumptions.push_back("parallel.zero_stage: " + std::to_string(largest) +
                            " (not given; no stage fits " + format_number(capacity / kGB) +
                            " GB by our count: " + tried + why + ")");
}

// How the entry's context parallelism exchanged keys and values (Plan::cp_comm): as the entry
// names it from its source, else its framework's default, said under `assumed:`. Megatron-LM,
// NeMo and Megatron-Bridge run Transformer Engine's ring unless cp_comm_type says otherwise
// (TEDotProductAttention passes cp_comm_type "p2p" when none is set, Megatron-LM 91a8a4c8dc,
// 2024-10-21; before it TE had only the ring, AttnFuncWithCP, TE 1.4-1.9); torchtitan calls
// PyTorch's context_parallel with its rotate method option, "allgather" by default
// (experimental.context_parallel_rotate_method, torchtitan c97876e7d 2024-12-11). Others are not
// assumed: the plan's all-gather stands, said likewise.
Status apply_cp_comm(PublishedRun& run, int cp_comm, const std::string& where) {
  Plan& p = run.plan;
  if (cp_comm >= 0) {
    if (p.cp == 1)
      return Status::Error(where + ": cp_comm \"" +
                               std::string(to_string(static_cast<CpComm>(cp_comm))) +
                               "\" needs context parallelism, the entry has cp 1",
                           ExitCode::kInvalidInput);
    p.cp_comm = static_cast<CpComm>(cp_comm);
    return Status::Ok();
  }
  if (p.cp == 1) return Status::Ok();
  const std::string& f = run.family.framework;
  std::string why;
  if (f == "megatron" || f == "nemo") {
    p.cp_comm = CpComm::kP2p;
    why = "Transformer Engine's ring, Megatron-Core's cp_comm_type default";
  } else if (f == "torchtitan") {
    p.cp_comm = CpComm::kTorchAllGather;
    why = "PyTorch's context_parallel with torchtitan's default rotate method, allgather";
  } else {
    why = "no framework default known for " + (f.empty() ? std::string("this entry") : f);
  }
  run.assumptions.push_back("cp_comm: " + std::string(to_string(p.cp_comm)) + " (not given; " +
                            why + ")");
  return Status::Ok();
}

// An interleaved schedule without its stages per rank: torchtitan cuts the model into 2 stages
// per rank for every multi-stage schedule when no split points are given (torchtitan's
// generate_split_points: "Multi-stage schedules support more than 2 stages per rank, but this
// is the default if no pipeline split is specified"). Other frameworks' defaults are not
// assumed: validate_plan then names the missing virtual stages.
void apply_schedule_defaults(PublishedRun& run) {
  Plan& p = run.plan;
  if (run.family.framework != "torchtitan" || p.schedule != Schedule::kInterleaved ||
      p.virtual_stages != 1)
    return;
  p.virtual_stages = 2;
  run.assumptions.push_back(
      "parallel.vp: 2 (not given; torchtitan's default stages per rank for an interleaved "
      "schedule without split points)");
}

// torchtitan's "selective" activation checkpointing is one of two policies
// (activation_checkpoint.selective_ac_option): "op", the op-level policy (Recompute::kSelectiveOp),
// which torchtitan's Llama train configs set (train_configs/llama3_*.toml), or an integer N,
// every N-th transformer block checkpointed whole (its config_manager's default "2"). The layer
// policy is taken as full recompute of ceil(chunk layers / N) layers of each model chunk.
Status apply_selective_ac_option(PublishedRun& run, const std::string& where) {
  Plan& p = run.plan;
  const std::string& option = run.selective_ac_option;
  if (p.recompute != Recompute::kSelective) {
    if (option.empty()) return Status::Ok();
    return Status::Error(where + " parallel: selective_ac_option \"" + option +
                             "\" needs recompute \"selective\", the entry has \"" +
                             std::string(to_string(p.recompute)) + "\"",
                         ExitCode::kInvalidInput);
  }
  if (option.empty()) {
    if (run.family.framework != "torchtitan") return Status::Ok();
    p.recompute = Recompute::kSelectiveOp;
    run.assumptions.push_back(
        "parallel.recompute: selective-op (torchtitan's selective checkpointing without its "
        "selective_ac_option: \"op\", as its Llama train configs set it)");
    return Status::Ok();
  }
  if (option == "op") {
    p.recompute = Recompute::kSelectiveOp;
    return Status::Ok();
  }
  std::int64_t every = 0;
  const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
  if (ec != std::errc() || end != option.data() + option.size() || every < 1)
    return Status::Error(where + " parallel: selective_ac_option \"" + option +
                             "\" is neither \"op\" nor a layer frequency >= 1",
                         ExitCode::kInvalidInput);
  const std::int64_t chunk_layers =
      (run.model.num_layers + p.num_chunks() - 1) / p.num_chunks();
  p.recompute = Recompute::kFull;
  p.recompute_num_layers = (chunk_layers + every - 1) / every;
  run.assumptions.push_back("parallel.recompute: full on " +
                            std::to_string(p.recompute_num_layers) + " of each chunk's " +
                            std::to_string(chunk_layers) + " layers (torchtitan's layer policy, "
                            "every " + option + "-th block checkpointed whole)");
  return Status::Ok();
}

// DeepSpeed with ZeRO 2 or 3 keeps the gradients in the model's precision and reduces them in it:
// its engine's get_data_types takes grad_accum_dtype = the model's dtype whenever ZeRO is on
// (fp32 only for bf16 without ZeRO), and communication_data_type is fp16 or bf16 with the model
// (microsoft/DeepSpeed v0.11.1, e9503fe40ee1, deepspeed/runtime/engine.py lines 798-809 and
// 859-874); ZeRO 2 and 3 partition those 16-bit gradients, fp32 appears only as the optimizer
// step's copy of a rank's partition. (ZeRO-1 is left to the general rule: which bf16 optimizer
// ran there changed between DeepSpeed versions, BF16_Optimizer in BLOOM's 0.6.) Applied where the
// entry names the ZeRO stage and not the gradient precision.
void apply_deepspeed_grad_precision(PublishedRun& run) {
  Plan& p = run.plan;
  const std::string& f = run.family.framework;
  if ((f != "deepspeed" && f != "megatron-deepspeed") || !run.zero_stage_given ||
      p.zero_stage < 2 || p.grad_precision == GradPrecision::kCompute)
    return;
  p.grad_precision = GradPrecision::kCompute;
  run.assumptions.push_back("grad_precision: compute (not given; DeepSpeed's ZeRO " +
                            std::to_string(p.zero_stage) +
                            " keeps and reduces gradients in the model's precision)");
}

// What a framework does by default that our plan names otherwise; each rule says so under
// `assumed:`.
// torchtitan with pipeline parallelism keeps FSDP2's gathered weights from a stage's first
// forward to its last backward (its reshard_after_forward_policy "default" is `not pp_enabled`,
// torchtitan/models/llama3/infra/parallelize.py: "to avoid per-microbatch all-gathers"), and
// torch.distributed.pipelining syncs FSDP gradients only on a stage's last backward
// (backward_maybe_with_nosync: set_requires_gradient_sync(last_backward), torch/distributed/
// pipelining/stage.py). One all-gather and one reduce-scatter per step, the weights and
// gradients of the stage resident, optimizer states and fp32 master weights sharded: the
// pattern of ZeRO-1 (Megatron's distributed optimizer), which is how the plan takes it.
void apply_framework_defaults(PublishedRun& run) {
  Plan& p = run.plan;
  if (run.family.framework == "torchtitan" && p.pp > 1 && p.zero_stage == 3) {
    p.zero_stage = 1;
    run.assumptions.push_back(
        "parallel.zero_stage: 1 for torchtitan's FSDP with pipeline parallelism "
        "(reshard_after_forward off by default when pp > 1, gradients reduced on the last "
        "micro-batch only: weights gathered and gradients reduce-scattered once per step)");
  }
}

}  // namespace

Result<PublishedRun> published_run_from_json(const Json& entry, std::string_view where_in) {
  PublishedRun run;
  std::string where(where_in);
  JsonReader r(entry, where);
  r.get_string("id", run.id, true);
  if (!run.id.empty()) where += " ('" + run.id + "')";
  r.get_string("source", run.source, false);
  const Json* family = r.get_object("family", false);
  const Json* model = r.get_object("model", true);
  const Json* hardware = r.get_object("hardware", true);
  const Json* parallel = r.get_object("parallel", true);
  const Json* measured = r.get_object("measured", false);
  int precision = -1;
  r.get_choice("precision", precision, {"bf16", "fp16", "fp32", "fp8"}, false);
  int attention = -1, attention_kernel = -1;
  r.get_choice("attention", attention, {"fused", "unfused"}, false);
  r.get_choice("attention_kernel", attention_kernel,
               {"generic", "flash2", "cudnn", "flash3", "flash1"}, false);
  int cross_entropy = -1;
  r.get_choice("cross_entropy", cross_entropy, {"fused", "unfused", "cast"}, false);
  int grads = -1;
  r.get_choice("grad_precision", grads, {"compute", "fp32"}, false);
  int zero3_gather = -1;
  r.get_choice("zero3_gather", zero3_gather, {"flat", "per-tensor"}, false);
  int zero1_collectives = -1;
  r.get_choice("zero1_collectives", zero1_collectives, {"flat", "per-rank", "all-reduce"},
               false);
  int grad_accumulation_pass = -1;
  r.get_choice("grad_accumulation_pass", grad_accumulation_pass, kGradAccumulationPassNames,
               false);
  int elementwise = -1;
  r.get_choice("elementwise", elementwise, {"fused", "eager", "eager-swiglu"}, false);
  bool ddp_bucket_copy = false;
  r.get_bool("ddp_bucket_copy", ddp_bucket_copy, false);
  bool pipeline_scatter_gather = false;
  r.get_bool("pipeline_scatter_gather", pipeline_scatter_gather, false);
  int zero3_recompute_gather = -1;
  r.get_choice("zero3_recompute_gather", zero3_recompute_gather, {"again", "kept"}, false);
  int zero3_backward_prefetch = -1;
  r.get_choice("zero3_backward_prefetch", zero3_backward_prefetch,
               {"after-reduce", "before-reduce"}, false);
  int interleaved_warmup = -1;
  r.get_choice("interleaved_warmup", interleaved_warmup, {"megatron", "torch"}, false);
  int tp_comm_overlap_impl = -1;
  r.get_choice("tp_comm_overlap_impl", tp_comm_overlap_impl, {"te-userbuffers", "torch-async"},
               false);
  int zero3_copies = -1;
  r.get_choice("zero3_copies", zero3_copies, {"none", "flat-param", "per-param"}, false);
  int fp8_scaling = -1;
  r.get_choice("fp8_scaling", fp8_scaling, {"current", "delayed", "block", "nvfp4"}, false);
  bool fp8_weight_cache = false;
  r.get_bool("fp8_weight_cache", fp8_weight_cache, false);
  bool fp8_attention = false;
  r.get_bool("fp8_attention", fp8_attention, false);
  bool fp8_all_gather = false;
  r.get_bool("fp8_all_gather", fp8_all_gather, false);
  bool cp_kv_expanded = false;
  r.get_bool("cp_kv_expanded", cp_kv_expanded, false);
  int cp_comm = -1;
  r.get_choice("cp_comm", cp_comm,
               {"all-gather", "p2p", "a2a", "torch-allgather", "torch-alltoall"}, false);
  int module_loading = -1;
  r.get_choice("cuda_module_loading", module_loading, {"lazy", "eager"}, false);
  int allocator = -1;
  r.get_choice("allocator", allocator,
               {kDeviceAllocatorKeys[0], kDeviceAllocatorKeys[1], kDeviceAllocatorKeys[2]}, false);
  r.accept("confidence");
  std::string notes;
  if (const auto it = entry.find("notes"); entry.is_object() && it != entry.end()) {
    r.accept("notes");
    if (it->is_array()) {
      for (const Json& n : *it)
        if (n.is_string()) notes += n.get<std::string>() + "\n";
    } else if (it->is_string()) {
      notes = it->get<std::string>();
    }
  }
  TRAINPLAN_RETURN_IF_ERROR(r.finish(true));
  collect_ignored(entry, r, "", run.ignored_fields);

  TRAINPLAN_RETURN_IF_ERROR(read_family(family, where, run));
  TRAINPLAN_RETURN_IF_ERROR(read_model(*model, where, run));
  TRAINPLAN_RETURN_IF_ERROR(read_hardware(*hardware, where, run));
  TRAINPLAN_RETURN_IF_ERROR(read_parallel(*parallel, where, run.cluster.total_gpus(), run));
  if (measured != nullptr) TRAINPLAN_RETURN_IF_ERROR(read_measured(*measured, where, run));
  if (module_loading == 1) run.cuda_module_loading = CudaModuleLoading::kEager;
  if (allocator >= 0) run.allocator = static_cast<DeviceAllocator>(allocator);

  Plan& p = run.plan;
  if (precision < 0) run.assumptions.push_back("precision: bf16 (not given)");
  if (precision == 3) {
    // FP8 training keeps bf16 weights and activations and runs the linear GEMMs in FP8.
    p.fp8 = true;
    precision = 0;
    run.assumptions.push_back("precision fp8: FP8 linear-layer GEMMs, bf16 elsewhere "
                              "(Transformer Engine, torchao float8)");
  }
  p.precision = precision < 0 ? Precision::kBf16 : static_cast<Precision>(precision);
  // bf16 gradients are accumulated and reduced in fp32 by Megatron-LM (forced with bf16),
  // DeepSpeed's BF16_Optimizer and FSDP's usual reduce_dtype; fp16 runs of the Megatron-LM
  // 2021 era reduced in fp16. DeepSpeed's ZeRO 2 and 3 are the exception
  // (apply_deepspeed_grad_precision, once the ZeRO stage is known).
  if (grads >= 0) p.grad_precision = static_cast<GradPrecision>(grads);
  else p.grad_precision = p.precision == Precision::kBf16 ? GradPrecision::kFp32
                                                          : GradPrecision::kCompute;
  const std::string text = lower(run.source + "\n" + notes);
  if (attention >= 0) {
    p.attention = static_cast<AttentionImpl>(attention);
  } else if (text.find("flashattention") != std::string::npos ||
             text.find("flash attention") != std::string::npos ||
             text.find("flash-attn") != std::string::npos) {
    p.attention = AttentionImpl::kFused;
    run.assumptions.push_back("attention: fused (the notes name FlashAttention)");
  } else {
    p.attention = dated_before_2023(text) ? AttentionImpl::kUnfused : AttentionImpl::kFused;
    run.assumptions.push_back(std::string("attention: ") +
                              (p.attention == AttentionImpl::kFused
                                   ? "fused (source not dated before 2023)"
                                   : "unfused (source dated before FlashAttention entered "
                                     "Megatron-LM and PyTorch, early 2023)"));
  }
  // The attention kernel is read when the entry names it (where its source pins the kernel
  // whose rates are published), and otherwise left generic: no framework default is assumed
  // (bench/results/published-2026-11-25b/NOTES.md, "Attention kernel rates").
  if (attention_kernel >= 0) p.attention_kernel = static_cast<AttentionKernel>(attention_kernel);
  if (cross_entropy >= 0) p.cross_entropy = static_cast<CrossEntropy>(cross_entropy);
  // How ZeRO-3 gathered, where the entry names its framework version's way (Plan::zero3_gather).
  if (zero3_gather >= 0) p.zero3_gather = static_cast<ZeroGather>(zero3_gather);
  // How ZeRO-1 reduces and gathers, where the entry names its framework's way
  // (Plan::zero1_collectives).
  if (zero1_collectives >= 0) p.zero1_collectives = static_cast<ZeroCollectives>(zero1_collectives);
  // Eager PyTorch's unfused kernels, where the entry's source states compile was off.
  if (elementwise >= 0) p.elementwise = static_cast<Elementwise>(elementwise);
  // PyTorch DDP's bucket copy of the gradients, where the entry names its framework's way.
  p.ddp_bucket_copy = ddp_bucket_copy;
  // Megatron-LM's pipeline scatter/gather, where the entry's source ran Megatron-LM code that had
  // it on (Plan::pipeline_scatter_gather).
  p.pipeline_scatter_gather = pipeline_scatter_gather;
  // A separate pass adding each micro-batch's 16-bit gradients into fp32, where the entry names
  // its framework's optimizer doing so (Plan::grad_accumulation_pass).
  if (grad_accumulation_pass >= 0)
    p.grad_accumulation_pass = static_cast<GradAccumulationPass>(grad_accumulation_pass);
  // FSDP around the checkpoint wrapper: one gather serves a recomputed layer's recompute and
  // backward, where the entry names it from its framework's code (Plan::zero3_recompute_gather).
  if (zero3_recompute_gather >= 0)
    p.zero3_recompute_gather = static_cast<ZeroRecomputeGather>(zero3_recompute_gather);
  // FSDP2's backward prefetch, issued before the block's reduce-scatter, where the entry names
  // FSDP2 from its framework's code (Plan::zero3_backward_prefetch).
  if (zero3_backward_prefetch >= 0)
    p.zero3_backward_prefetch = static_cast<ZeroBackwardPrefetch>(zero3_backward_prefetch);
  // torch.distributed.pipelining's interleaved warm-up, where the entry names its framework's
  // schedule from its code (Plan::interleaved_warmup).
  if (interleaved_warmup >= 0)
    p.interleaved_warmup = static_cast<InterleavedWarmup>(interleaved_warmup);
  // PyTorch FSDP's copies around its collectives, where the entry names its FSDP version from
  // its framework's code (Plan::zero3_copies).
  // PyTorch's async TP where the entry's source names it (Plan::tp_comm_overlap_impl).
  if (tp_comm_overlap_impl >= 0)
    p.tp_comm_overlap_impl = static_cast<TpOverlapImpl>(tp_comm_overlap_impl);
  if (zero3_copies >= 0) p.zero3_copies = static_cast<ZeroCopies>(zero3_copies);
  // The FP8 recipe, where the entry names it from its source's recipe and framework version;
  // otherwise current scaling with a cast per micro-batch (the plan's default).
  if (fp8_scaling >= 0) p.fp8_scaling = static_cast<Fp8Scaling>(fp8_scaling);
  p.fp8_weight_cache = fp8_weight_cache;
  // FP8 dot-product attention, where the entry's source's config turns it on (FP8_DPA).
  p.fp8_attention = fp8_attention;
  // FSDP's FP8 weight all-gather, where the entry's source states it (Plan::fp8_all_gather).
  p.fp8_all_gather = fp8_all_gather;
  if (p.fp8 && fp8_scaling < 0)
    run.assumptions.push_back("fp8_scaling: current (not given)");
  const auto sp = parallel->find("sequence_parallel");
  if ((sp == parallel->end() || sp->is_null()) && p.tp > 1) {
    // Sequence parallelism (Korthikanti et al., arXiv:2205.05198) is what TP runs published
    // from 2023 on pair TP with (Megatron-Core and NeMo recipes, torchtitan's TP plan,
    // MegaScale); earlier runs had none.
    const bool before_2023 = dated_before_2023(text);
    p.sequence_parallel = !before_2023 && !p.partition_activations;
    const char* why = p.sequence_parallel
                          ? "true (not given; source not dated before 2023, when TP runs pair "
                            "it with SP)"
                      : before_2023 ? "false (not given; source dated before 2023)"
                                    : "false (not given; partition_activations splits the "
                                      "checkpoints over TP instead)";
    run.assumptions.push_back(std::string("parallel.sequence_parallel: ") + why);
  }
  if (!parallel->contains("overlap_grad_reduce") &&
      text.find("ddp impl local") != std::string::npos) {
    run.options.overlap_grad_reduce = false;
    run.assumptions.push_back("gradient all-reduce after the pipeline flush (\"DDP impl local\")");
  }
  TRAINPLAN_RETURN_IF_ERROR(apply_cp_comm(run, cp_comm, where));
  // K and V repeated to the query heads before the attention the ring wraps, where the entry
  // reads it from its framework's model code (Plan::cp_kv_expanded).
  p.cp_kv_expanded = cp_kv_expanded;
  apply_schedule_defaults(run);
  TRAINPLAN_RETURN_IF_ERROR(apply_selective_ac_option(run, where));
  if (p.layers_per_stage.empty() && run.model.num_layers % p.num_chunks() != 0 &&
      p.num_chunks() <= run.model.num_layers) {
    p.layers_per_stage = balanced_chunk_layers(run.model.num_layers, p.num_chunks());
    std::string split;
    for (std::int64_t n : p.layers_per_stage) split += (split.empty() ? "" : ",") + std::to_string(n);
    run.assumptions.push_back("layers per model chunk: " + split + " (" +
                              std::to_string(run.model.num_layers) +
                              " layers do not divide evenly; the end stages take fewer)");
  }
  if (!run.zero_stage_given) choose_zero_stage(run);
  apply_framework_defaults(run);
  if (grads < 0) apply_deepspeed_grad_precision(run);
  if (Status st = validate_plan(p); !st.ok())
    return Status::Error(where + " parallel: " + st.message(), st.code());
  if (Status st = check_plan_fits_model(p, run.model); !st.ok())
    return Status::Error(where + ": " + st.message(), st.code());
  if (auto rates = plan_rates(p, run.cluster.gpu, std::nullopt); !rates.ok())
    return Status::Error(where + ": " + rates.status().message(), rates.status().code());
  using Measure = PublishedMeasurement::MemoryMeasure;
  if (run.measured.memory_gb && run.measured.memory_measure != Measure::kAllocated) {
    const char* name = allocator_description(run.allocator);
    char line[320];
    if (allocator_reserve_modelled(run.allocator))
      std::snprintf(line, sizeof line,
                    "memory: reserved = the allocated peak / %.2f, %s%s (GMLake's average "
                    "fragmentation)",
                    1.0 - allocator_fragmentation(run.allocator), name,
                    allocator < 0 ? " (allocator not given)" : "");
    else
      std::snprintf(line, sizeof line,
                    "memory: reserved taken as the allocated peak: %s has no published "
                    "fragmentation figure, its reserve is not modelled",
                    name);
    run.assumptions.push_back(line);
  }
  if (run.measured.memory_gb && run.measured.memory_measure == Measure::kDevice) {
    const DeviceRuntimeBytes rt = device_runtime_bytes(p, run.cuda_module_loading);
    char line[256];
    std::snprintf(line, sizeof line,
                  "memory: device memory in use = the reserve + %.2f GB of CUDA context "
                  "(%s module loading%s) + %.2f GB of NCCL buffers",
                  rt.cuda_context_bytes / 1e9,
                  run.cuda_module_loading == CudaModuleLoading::kLazy ? "lazy" : "eager",
                  module_loading < 0 ? ", not given" : "", rt.nccl_bytes / 1e9);
    run.assumptions.push_back(line);
  }
  return run;
}

std::vector<PublishedMetric> compare_published_run(const PublishedRun& run,
                                                   const StepReport& predicted) {
  std::vector<PublishedMetric> out;
  const PublishedMeasurement& m = run.measured;
  if (m.iteration_time_s)
    out.push_back({"iteration_time_s", *m.iteration_time_s, predicted.step_time_s});
  if (m.tflops_per_gpu)
    out.push_back({"tflops_per_gpu", *m.tflops_per_gpu, predicted.hardware_tflops_per_gpu});
  if (m.mfu) out.push_back({"mfu", *m.mfu, predicted.mfu});
  if (m.tokens_per_s) out.push_back({"tokens_per_s", *m.tokens_per_s, predicted.tokens_per_s});
  if (m.memory_gb) {
    double peak = 0;
    for (const RankStep& r : predicted.ranks) peak = std::max(peak, r.peak_memory_bytes);
    if (m.memory_measure != PublishedMeasurement::MemoryMeasure::kAllocated)
      peak = reserved_bytes(peak, run.allocator);
    if (m.memory_measure == PublishedMeasurement::MemoryMeasure::kDevice)
      peak += device_runtime_bytes(run.plan, run.cuda_module_loading).total();
    out.push_back({"memory_gb", *m.memory_gb, peak / 1e9});
  }
  return out;
}

std::optional<PublishedMetric> headline_metric(const std::vector<PublishedMetric>& metrics) {
  for (const PublishedMetric& m : metrics)
    if (m.name != "memory_gb") return m;
  return std::nullopt;
}

RunErrors run_errors(const std::vector<PublishedMetric>& metrics) {
  RunErrors e;
  if (auto h = headline_metric(metrics)) e.throughput = h->throughput_error();
  for (const PublishedMetric& m : metrics)
    if (m.name == "memory_gb") e.memory = m.error();
  return e;
}

}  // namespace trainplan
