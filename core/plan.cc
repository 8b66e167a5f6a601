// Plan loading and validation. Tested by tests/core/plan_test.cc.
#include "core/plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace trainplan {

std::string_view to_string(Schedule s) {
  switch (s) {
    case Schedule::kNaive: return "naive";
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
    case Schedule::kZbV: return "zb-v";
    case Schedule::kDualPipe: return "dualpipe";
  }
  return "?";
}
std::string_view to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
    case Recompute::kSelectiveOp: return "selective-op";
  }
  return "?";
}
std::string_view to_string(Optimizer o) {
  switch (o) {
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kSgdMomentum: return "sgd-momentum";
  }
  return "?";
}
std::string_view to_string(Offload o) {
  switch (o) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kOptimizerParams: return "optimizer+params";
  }
  return "?";
}
std::string_view to_string(OffloadDevice o) { return o == OffloadDevice::kCpu ? "cpu" : "nvme"; }
std::string_view to_string(AttentionImpl a) {
  return a == AttentionImpl::kFused ? "fused" : "unfused";
}
std::string_view to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kGeneric: return "generic";
    case AttentionKernel::kFlash2: return "flash2";
    case AttentionKernel::kCudnn: return "cudnn";
    case AttentionKernel::kFlash3: return "flash3";
    case AttentionKernel::kFlash1: return "flash1";
  }
  return "?";
}
std::string_view to_string(CrossEntropy c) {
  switch (c) {
    case CrossEntropy::kFused: return "fused";
    case CrossEntropy::kUnfused: return "unfused";
    case CrossEntropy::kCast: return "cast";
  }
  return "?";
}
std::string_view to_string(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::kCurrent: return "current";
    case Fp8Scaling::kDelayed: return "delayed";
    case Fp8Scaling::kBlock: return "block";
    case Fp8Scaling::kNvfp4: return "nvfp4";
  }
  return "?";
}
std::string_view to_string(CpComm c) {
  switch (c) {
    case CpComm::kAllGather: return "all-gather";
    case CpComm::kP2p: return "p2p";
    case CpComm::kA2a: return "a2a";
    case CpComm::kTorchAllGather: return "torch-allgather";
    case CpComm::kTorchAllToAll: return "torch-alltoall";
  }
  return "?";
}
std::string_view to_string(ZeroGather g) {
  return g == ZeroGather::kFlat ? "flat" : "per-tensor";
}
std::string_view to_string(ZeroCollectives c) {
  switch (c) {
    case ZeroCollectives::kFlat: return "flat";
    case ZeroCollectives::kPerRank: return "per-rank";
    case ZeroCollectives::kAllReduce: return "all-reduce";
  }
  return "?";
}
std::string_view to_string(ParamGather g) {
  switch (g) {
    case ParamGather::kAfterStep: return "after-step";
    case ParamGather::kNextForward: return "next-forward";
    case ParamGather::kAligned: return "aligned";
  }
  return "after-step";
}
std::string_view to_string(GradAccumulationPass g) {
  switch (g) {
    case GradAccumulationPass::kNone: return "none";
    case GradAccumulationPass::kCastAdd: return "cast-add";
    case GradAccumulationPass::kAdd: return "add";
    case GradAccumulationPass::kAutograd: return "autograd";
    case GradAccumulationPass::kShardAdd: return "shard-add";
  }
  return "?";
}
std::string_view to_string(Elementwise e) {
  switch (e) {
    case Elementwise::kFused: return "fused";
    case Elementwise::kEager: return "eager";
    case Elementwise::kEagerSwiglu: return "eager-swiglu";
  }
  return "?";
}
std::string_view to_string(ZeroRecomputeGather g) {
  return g == ZeroRecomputeGather::kAgain ? "again" : "kept";
}
std::string_view to_string(ZeroBackwardPrefetch p) {
  return p == ZeroBackwardPrefetch::kAfterReduce ? "after-reduce" : "before-reduce";
}
std::string_view to_string(ZeroCopies c) {
  switch (c) {
    case ZeroCopies::kNone: return "none";
    case ZeroCopies::kFlatParam: return "flat-param";
    case ZeroCopies::kPerParam: return "per-param";
  }
  return "?";
}
std::string_view to_string(InterleavedWarmup w) {
  return w == InterleavedWarmup::kMegatron ? "megatron" : "torch";
}
std::string_view to_string(TpOverlapImpl i) {
  return i == TpOverlapImpl::kTeUserbuffers ? "te-userbuffers" : "torch-async";
}
std::string_view to_string(MoeDispatcher d) {
  return d == MoeDispatcher::kAllToAll ? "alltoall" : "deepep";
}
std::string_view to_string(ExpertLayout l) {
  return l == ExpertLayout::kCarved ? "carved" : "folded";
}
std::string_view to_string(GradPrecision g) {
  return g == GradPrecision::kCompute ? "compute" : "fp32";
}

