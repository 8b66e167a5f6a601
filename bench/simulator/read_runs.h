// The published-runs file the bench tools read (validation/corpus/published_runs.json): its JSON
// list, or nothing after an error on stderr that names the tool and the file.
#pragma once

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "core/json_util.h"

namespace trainplan::bench {

inline std::optional<Json> read_runs_file(const std::string& path, const std::string& tool) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << tool << ": cannot read '" << path << "'\n";
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto json = parse_json_text(text.str(), path);
  if (!json.ok() || !json->is_array()) {
    std::cerr << tool << ": " << path << ": "
              << (json.ok() ? "not a JSON list" : json.status().message()) << "\n";
    return std::nullopt;
  }
  return std::move(*json);
}

}  // namespace trainplan::bench
