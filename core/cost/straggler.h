// Rank skew: the expected wait for the last member of a collective.
//
// Ranks that meet at a blocking collective each arrive after their own compute since they last
// met, and that compute does not take the same time on every rank: a shared or throttled core,
// an SMT sibling, a clock that varies. The collective begins when the slowest member arrives,
// so a step pays, at each meeting, the expected latest arrival rather than the mean one. Model:
// member p arrives at a normal time of mean a_p and standard deviation s_p = spread x (its
// compute since the last meeting), independently of the others, where `spread` is the relative
// standard deviation of a rank's compute between two meetings (measured by `calibrate` from
// the executor's aligned traces, calibration/executor_probe.h; 0 for the GPU presets, where
// kernels run at a steady clock). The expected maximum of independent normals is
// E[max] = L + integral_L^U (1 - prod_p Phi((x - a_p) / s_p)^copies_p) dx, with F(L) ~ 0 and
// F(U) ~ 1 (David & Nagaraja, Order Statistics, 3rd ed., 2003, sec. 3.1; for n identical
// standard normals E[max] = 1/sqrt(pi) at n = 2, 0.846 at n = 3, 1.029 at n = 4).
// Used by the simulator's engine (simulator/engine.cc) and by calibrate to turn a measured
// mean excess over the ranks' mean into `spread`. Tested by tests/core/straggler_test.cc.
#pragma once

#include <span>

namespace trainplan {

// One kind of member: `copies` members (a count >= 1; symmetric simulation stands one simulated
// rank for several) each arriving at a normal time of this mean and standard deviation (>= 0).
// Units are the caller's (the simulator uses nanoseconds).
struct ArrivalSpread {
  double mean = 0;
  double sd = 0;
  double copies = 1;
};

// E[max of n independent standard normals], n >= 1 (0 at n = 1). Values are memoised per n.
double expected_max_standard_normal(double n);

// The expected latest arrival among the members; at least the latest mean. Members with sd 0
// arrive exactly at their mean. Empty input: 0. `members` is the caller's scratch: it is
// sorted and identical members merged in place (no allocation: the simulator calls this at
// every collective).
double expected_latest_arrival(std::span<ArrivalSpread> members);

}  // namespace trainplan