Result<Plan> plan_from_json(const Json& j, std::string_view source) {
  Plan p;
  JsonReader r(j, "plan '" + std::string(source) + "'");
  using PL = PlanLimits;
  r.accept("schema");
  r.accept("notes");
  r.get_int("tp", p.tp, 1, PL::kMaxDegree, true);
  r.get_int("cp", p.cp, 1, PL::kMaxDegree, false);
  int c = 0;
  if (r.get_choice("cp_comm", c, {"all-gather", "p2p", "a2a", "torch-allgather", "torch-alltoall"},
                   false))
    p.cp_comm = static_cast<CpComm>(c);
  r.get_bool("cp_kv_expanded", p.cp_kv_expanded, false);
  r.get_int("pp", p.pp, 1, PL::kMaxDegree, true);
  r.get_int("dp", p.dp, 1, PL::kMaxDegree, true);
  r.get_int("ep", p.ep, 1, PL::kMaxDegree, false);
  c = 0;
  if (r.get_choice("expert_layout", c, {"carved", "folded"}, false))
    p.expert_layout = static_cast<ExpertLayout>(c);
  r.get_int("expert_tp", p.expert_tp, 1, PL::kMaxDegree, false);
  std::int64_t zero = 0;
  r.get_int("zero_stage", zero, 0, 3, false);
  p.zero_stage = static_cast<int>(zero);
  r.get_int("zero_shard_size", p.zero_shard_size, 0, PL::kMaxDegree, false);
  r.get_int("micro_batch_size", p.micro_batch_size, 1, PL::kMaxBatch, true);
  r.get_int("global_batch_size", p.global_batch_size, 1, PL::kMaxBatch, true);
  if (r.get_choice("schedule", c,
                   {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe"}, false))
    p.schedule = static_cast<Schedule>(c);
  r.get_int("virtual_stages", p.virtual_stages, 1, PL::kMaxVirtualStages, false);
  if (r.get_choice("recompute", c, {"none", "selective", "full", "selective-op"}, false))
    p.recompute = static_cast<Recompute>(c);
  r.get_int("recompute_num_layers", p.recompute_num_layers, 0, ModelLimits::kMaxLayers, false);
  r.get_bool("partition_activations", p.partition_activations, false);
  r.get_bool("offload_checkpoints", p.offload_checkpoints, false);
  r.get_bool("sequence_parallel", p.sequence_parallel, false);
  if (r.get_choice("precision", c, {"bf16", "fp16", "fp32"}, false))
    p.precision = static_cast<Precision>(c);
  if (r.get_choice("optimizer", c, {"adamw", "sgd", "sgd-momentum"}, false))
    p.optimizer = static_cast<Optimizer>(c);
  if (r.get_choice("offload", c, {"none", "optimizer", "optimizer+params"}, false))
    p.offload = static_cast<Offload>(c);
  if (r.get_choice("offload_device", c, {"cpu", "nvme"}, false))
    p.offload_device = static_cast<OffloadDevice>(c);
  if (r.get_choice("attention", c, {"fused", "unfused"}, false))
    p.attention = static_cast<AttentionImpl>(c);
  if (r.get_choice("attention_kernel", c, {"generic", "flash2", "cudnn", "flash3", "flash1"},
                   false))
    p.attention_kernel = static_cast<AttentionKernel>(c);
  if (r.get_choice("cross_entropy", c, {"fused", "unfused", "cast"}, false))
    p.cross_entropy = static_cast<CrossEntropy>(c);
  if (r.get_choice("grad_precision", c, {"compute", "fp32"}, false))
    p.grad_precision = static_cast<GradPrecision>(c);
  if (r.get_choice("zero3_gather", c, {"flat", "per-tensor"}, false))
    p.zero3_gather = static_cast<ZeroGather>(c);
  if (r.get_choice("zero1_collectives", c, {"flat", "per-rank", "all-reduce"}, false))
    p.zero1_collectives = static_cast<ZeroCollectives>(c);
  if (r.get_choice("param_gather", c, {"after-step", "next-forward", "aligned"}, false))
    p.param_gather = static_cast<ParamGather>(c);
  if (r.get_choice("elementwise", c, {"fused", "eager", "eager-swiglu"}, false))
    p.elementwise = static_cast<Elementwise>(c);
  r.get_bool("ddp_bucket_copy", p.ddp_bucket_copy, false);
  if (r.get_choice("grad_accumulation_pass", c, kGradAccumulationPassNames, false))
    p.grad_accumulation_pass = static_cast<GradAccumulationPass>(c);
  r.get_bool("pipeline_scatter_gather", p.pipeline_scatter_gather, false);
  if (r.get_choice("zero3_recompute_gather", c, {"again", "kept"}, false))
    p.zero3_recompute_gather = static_cast<ZeroRecomputeGather>(c);
  if (r.get_choice("zero3_backward_prefetch", c, {"after-reduce", "before-reduce"}, false))
    p.zero3_backward_prefetch = static_cast<ZeroBackwardPrefetch>(c);
  if (r.get_choice("interleaved_warmup", c, {"megatron", "torch"}, false))
    p.interleaved_warmup = static_cast<InterleavedWarmup>(c);
  if (r.get_choice("zero3_copies", c, {"none", "flat-param", "per-param"}, false))
    p.zero3_copies = static_cast<ZeroCopies>(c);
  r.get_bool("fp8", p.fp8, false);
  if (r.get_choice("fp8_scaling", c, {"current", "delayed", "block", "nvfp4"}, false))
    p.fp8_scaling = static_cast<Fp8Scaling>(c);
  r.get_bool("fp8_weight_cache", p.fp8_weight_cache, false);
  r.get_bool("fp8_all_gather", p.fp8_all_gather, false);
  r.get_bool("fp8_attention", p.fp8_attention, false);
  r.get_bool("ep_overlap", p.ep_overlap, false);
  if (r.get_choice("moe_dispatcher", c, {"alltoall", "deepep"}, false))
    p.moe_dispatcher = static_cast<MoeDispatcher>(c);
  r.get_bool("tp_comm_overlap", p.tp_comm_overlap, false);
  if (r.get_choice("tp_comm_overlap_impl", c, {"te-userbuffers", "torch-async"}, false))
    p.tp_comm_overlap_impl = static_cast<TpOverlapImpl>(c);
  r.get_bool("defer_embedding_wgrad", p.defer_embedding_wgrad, false);
  r.get_int("wgrad_deferral_limit", p.wgrad_deferral_limit, 0, PL::kMaxBatch, false);
  r.get_int("dp_bucket_elements", p.dp_bucket_elements, 0, PL::kMaxBucketElements, false);
  r.get_int_list("layers_per_stage", p.layers_per_stage, 1, ModelLimits::kMaxLayers, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  Status st = validate_plan(p);
  if (!st.ok()) return Status::Error(r.where() + ": " + st.message());
  return p;
}

Json plan_to_json(const Plan& p) {
  Json j;
  j["schema"] = "trainplan.plan/1";
  j["tp"] = p.tp;
  // Written only when used, so that plans without context parallelism keep their JSON.
  if (p.cp != 1) j["cp"] = p.cp;
  if (p.cp_comm != CpComm::kAllGather) j["cp_comm"] = std::string(to_string(p.cp_comm));  // as cp
  if (p.cp_kv_expanded) j["cp_kv_expanded"] = true;
  j["pp"] = p.pp;
  j["dp"] = p.dp;
  j["ep"] = p.ep;
  // Written only when set, as cp.
  if (p.expert_layout != ExpertLayout::kCarved)
    j["expert_layout"] = std::string(to_string(p.expert_layout));
  if (p.expert_tp > 0) j["expert_tp"] = p.expert_tp;
  j["zero_stage"] = p.zero_stage;
  if (p.zero_shard_size > 0) j["zero_shard_size"] = p.zero_shard_size;  // as cp
  j["micro_batch_size"] = p.micro_batch_size;
  j["global_batch_size"] = p.global_batch_size;
  j["schedule"] = std::string(to_string(p.schedule));
  j["virtual_stages"] = p.virtual_stages;
  j["recompute"] = std::string(to_string(p.recompute));
  if (p.recompute_num_layers > 0) j["recompute_num_layers"] = p.recompute_num_layers;  // as cp
  if (p.partition_activations) j["partition_activations"] = true;
  if (p.offload_checkpoints) j["offload_checkpoints"] = true;
  j["sequence_parallel"] = p.sequence_parallel;
  j["precision"] = std::string(to_string(p.precision));
  j["optimizer"] = std::string(to_string(p.optimizer));
  j["offload"] = std::string(to_string(p.offload));
  if (p.offload_device != OffloadDevice::kCpu)
    j["offload_device"] = std::string(to_string(p.offload_device));
  j["attention"] = std::string(to_string(p.attention));
  if (p.attention_kernel != AttentionKernel::kGeneric)  // written only when set, as cp
    j["attention_kernel"] = std::string(to_string(p.attention_kernel));
  if (p.cross_entropy != CrossEntropy::kFused)  // written only when set, as cp
    j["cross_entropy"] = std::string(to_string(p.cross_entropy));
  j["grad_precision"] = std::string(to_string(p.grad_precision));
  if (p.zero3_gather != ZeroGather::kFlat)  // written only when set, as cp
    j["zero3_gather"] = std::string(to_string(p.zero3_gather));
  if (p.zero1_collectives != ZeroCollectives::kFlat)  // written only when set, as cp
    j["zero1_collectives"] = std::string(to_string(p.zero1_collectives));
  if (p.param_gather != ParamGather::kAfterStep)  // written only when set, as cp
    j["param_gather"] = std::string(to_string(p.param_gather));
  if (p.dp_bucket_elements != 0) j["dp_bucket_elements"] = p.dp_bucket_elements;  // likewise
  if (p.elementwise != Elementwise::kFused)  // written only when set, as cp
    j["elementwise"] = std::string(to_string(p.elementwise));
  if (p.ddp_bucket_copy) j["ddp_bucket_copy"] = true;  // written only when set, as cp
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone)  // written only when set
    j["grad_accumulation_pass"] = std::string(to_string(p.grad_accumulation_pass));
  if (p.pipeline_scatter_gather) j["pipeline_scatter_gather"] = true;  // written only when set
  if (p.zero3_recompute_gather != ZeroRecomputeGather::kAgain)  // written only when set
    j["zero3_recompute_gather"] = std::string(to_string(p.zero3_recompute_gather));
  if (p.zero3_backward_prefetch != ZeroBackwardPrefetch::kAfterReduce)  // written only when set
    j["zero3_backward_prefetch"] = std::string(to_string(p.zero3_backward_prefetch));
  if (p.interleaved_warmup != InterleavedWarmup::kMegatron)  // written only when set
    j["interleaved_warmup"] = std::string(to_string(p.interleaved_warmup));
  if (p.zero3_copies != ZeroCopies::kNone)  // written only when set
    j["zero3_copies"] = std::string(to_string(p.zero3_copies));
  if (p.fp8) j["fp8"] = true;  // written only when used, as cp
  if (p.fp8_scaling != Fp8Scaling::kCurrent) j["fp8_scaling"] = std::string(to_string(p.fp8_scaling));
  if (p.fp8_weight_cache) j["fp8_weight_cache"] = true;
  if (p.fp8_all_gather) j["fp8_all_gather"] = true;  // written only when used, as cp
  if (p.fp8_attention) j["fp8_attention"] = true;
  if (p.ep_overlap) j["ep_overlap"] = true;
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll)  // written only when set
    j["moe_dispatcher"] = std::string(to_string(p.moe_dispatcher));
  if (p.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (p.tp_comm_overlap_impl != TpOverlapImpl::kTeUserbuffers)  // written only when set
    j["tp_comm_overlap_impl"] = std::string(to_string(p.tp_comm_overlap_impl));
  if (p.defer_embedding_wgrad) j["defer_embedding_wgrad"] = true;
  if (p.wgrad_deferral_limit != 0) j["wgrad_deferral_limit"] = p.wgrad_deferral_limit;
  if (!p.layers_per_stage.empty()) j["layers_per_stage"] = p.layers_per_stage;
  return j;
}

std::string describe(const Plan& p) {
  std::ostringstream os;
  os << "tp=" << p.tp;
  if (p.cp > 1) os << " cp=" << p.cp;
  os << " pp=" << p.pp << " dp=" << p.dp;
  if (p.ep > 1) os << " ep=" << p.ep;
  if (p.expert_layout == ExpertLayout::kFolded) os << " folded etp=" << p.expert_tp_size();
  os << " zero=" << zero_label(p) << " mbs=" << p.micro_batch_size << " " << to_string(p.schedule);
  if (p.schedule == Schedule::kInterleaved) os << "x" << p.virtual_stages;
  os << " recompute=" << recompute_label(p);
  if (p.partition_activations) os << " partition-activations";
  if (p.offload_checkpoints) os << " offload-checkpoints";
  if (p.sequence_parallel) os << " sp";
  if (p.offload == Offload::kOptimizer) os << " offload";
  if (p.offload == Offload::kOptimizerParams) os << " offload=optimizer+params";
  if (p.offload_device == OffloadDevice::kNvme) os << ":nvme";
  if (p.grad_precision == GradPrecision::kFp32 && p.precision != Precision::kFp32)
    os << " fp32-grads";
  if (p.fp8) os << " fp8";
  if (p.fp8 && p.fp8_scaling != Fp8Scaling::kCurrent) os << "-" << to_string(p.fp8_scaling);
  if (p.fp8 && p.fp8_weight_cache) os << "-wcache";
  if (p.fp8 && p.fp8_all_gather) os << "-gather";
  if (p.fp8 && p.fp8_attention) os << "-attention";
  if (p.attention_kernel != AttentionKernel::kGeneric)
    os << " attention=" << to_string(p.attention_kernel);
  if (p.cross_entropy == CrossEntropy::kUnfused) os << " unfused-ce";
  if (p.cross_entropy == CrossEntropy::kCast) os << " cast-ce";
  if (p.ddp_bucket_copy) os << " ddp-bucket-copy";
  if (p.zero3_gather == ZeroGather::kPerTensor) os << " zero3-gather=per-tensor";
  if (p.zero1_collectives != ZeroCollectives::kFlat)
    os << " zero1-collectives=" << to_string(p.zero1_collectives);
  if (p.param_gather != ParamGather::kAfterStep)
    os << " param-gather=" << to_string(p.param_gather);
  if (p.dp_bucket_elements != 0) os << " dp-bucket=" << p.dp_bucket_elements;
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone)
    os << " grad-accumulation-pass=" << to_string(p.grad_accumulation_pass);
  if (p.pipeline_scatter_gather) os << " pp-scatter-gather";
  if (p.elementwise == Elementwise::kEager) os << " eager";
  if (p.elementwise == Elementwise::kEagerSwiglu) os << " eager-swiglu";
  if (p.zero3_recompute_gather == ZeroRecomputeGather::kKept) os << " zero3-recompute-gather=kept";
  if (p.zero3_backward_prefetch == ZeroBackwardPrefetch::kBeforeReduce)
    os << " zero3-backward-prefetch=before-reduce";
  if (p.zero3_copies != ZeroCopies::kNone) os << " zero3-copies=" << to_string(p.zero3_copies);
  if (p.interleaved_warmup != InterleavedWarmup::kMegatron)
    os << " interleaved-warmup=" << to_string(p.interleaved_warmup);
  if (p.cp > 1 && p.cp_comm != CpComm::kAllGather) os << " cp-comm=" << to_string(p.cp_comm);
  if (p.cp > 1 && p.cp_kv_expanded) os << " cp-kv-expanded";
  if (p.ep_overlap) os << " ep-overlap";
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) os << " " << to_string(p.moe_dispatcher);
  if (p.tp_comm_overlap) os << " tp-overlap";
  if (p.tp_comm_overlap_impl != TpOverlapImpl::kTeUserbuffers)
    os << "=" << to_string(p.tp_comm_overlap_impl);
  if (p.defer_embedding_wgrad) {
    os << " defer-embedding-wgrad";
    if (p.wgrad_deferral_limit > 0) os << "=" << p.wgrad_deferral_limit;
  }
  if (!p.layers_per_stage.empty()) {
    os << " layers=";
    for (std::size_t i = 0; i < p.layers_per_stage.size(); ++i)
      os << (i > 0 ? "," : "") << p.layers_per_stage[i];
  }
  return os.str();
}

// DualPipe's constraints, as deepseek-ai/DualPipe's DualPipe.step asserts them: an even number
// of ranks (stage s pairs with its mirror pp-1-s), and an even number of micro-batches, at
// least 2pp, half fed at each end.
static Status validate_dualpipe(const Plan& p) {
  auto err = [](const std::string& s) { return Status::Error(s); };
  const std::int64_t m = p.num_micro_batches();
  if (p.pp < 2 || p.pp % 2 != 0)
    return err("schedule dualpipe needs an even pp >= 2 (stage s holds a copy of stage pp-1-s's "
               "chunk), the plan has pp=" + std::to_string(p.pp));
  if (p.virtual_stages != 2)
    return err("schedule dualpipe holds 2 model chunks per stage: virtual_stages must be 2, the "
               "plan has virtual_stages=" + std::to_string(p.virtual_stages));
  if (m % 2 != 0 || m < 2 * p.pp)
    return err("schedule dualpipe feeds half the micro-batches from each end: their number "
               "(global_batch_size/(micro_batch_size*dp) = " + std::to_string(m) +
               ") must be even and at least 2*pp = " + std::to_string(2 * p.pp));
  return Status::Ok();
}

Status validate_plan(const Plan& p) {
  auto err = [](const std::string& s) { return Status::Error(s); };
  const std::int64_t kMax = PlanLimits::kMaxDegree;
  if (p.tp < 1 || p.pp < 1 || p.dp < 1 || p.ep < 1)
    return err("parallel degrees tp, pp, dp, ep must be at least 1");
  if (p.cp < 1) return err("cp=" + std::to_string(p.cp) + ": the context-parallel degree must be at least 1");
  if (p.tp > kMax || p.pp > kMax || p.dp > kMax || p.tp * p.pp > kMax || p.tp * p.pp * p.dp > kMax)
    return err("world size tp*pp*dp = " + std::to_string(p.tp) + "*" + std::to_string(p.pp) +
               "*" + std::to_string(p.dp) + " exceeds the limit of " + std::to_string(kMax));
  if (p.cp > kMax || p.tp * p.pp * p.dp * p.cp > kMax)
    return err("world size tp*cp*pp*dp = " + std::to_string(p.tp) + "*" + std::to_string(p.cp) +
               "*" + std::to_string(p.pp) + "*" + std::to_string(p.dp) +
               " exceeds the limit of " + std::to_string(kMax));
  if (p.virtual_stages < 1 || p.virtual_stages > PlanLimits::kMaxVirtualStages)
    return err("virtual_stages=" + std::to_string(p.virtual_stages) + " is out of range [1, " +
               std::to_string(PlanLimits::kMaxVirtualStages) + "]");
  if (p.attention_kernel != AttentionKernel::kGeneric && p.attention != AttentionImpl::kFused)
    return err("attention_kernel=" + std::string(to_string(p.attention_kernel)) +
               " names a fused attention kernel; the plan has attention=" +
               std::string(to_string(p.attention)));
  if (p.cp_comm != CpComm::kAllGather && p.cp == 1)
    return err("cp_comm=" + std::string(to_string(p.cp_comm)) +
               " says how context parallelism moves keys and values; the plan has cp=1");
  if (p.cp_kv_expanded && p.cp == 1)
    return err("cp_kv_expanded says what context parallelism's ring moves; the plan has cp=1");
  if (p.zero_stage < 0 || p.zero_stage > 3)
    return err("zero_stage=" + std::to_string(p.zero_stage) + " must be 0, 1, 2 or 3");
  if (p.zero3_recompute_gather != ZeroRecomputeGather::kAgain && p.zero_stage != 3)
    return err("zero3_recompute_gather=" + std::string(to_string(p.zero3_recompute_gather)) +
               " says how ZeRO-3 gathers for a recompute; the plan has zero_stage " +
               std::to_string(p.zero_stage));
  if (p.zero3_backward_prefetch != ZeroBackwardPrefetch::kAfterReduce && p.zero_stage != 3)
    return err("zero3_backward_prefetch=" + std::string(to_string(p.zero3_backward_prefetch)) +
               " says when ZeRO-3 gathers the next block in the backward; the plan has zero_stage " +
               std::to_string(p.zero_stage));
  if (p.interleaved_warmup != InterleavedWarmup::kMegatron && p.schedule != Schedule::kInterleaved)
    return err("interleaved_warmup=" + std::string(to_string(p.interleaved_warmup)) +
               " says how the interleaved schedule warms up; the plan has schedule " +
               std::string(to_string(p.schedule)));
  if (p.zero3_copies != ZeroCopies::kNone && p.zero_stage != 3)
    return err("zero3_copies=" + std::string(to_string(p.zero3_copies)) +
               " says which copies PyTorch FSDP makes around ZeRO-3's collectives; the plan has "
               "zero_stage " + std::to_string(p.zero_stage));
  if (p.zero3_copies != ZeroCopies::kNone && p.zero3_gather != ZeroGather::kFlat)
    return err("zero3_copies=" + std::string(to_string(p.zero3_copies)) +
               " says how PyTorch FSDP gathers a block in one collective; the plan has "
               "zero3_gather " + std::string(to_string(p.zero3_gather)) +
               " (DeepSpeed's, whose copies that field counts)");
  if (p.zero3_gather != ZeroGather::kFlat && p.zero_stage != 3)
    return err("zero3_gather=" + std::string(to_string(p.zero3_gather)) +
               " says how ZeRO-3 gathers parameters; the plan has zero_stage " +
               std::to_string(p.zero_stage));
  if (p.ddp_bucket_copy && p.zero_stage > 1)
    return err("ddp_bucket_copy=true says how PyTorch DDP holds gradients; the plan has "
               "zero_stage " + std::to_string(p.zero_stage) + " (DDP runs with ZeRO 0 or 1)");
  if (p.zero1_collectives != ZeroCollectives::kFlat && p.zero_stage != 1)
    return err("zero1_collectives=" + std::string(to_string(p.zero1_collectives)) +
               " says how ZeRO-1 reduces gradients and gathers parameters; the plan has "
               "zero_stage " + std::to_string(p.zero_stage));
  if (p.param_gather != ParamGather::kAfterStep &&
      (p.zero_stage < 1 || p.zero_stage > 2 ||
       (p.zero_stage == 1 && p.zero1_collectives != ZeroCollectives::kFlat)))
    return err("param_gather=" + std::string(to_string(p.param_gather)) +
               " says when the distributed optimizer's parameter all-gather runs; it needs "
               "zero_stage 1 (zero1_collectives flat) or 2, the plan has zero_stage " +
               std::to_string(p.zero_stage) +
               (p.zero_stage == 1 ? " with zero1_collectives " +
                                        std::string(to_string(p.zero1_collectives))
                                  : std::string()));
  if (p.dp_bucket_elements != 0 && (p.dp_bucket_elements < PlanLimits::kMinBucketElements ||
                                    p.dp_bucket_elements > PlanLimits::kMaxBucketElements))
    return err("dp_bucket_elements=" + std::to_string(p.dp_bucket_elements) +
               " must be 0 (one collective per parameter block) or between " +
               std::to_string(PlanLimits::kMinBucketElements) + " and " +
               std::to_string(PlanLimits::kMaxBucketElements));
  if (p.dp_bucket_elements != 0 && p.zero_stage > 2)
    return err("dp_bucket_elements=" + std::to_string(p.dp_bucket_elements) +
               " buckets DDP's and ZeRO-1/2's gradient and parameter collectives; the plan has "
               "zero_stage " + std::to_string(p.zero_stage) +
               " (ZeRO-3 gathers each block as one unit)");
  if (p.pipeline_scatter_gather && (p.tp < 2 || p.pp < 2 || p.sequence_parallel))
    return err("pipeline_scatter_gather=true splits a pipeline message over the TP ranks and "
               "gathers it after the send; the plan has tp " + std::to_string(p.tp) + ", pp " +
               std::to_string(p.pp) + " and sequence_parallel " +
               (p.sequence_parallel ? "true" : "false") +
               " (it needs tp > 1, pp > 1 and sequence_parallel false: sequence parallelism "
               "already sends 1/tp)");
  const std::string pass =
      "grad_accumulation_pass=" + std::string(to_string(p.grad_accumulation_pass));
  const bool autograd = p.grad_accumulation_pass == GradAccumulationPass::kAutograd;
  const bool shard_add = p.grad_accumulation_pass == GradAccumulationPass::kShardAdd;
  if (shard_add && p.zero_stage < 2)
    return err(pass + " adds each micro-batch's reduce-scattered gradient into a gradient "
               "shard; the plan has zero_stage " + std::to_string(p.zero_stage) +
               " (it runs with ZeRO 2 or 3)");
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone && !shard_add && p.zero_stage > 1)
    return err(pass + " says how an unsharded gradient buffer is "
               "filled; the plan has zero_stage " + std::to_string(p.zero_stage) +
               " (it runs with ZeRO 0 or 1)");
  if (autograd && p.grad_precision != GradPrecision::kCompute)
    return err(pass + " adds each micro-batch's gradient into the parameter's own .grad, in "
               "the compute precision; the plan has grad_precision " +
               std::string(to_string(p.grad_precision)) + " (it needs grad_precision compute)");
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone && !autograd && !shard_add &&
      (p.grad_precision != GradPrecision::kFp32 || p.precision == Precision::kFp32))
    return err(pass + " adds 16-bit gradients into an fp32 buffer; the plan "
               "has precision " + std::string(to_string(p.precision)) + " and grad_precision " +
               std::string(to_string(p.grad_precision)) +
               " (it needs a 16-bit precision and grad_precision fp32)");
  if (p.expert_tp < 0 || p.expert_tp > kMax)
    return err("expert_tp=" + std::to_string(p.expert_tp) + " is out of range [1, " +
               std::to_string(kMax) + "] (0: tp)");
  if (p.expert_layout == ExpertLayout::kCarved) {
    if (p.expert_tp > 0)
      return err("expert_tp=" + std::to_string(p.expert_tp) +
                 " needs expert_layout folded (carved experts are split over the attention's "
                 "tp)");
    if (p.dp % p.ep != 0)
      return err("ep=" + std::to_string(p.ep) + " does not divide dp=" + std::to_string(p.dp));
  } else {
    const std::int64_t stage = p.tp * p.cp * p.dp, expert = p.expert_tp_size() * p.ep;
    if (stage % expert != 0)
      return err("expert_layout folded divides a stage's tp*cp*dp = " + std::to_string(stage) +
                 " ranks into expert_tp x ep x expert data-parallel, and expert_tp*ep = " +
                 std::to_string(p.expert_tp_size()) + "*" + std::to_string(p.ep) +
                 " does not divide it");
    if (p.tp > 1 && !p.sequence_parallel)
      return err("expert_layout folded with tp=" + std::to_string(p.tp) +
                 " needs sequence_parallel (Megatron-Core's MoE layer routes each rank's "
                 "sequence-parallel share of the tokens and refuses tp > 1 without it)");
  }
  if (p.zero_shard_size < 0 || p.zero_shard_size > kMax)
    return err("zero_shard_size=" + std::to_string(p.zero_shard_size) +
               " is out of range [0, " + std::to_string(kMax) + "] (0: all dp*cp ranks)");
  if (p.zero_shard_size > 0) {
    if (p.zero_stage < 1)
      return err("zero_shard_size=" + std::to_string(p.zero_shard_size) +
                 " needs zero_stage >= 1 (it sets the group ZeRO shards over), the plan has "
                 "zero_stage 0");
    if (p.dp_cp() % p.zero_shard_size != 0)
      return err("zero_shard_size=" + std::to_string(p.zero_shard_size) +
                 " does not divide dp*cp = " + std::to_string(p.dp_cp()));
    if ((p.ep > 1 || p.expert_layout == ExpertLayout::kFolded) &&
        p.zero_shard_size < p.dp_cp())
      return err("zero_shard_size=" + std::to_string(p.zero_shard_size) + " with ep=" +
                 std::to_string(p.ep) +
                 " is not modelled (the experts' shard groups across replicas are not "
                 "defined); use 0 to shard over all dp*cp ranks");
  }
  if (p.micro_batch_size < 1 || p.global_batch_size < 1)
    return err("batch sizes must be at least 1");
  if (p.micro_batch_size > PlanLimits::kMaxBatch || p.global_batch_size > PlanLimits::kMaxBatch)
    return err("batch sizes must be at most 2^30");
  if (p.global_batch_size % (p.micro_batch_size * p.dp) != 0)
    return err("global_batch_size=" + std::to_string(p.global_batch_size) +
               " is not divisible by micro_batch_size*dp = " +
               std::to_string(p.micro_batch_size * p.dp));
  const std::int64_t m = p.num_micro_batches();
  if (p.schedule == Schedule::kNaive && m != 1)
    return err("schedule naive runs one micro-batch per replica: micro_batch_size must equal "
               "global_batch_size/dp = " + std::to_string(p.global_batch_size / p.dp));
  if (p.schedule == Schedule::kZbV) {
    if (p.pp < 2)
      return err("schedule zb-v needs pp >= 2 (it places two chunks per stage in a V), the plan "
                 "has pp=" + std::to_string(p.pp));
    if (p.virtual_stages != 2)
      return err("schedule zb-v holds 2 model chunks per stage: virtual_stages must be 2, the "
                 "plan has virtual_stages=" + std::to_string(p.virtual_stages));
  } else if (p.schedule == Schedule::kDualPipe) {
    Status s = validate_dualpipe(p);
    if (!s.ok()) return s;
  } else if (p.schedule != Schedule::kInterleaved && p.virtual_stages != 1) {
    return err("virtual_stages=" + std::to_string(p.virtual_stages) +
               " needs schedule interleaved (or 2 with zb-v or dualpipe)");
  }
  if (p.schedule == Schedule::kInterleaved) {
    if (p.pp < 2) return err("schedule interleaved needs pp >= 2");
    if (p.virtual_stages < 2) return err("schedule interleaved needs virtual_stages >= 2");
    // Megatron-LM's interleaved schedule runs micro-batches in groups of pp.
    if (m % p.pp != 0)
      return err("schedule interleaved needs the number of micro-batches (" + std::to_string(m) +
                 ") to be a multiple of pp=" + std::to_string(p.pp));
  }
  if (p.schedule == Schedule::kZbH1 && p.pp < 2)
    return err("schedule zb-h1 needs pp >= 2 (it reorders a pipeline's passes), the plan has "
               "pp=" + std::to_string(p.pp));
  if (p.sequence_parallel && p.tp < 2) return err("sequence_parallel needs tp >= 2");
  if (p.recompute_num_layers < 0)
    return err("recompute_num_layers=" + std::to_string(p.recompute_num_layers) +
               " must be at least 0 (0: every layer)");
  if (p.partition_activations && p.recompute != Recompute::kFull)
    return err("partition_activations needs recompute full (it splits the inputs that full "
               "recompute stores), the plan has recompute " + std::string(to_string(p.recompute)));
  if (p.offload_checkpoints && p.recompute != Recompute::kFull)
    return err("offload_checkpoints needs recompute full (it moves the inputs that full "
               "recompute stores), the plan has recompute " + std::string(to_string(p.recompute)));
  if (p.partition_activations && p.tp < 2)
    return err("partition_activations needs tp >= 2 (it splits over the tensor-parallel ranks)");
  if (p.partition_activations && p.sequence_parallel)
    return err("partition_activations with sequence_parallel: sequence parallelism already "
               "stores each layer's input split over tp; set one of them");
  if (p.recompute_num_layers > 0 && p.recompute != Recompute::kFull)
    return err("recompute_num_layers=" + std::to_string(p.recompute_num_layers) +
               " needs recompute full, the plan has recompute " +
               std::string(to_string(p.recompute)));
  if (p.fp8 && p.precision == Precision::kFp32)
    return err("fp8 needs precision bf16 or fp16 (FP8 GEMMs, the rest in 16 bits), the plan has "
               "precision fp32");
  if (p.fp8_all_gather && !p.fp8)
    return err("fp8_all_gather gathers FP8 weights and needs fp8 true, the plan has fp8 false");
  if (p.fp8_all_gather && p.zero_stage == 0)
    return err(
        "fp8_all_gather gathers sharded weights (FSDP's, or the distributed optimizer's "
        "fp8_param_gather) and needs zero_stage 1, 2 or 3, the plan has zero_stage 0");
  if (p.fp8_all_gather && p.zero_stage == 1 && p.zero1_collectives != ZeroCollectives::kFlat)
    return err(
        "fp8_all_gather is the distributed optimizer's flat gather under zero_stage 1 and "
        "needs zero1_collectives flat, the plan has zero1_collectives " +
        std::string(to_string(p.zero1_collectives)));
  if (p.fp8_all_gather && p.zero_stage == 3 && p.zero3_gather != ZeroGather::kFlat)
    return err("fp8_all_gather is FSDP2's flat gather and needs zero3_gather flat, the plan has "
               "zero3_gather " + std::string(to_string(p.zero3_gather)));
  if (!p.fp8 && (p.fp8_scaling != Fp8Scaling::kCurrent || p.fp8_weight_cache))
    return err(std::string(p.fp8_weight_cache ? "fp8_weight_cache" : "fp8_scaling") +
               " describes FP8 casts and needs fp8 true, the plan has fp8 false");
  if (p.fp8_attention && !p.fp8)
    return err("fp8_attention runs under the FP8 recipe and needs fp8 true, the plan has fp8 "
               "false");
  if (p.fp8_attention && p.attention != AttentionImpl::kFused)
    return err("fp8_attention is a fused attention kernel's and needs attention fused, the plan "
               "has attention " + std::string(to_string(p.attention)));
  if (p.fp8_all_gather && p.fp8_scaling == Fp8Scaling::kNvfp4)
    return err("fp8_all_gather gathers FP8 weights; with fp8_scaling nvfp4 the weights are NVFP4, "
               "whose gather is not modelled");
  if (p.ep_overlap && p.ep < 2)
    return err("ep_overlap needs ep >= 2 (there is no expert all-to-all to overlap)");
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll && p.ep < 2)
    return err("moe_dispatcher " + std::string(to_string(p.moe_dispatcher)) +
               " needs ep >= 2 (there is no expert all-to-all to dispatch)");
  // Megatron-Core's constraints on overlap_moe_expert_parallel_comm (Megatron Bridge's
  // comm_overlap validation): with pipeline parallelism it needs virtual stages, whose other
  // chunks keep a stage busy while a merged pair holds back its forward's send; and it is not
  // for full recompute.
  if (p.ep_overlap && p.pp == 1 && p.schedule != Schedule::k1F1B)
    return err("ep_overlap needs schedule 1f1b (it merges each backward with the forward that "
               "follows it), the plan has schedule " + std::string(to_string(p.schedule)));
  if (p.ep_overlap && p.pp > 1 && p.schedule != Schedule::kInterleaved)
    return err("ep_overlap with pp=" + std::to_string(p.pp) +
               " needs schedule interleaved (virtual pipeline stages, as Megatron-Core "
               "requires), the plan has schedule " + std::string(to_string(p.schedule)));
  if (p.ep_overlap && p.recompute == Recompute::kFull)
    return err("ep_overlap with recompute full is not supported (Megatron-Core's EP overlap "
               "excludes full recompute)");
  if (p.ep_overlap && p.zero_stage == 3)
    return err("ep_overlap with zero_stage 3 is not modelled (its parameter gathers would have "
               "to interleave too)");
  // The decomposed collectives are sequence parallelism's all-gathers and reduce-scatters
  // (Megatron-Core and async TP both require it).
  if (p.tp_comm_overlap && (p.tp < 2 || !p.sequence_parallel))
    return err("tp_comm_overlap needs tp >= 2 and sequence_parallel (it splits sequence "
               "parallelism's all-gathers and reduce-scatters), the plan has tp=" +
               std::to_string(p.tp) + " sequence_parallel=" +
               (p.sequence_parallel ? "true" : "false"));
  if (p.tp_comm_overlap_impl != TpOverlapImpl::kTeUserbuffers && !p.tp_comm_overlap)
    return err("tp_comm_overlap_impl=" + std::string(to_string(p.tp_comm_overlap_impl)) +
               " needs tp_comm_overlap (it names how the overlapped TP collectives are "
               "decomposed), the plan has tp_comm_overlap=false");
  // Megatron-Core refuses it without pipeline parallelism (model_parallel_config.py,
  // __post_init__); zb-h1 / zb-v already run every weight gradient apart from its backward.
  if (p.wgrad_deferral_limit < 0)
    return err("wgrad_deferral_limit=" + std::to_string(p.wgrad_deferral_limit) +
               " must be >= 0 (0 defers every micro-batch's output-layer weight gradient)");
  if (p.wgrad_deferral_limit != 0 && !p.defer_embedding_wgrad)
    return err("wgrad_deferral_limit=" + std::to_string(p.wgrad_deferral_limit) +
               " needs defer_embedding_wgrad true");
  if (p.defer_embedding_wgrad && p.pp < 2)
    return err("defer_embedding_wgrad needs pp >= 2 (it defers the head's weight gradients to "
               "the pipeline flush), the plan has pp=" + std::to_string(p.pp));
  if (p.defer_embedding_wgrad && (p.schedule == Schedule::kZbH1 || p.schedule == Schedule::kZbV ||
                                  p.schedule == Schedule::kDualPipe))
    return err("defer_embedding_wgrad with schedule " + std::string(to_string(p.schedule)) +
               " is not modelled (its backwards are already split into input and weight "
               "passes)");
  if (p.offload != Offload::kNone && p.optimizer == Optimizer::kSgd)
    return err("offload optimizer: plain sgd has no optimizer states to offload");
  // ZeRO-Infinity streams each rank's parameter shard in; without ZeRO-3 every rank would hold
  // (and fetch) the whole model (Rajbhandari et al. 2021, sec. 5.1).
  if (p.offload == Offload::kOptimizerParams && p.zero_stage != 3)
    return err("offload optimizer+params needs zero_stage 3 (ZeRO-Infinity offloads each rank's "
               "parameter shard), the plan has zero_stage " + std::to_string(p.zero_stage));
  if (p.offload_device == OffloadDevice::kNvme && p.offload == Offload::kNone)
    return err("offload_device nvme needs offload optimizer or optimizer+params (nothing is "
               "offloaded with offload none)");
  if (!p.layers_per_stage.empty() &&
      static_cast<std::int64_t>(p.layers_per_stage.size()) != p.num_chunks())
    return err("layers_per_stage has " + std::to_string(p.layers_per_stage.size()) +
               " entries, expected pp*virtual_stages = " + std::to_string(p.num_chunks()));
  return Status::Ok();
}

