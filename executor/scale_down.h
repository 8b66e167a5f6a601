// A zoo model's plan, scaled down to run on a laptop (`execute --scale-down`, issue 28): the
// plan's layout is kept (tp, cp, pp, dp, ep, ZeRO stage and shard groups, schedule and virtual
// stages, recompute, sequence parallelism, partitioned activations), and so is the model's
// shape where the layout depends on it (heads divisible by tp, the FFN/hidden ratio, tied
// embeddings, MoE experts and top-k); widths, vocabulary, sequence, layers and batch shrink to
// sizes a CPU trains in seconds. What the CPU executor does not run is switched to what it
// runs (bf16 -> fp32, offload -> none, SwiGLU -> GELU, GQA -> MHA, ...). Every change is
// listed, with the old and new value and why, for `execute` to print.
//
// Tested by tests/executor/scale_down_test.cc and, end to end (plan --emit-plan -> execute
// --scale-down -> simulate -> compare), by tests/tools/scale_down_cli_test.sh.
#pragma once

#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

namespace trainplan::executor {

struct ScaledRun {
  ModelSpec model;
  Plan plan;
  // One line per changed field: "hidden_size 12288 -> 128" and, where it is not plain
  // shrinking, why.
  std::vector<std::string> changes;
};

// The scaled-down model and plan; an error (naming the field) when the plan does not fit the
// model to begin with.
Result<ScaledRun> scale_down(const ModelSpec& model, const Plan& plan);

}  // namespace trainplan::executor
