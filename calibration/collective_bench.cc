// The collective benchmark's table; see collective_bench.h.
#include "calibration/collective_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace trainplan::calibration {

std::string format_collective_table(const std::vector<CollectiveSample>& samples) {
  std::ostringstream os;
  std::string block;
  char line[200];
  for (const CollectiveSample& x : samples) {
    const std::string key =
        std::string(to_string(x.collective)) + " over " + std::to_string(x.group_size) + " ranks";
    if (key != block) {
      block = key;
      os << "\n# " << key << "\n";
      std::snprintf(line, sizeof line, "# %12s %12s %6s %12s %12s %12s\n", "size(B)", "count",
                    "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
      os << line;
    }
    std::snprintf(line, sizeof line, "  %12lld %12lld %6s %12.2f %12.3f %12.3f\n",
                  static_cast<long long>(x.bytes), static_cast<long long>(x.count), x.type.c_str(),
                  x.time_s * 1e6, x.algbw_bytes_per_s() / 1e9, x.busbw_bytes_per_s() / 1e9);
    os << line;
  }
  return os.str();
}

}  // namespace trainplan::calibration
