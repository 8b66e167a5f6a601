// Shared body of the loader fuzz targets: arbitrary bytes -> parse_json_text -> loader; an
// accepted input must round-trip (to_json -> text -> from_json -> to_json gives the same JSON,
// numbers within 1e-12 relative for the unit conversions), and a refused one must say why and
// name its source. Any exception, sanitizer report or failed check is a crash.
// Build and run: .ci/fuzz.sh (clang, -DTRAINPLAN_FUZZ=ON).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/json_util.h"
#include "core/status.h"

namespace trainplan::fuzz {

inline constexpr std::string_view kSource = "fuzz.json";

// Structural equality; numbers compare within a relative tolerance (GB/s <-> bytes/s and
// us <-> s conversions are not exact in binary floating point).
inline bool json_near(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-12 * std::fmax(std::fabs(x), std::fabs(y));
  }
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !json_near(*it, *jt)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!json_near(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

inline void check_refusal(const Status& status) {
  TRAINPLAN_CHECK(!status.ok());
  TRAINPLAN_CHECK(status.code() == ExitCode::kInvalidInput) << status.message();
  TRAINPLAN_CHECK(status.message().find(kSource) != std::string::npos)
      << "message does not name the source: " << status.message();
}

// Runs one input through `from_json` and, when accepted, the round trip. Returns the loaded
// value's pointer-like Result so a target can exercise it further.
template <class From, class To>
auto load_and_round_trip(const std::uint8_t* data, std::size_t size, From from_json, To to_json)
    -> decltype(from_json(Json{}, kSource)) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_json_text(text, kSource);
  if (!parsed.ok()) {
    check_refusal(parsed.status());
    return parsed.status();
  }
  auto value = from_json(*parsed, kSource);
  if (!value.ok()) {
    check_refusal(value.status());
    return value;
  }
  const Json first = to_json(*value);
  const std::string first_text = first.dump();
  auto reparsed = parse_json_text(first_text, kSource);
  TRAINPLAN_CHECK(reparsed.ok()) << reparsed.status().message();
  auto again = from_json(*reparsed, kSource);
  TRAINPLAN_CHECK(again.ok()) << "round trip refused: " << again.status().message() << "\n"
                              << first_text;
  const Json second = to_json(*again);
  TRAINPLAN_CHECK(json_near(first, second)) << "round trip changed the value:\n"
                                            << first_text << "\n" << second.dump();
  return value;
}

}  // namespace trainplan::fuzz