Status check_plan_fits_model(const Plan& p, const ModelSpec& m) {
  auto err = [](const std::string& s) { return Status::Error(s, ExitCode::kInfeasible); };
  auto s = [](std::int64_t v) { return std::to_string(v); };
  // A plan that skipped validate_plan must not divide by zero below.
  if (p.tp < 1 || p.cp < 1 || p.pp < 1 || p.ep < 1 || p.virtual_stages < 1 ||
      p.pp > PlanLimits::kMaxDegree || p.virtual_stages > PlanLimits::kMaxVirtualStages)
    return Status::Error("invalid plan (" + describe(p) + "): " + validate_plan(p).message());
  if (m.num_attention_heads % p.tp != 0)
    return err("tp=" + s(p.tp) + " does not divide num_attention_heads=" +
               s(m.num_attention_heads));
  if (m.num_kv_heads % p.tp != 0)
    return err("tp=" + s(p.tp) + " does not divide num_kv_heads=" + s(m.num_kv_heads));
  if (m.ffn_hidden_size % p.tp != 0)
    return err("tp=" + s(p.tp) + " does not divide ffn_hidden_size=" + s(m.ffn_hidden_size));
  if (p.cp > 1) {
    // Megatron-Core runs context parallelism inside Transformer Engine's fused attention
    // (TEDotProductAttention); its unfused core attention has no CP path.
    if (p.attention != AttentionImpl::kFused)
      return err("cp=" + s(p.cp) + " needs attention=fused (Megatron-Core's context parallelism "
                 "runs on fused attention kernels), the plan has attention=" +
                 std::string(to_string(p.attention)));
    // Load balancing splits each sequence into 2*cp equal chunks (Megatron-Core docs, "context
    // parallel"; Transformer Engine's get_batch_on_this_cp_rank).
    if (m.seq_len % (2 * p.cp) != 0)
      return err("cp=" + s(p.cp) + ": seq_len=" + s(m.seq_len) + " is not divisible by 2*cp = " +
                 s(2 * p.cp) + " (load-balanced causal chunks)");
    if (p.sequence_parallel && (m.seq_len / p.cp) % p.tp != 0)
      return err("sequence_parallel: tp=" + s(p.tp) + " does not divide seq_len/cp = " +
                 s(m.seq_len / p.cp));
    // Ulysses scatters the heads over the cp ranks (Transformer Engine's
    // AttnFuncWithCPAndQKVOA2A asserts "The number of attention heads needs to be divisible by
    // CP size!" on Q's and K's heads per TP rank).
    if (p.cp_comm == CpComm::kA2a) {
      const std::pair<const char*, std::int64_t> heads_of[] = {
          {"num_attention_heads", m.num_attention_heads}, {"num_kv_heads", m.num_kv_heads}};
      for (const auto& [name, heads] : heads_of)
        if ((heads / p.tp) % p.cp != 0)
          return err("cp_comm=a2a: cp=" + s(p.cp) + " does not divide the " + name +
                     " per TP rank, " + s(heads) + "/" + s(p.tp) + " = " + s(heads / p.tp));
    }
  }
  if (p.sequence_parallel && m.seq_len % p.tp != 0)
    return err("sequence_parallel: tp=" + s(p.tp) + " does not divide seq_len=" + s(m.seq_len));
  if (p.partition_activations && (m.seq_len / p.cp) % p.tp != 0)
    return err("partition_activations: tp=" + s(p.tp) + " does not divide seq_len" +
               (p.cp > 1 ? "/cp = " : "=") + s(m.seq_len / p.cp) +
               " (each TP rank keeps its share of the tokens)");
  if (p.ep > 1 && !m.is_moe()) return err("ep=" + s(p.ep) + " needs a mixture-of-experts model");
  if (m.num_experts % p.ep != 0)
    return err("ep=" + s(p.ep) + " does not divide num_experts=" + s(m.num_experts));
  if (p.expert_layout == ExpertLayout::kFolded && !m.is_moe())
    return err("expert_layout folded places expert layers and needs a mixture-of-experts model");
  if (p.expert_layout == ExpertLayout::kFolded && m.ffn_hidden_size % p.expert_tp_size() != 0)
    return err("expert_tp=" + s(p.expert_tp_size()) + " does not divide ffn_hidden_size=" +
               s(m.ffn_hidden_size) + " (each expert's width is split over expert_tp)");
  if (p.layers_per_stage.empty()) {
    if (m.num_layers % p.num_chunks() != 0)
      return err("num_layers=" + s(m.num_layers) + " cannot be split evenly over pp*virtual_stages = " +
                 s(p.num_chunks()) + " model chunks");
  } else {
    std::int64_t total = std::accumulate(p.layers_per_stage.begin(), p.layers_per_stage.end(),
                                         std::int64_t{0});
    if (total != m.num_layers)
      return err("layers_per_stage sums to " + s(total) + ", the model has num_layers=" +
                 s(m.num_layers));
  }
  // More layers than the largest chunk holds would read as a partial recompute that is full.
  if (p.recompute_num_layers > 0) {
    const std::vector<std::int64_t> chunks = chunk_layers(p, m);
    const std::int64_t largest = *std::max_element(chunks.begin(), chunks.end());
    if (p.recompute_num_layers > largest)
      return err("recompute_num_layers=" + s(p.recompute_num_layers) +
                 " exceeds the layers of the largest model chunk (" + s(largest) +
                 "); 0 recomputes every layer");
  }
  return Status::Ok();
}

