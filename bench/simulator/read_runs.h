// The published-runs file the bench tools read (validation/corpus/published_runs.json): its JSON
// list, or nothing after an error on stderr that names the tool and the file; and the walk over
// its runs that every bench tool shares, which names each entry it cannot read or simulate
// instead of skipping it, so that a tool's exit status says whether it saw the whole corpus.
#pragma once

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "core/json_util.h"
#include "core/status.h"
#include "validation/published_run.h"

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

// Whether an entry's id or family key ("source / framework / gpu_generation", as
// PublishedFamily::key writes it) contains filter, read from the JSON as written: an entry that
// does not read as a run is still matched by what it names.
inline bool entry_matches(const Json& entry, const std::string& filter) {
  if (filter.empty()) return true;
  if (!entry.is_object()) return false;
  auto text = [](const Json& j, const char* field) {
    const auto it = j.is_object() ? j.find(field) : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto family = entry.find("family");
  const std::string key =
      family == entry.end() ? std::string()
                            : text(*family, "source") + " / " + text(*family, "framework") +
                                  " / " + text(*family, "gpu_generation");
  return text(entry, "id").find(filter) != std::string::npos ||
         key.find(filter) != std::string::npos;
}

// Calls visit(run) for every entry of runs whose id or family key contains filter (every entry
// when filter is empty). A matching entry that does not read as a published run, and a run whose
// visit returns an error, is named on stderr with the error. Returns how many there were: a tool
// exits 1 when it is not 0, as `simulate --published` exits non-zero when it could not simulate
// every run (the corpus keeps a few runs whose sources leave a field out, with the reason).
template <class Visit>
int for_each_run(const Json& runs, const std::string& tool, const std::string& filter,
                 Visit&& visit) {
  int failed = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!entry_matches(runs[i], filter)) continue;
    auto run = published_run_from_json(runs[i], "entry " + std::to_string(i));
    if (!run.ok()) {
      std::cerr << tool << ": " << run.status().message() << "\n";
      ++failed;
      continue;
    }
    const Status status = visit(*run);
    if (!status.ok()) {
      std::cerr << tool << ": " << run->id << ": " << status.message() << "\n";
      ++failed;
    }
  }
  return failed;
}

}  // namespace trainplan::bench
