// Refinement of the planner's best candidates by the event simulator: what `plan` passes to
// plan_training (and bench/planner/estimate_fidelity uses to see what `plan` would pick).
#pragma once

#include "planner/planner.h"
#include "simulator/simulator.h"

namespace trainplan {

// The simulator's prediction as a planner Estimate (the figures the report shows), over the
// analytical estimate `e`, which keeps the breakdown the simulator does not give.
Estimate estimate_from_simulation(const SimResult& sim, Estimate e);

// A RefineFn that simulates each plan with `options` (its hardware profile, if any, also
// feeds the analytical estimate beside it).
RefineFn simulator_refine(const ModelSpec& model, const ClusterSpec& cluster, SimOptions options);

}  // namespace trainplan