Status check_plan_world_size(const Plan& p, std::int64_t world_size) {
  if (p.world_size() != world_size) {
    const std::string product =
        p.cp > 1 ? "tp*cp*pp*dp = " + std::to_string(p.tp) + "*" + std::to_string(p.cp) + "*"
                 : "tp*pp*dp = " + std::to_string(p.tp) + "*";
    return Status::Error("the plan needs " + product + std::to_string(p.pp) + "*" +
                             std::to_string(p.dp) + " = " + std::to_string(p.world_size()) +
                             " ranks, but " + std::to_string(world_size) + " are available",
                         ExitCode::kInfeasible);
  }
  return Status::Ok();
}

std::vector<std::int64_t> chunk_layers(const Plan& p, const ModelSpec& m) {
  if (!p.layers_per_stage.empty()) return p.layers_per_stage;
  const std::int64_t chunks = p.num_chunks();
  std::vector<std::int64_t> out(static_cast<std::size_t>(chunks), m.num_layers / chunks);
  for (std::int64_t i = 0; i < m.num_layers % chunks; ++i) ++out[static_cast<std::size_t>(i)];
  return out;
}

std::int64_t chunk_stage(const Plan& p, std::int64_t chunk) {
  if (p.schedule == Schedule::kZbV) return chunk < p.pp ? chunk : 2 * p.pp - 1 - chunk;
  return chunk % p.pp;
}

