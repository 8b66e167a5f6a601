// The layout fields the executor's MPI checks (parallel_check.cc, offload_check.cc) read from
// their key=value arguments. Each check fills its own defaults first, so every key is present.
#pragma once

#include <map>
#include <string>

#include "core/plan.h"

namespace trainplan::executor::testing {

inline Schedule schedule_from_arg(const std::string& name) {
  return name == "gpipe"         ? Schedule::kGpipe
         : name == "interleaved" ? Schedule::kInterleaved
         : name == "zb-h1"       ? Schedule::kZbH1
         : name == "zb-v"        ? Schedule::kZbV
         : name == "dualpipe"    ? Schedule::kDualPipe
                                 : Schedule::k1F1B;
}

// tp, cp, pp, dp, ep, fold (1: expert_layout folded), etp (expert_tp), sp, zero, shard, mbs,
// gbs, schedule and vs; fp32 throughout, and the fused attention context parallelism needs.
inline void set_layout_from_args(std::map<std::string, std::string>& kv, Plan& plan) {
  plan.tp = std::stoll(kv["tp"]);
  plan.cp = std::stoll(kv["cp"]);
  plan.pp = std::stoll(kv["pp"]);
  plan.dp = std::stoll(kv["dp"]);
  plan.ep = std::stoll(kv["ep"]);
  plan.expert_layout = kv["fold"] == "1" ? ExpertLayout::kFolded : ExpertLayout::kCarved;
  plan.expert_tp = std::stoll(kv["etp"]);
  plan.sequence_parallel = kv["sp"] == "1";
  plan.zero_stage = std::stoi(kv["zero"]);
  plan.zero_shard_size = std::stoll(kv["shard"]);
  plan.micro_batch_size = std::stoll(kv["mbs"]);
  plan.global_batch_size = std::stoll(kv["gbs"]);
  plan.schedule = schedule_from_arg(kv["schedule"]);
  plan.virtual_stages = std::stoll(kv["vs"]);
  plan.precision = Precision::kFp32;
  plan.attention = plan.cp > 1 ? AttentionImpl::kFused : AttentionImpl::kUnfused;
}

}  // namespace trainplan::executor::testing
