// Unit constants. Quantities carry their unit in the name (bytes, seconds, flops, bytes_per_s);
// JSON keys say their unit ("hbm_GiB", "nvlink_GBps", "latency_us") and are converted to SI
// base units once, at parse time, with these constants.
#pragma once

#include <cstdint>

namespace trainplan {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * kKiB;
inline constexpr double kGiB = 1024.0 * kMiB;
inline constexpr double kMB = 1e6;   // decimal, as the tools print every size
inline constexpr double kGB = 1e9;   // decimal, as bandwidth figures are published
inline constexpr double kTB = 1e12;
inline constexpr double kTFLOP = 1e12;
inline constexpr double kUs = 1e-6;
inline constexpr double kNs = 1e-9;
inline constexpr double kNsPerS = 1e9;

// The simulator clock: an integer number of nanoseconds.
using TimeNs = std::int64_t;

}  // namespace trainplan