std::int64_t chunk_stage(const Plan& p, std::int64_t chunk, std::int64_t direction) {
  if (p.schedule == Schedule::kDualPipe && direction == 1) return p.pp - 1 - chunk;
  return chunk_stage(p, chunk);
}

std::int64_t stage_chunk(const Plan& p, std::int64_t stage, std::int64_t local) {
  if (p.schedule == Schedule::kZbV) return local == 0 ? stage : 2 * p.pp - 1 - stage;
  if (p.schedule == Schedule::kDualPipe) return local == 0 ? stage : p.pp - 1 - stage;
  return local * p.pp + stage;
}

std::int64_t head_stage(const Plan& p) { return chunk_stage(p, p.num_chunks() - 1); }

// DualPipe's end stages each hold the embedding and the head: the table's copies are the two
// stages' copies of chunk 0 and pp-1, summed with the rest of the mirrored chunks.
bool splits_tied_embedding(const Plan& p) {
  return p.schedule != Schedule::kDualPipe && head_stage(p) != 0;
}

bool stage_holds_embedding(const Plan& p, std::int64_t stage) {
  return stage == 0 || (p.schedule == Schedule::kDualPipe && stage == p.pp - 1);
}

bool stage_holds_head(const Plan& p, std::int64_t stage) {
  return stage == head_stage(p) || (p.schedule == Schedule::kDualPipe && stage == 0);
}

std::int64_t pipeline_direction(const Plan& p, std::int64_t micro_batch) {
  if (p.schedule != Schedule::kDualPipe) return 0;
  return micro_batch < p.num_micro_batches() / 2 ? 0 : 1;
}

std::int64_t chunk_copy_micro_batches(const Plan& p) {
  const std::int64_t m = p.num_micro_batches();
  return p.schedule == Schedule::kDualPipe ? m / 2 : m;
}

std::string zero_label(const Plan& p) {
  std::string s = std::to_string(p.zero_stage);
  if (p.zero_shard_size > 0) s.append("/").append(std::to_string(p.zero_shard_size));
  return s;
}

std::string recompute_label(const Plan& p) {
  std::string s(to_string(p.recompute));
  if (p.recompute_num_layers > 0) s.append(":").append(std::to_string(p.recompute_num_layers));
  return s;
}

bool recomputes_layer(const Plan& p, std::int64_t index_in_chunk) {
  return p.recompute == Recompute::kFull &&
         (p.recompute_num_layers == 0 || index_in_chunk < p.recompute_num_layers);
}

std::int64_t recomputed_layers_in_chunk(const Plan& p, std::int64_t chunk_layers) {
  if (p.recompute != Recompute::kFull) return 0;
  return p.recompute_num_layers == 0 ? chunk_layers : std::min(p.recompute_num_layers, chunk_layers);
}

// Every chunk gets the ceiling, and the chunks short of a layer are taken alternately from the
// two ends of the pipeline, whose stages also hold the embedding and the LM head (Llama 3 405B:
// 126 layers on 16 stages, "one Transformer layer fewer on the first and the last stages",
// Dubey et al. 2024 sec. 3.3.2).
std::vector<std::int64_t> balanced_chunk_layers(std::int64_t layers, std::int64_t chunks) {
  TRAINPLAN_CHECK(chunks >= 1 && layers >= chunks) << layers << " layers over " << chunks;
  const std::int64_t ceil = (layers + chunks - 1) / chunks;
  std::vector<std::int64_t> out(static_cast<std::size_t>(chunks), ceil);
  std::int64_t short_by = ceil * chunks - layers;
  for (std::int64_t i = 0; short_by > 0; ++i, --short_by) {
    const std::int64_t c = i % 2 == 0 ? i / 2 : chunks - 1 - i / 2;
    --out[static_cast<std::size_t>(c)];
  }
  return out;
}

}  // namespace trainplan
