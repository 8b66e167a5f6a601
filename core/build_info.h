// Which build produced an output: the project version, the git commit the build was configured
// from ("unknown" outside a git checkout) and the compiler. Generated at configure time
// (cmake/build_info.cmake writes build_info.cc from core/build_info.cc.in); recorded in every
// JSON report (step_report_to_json, plan_report_to_json) and printed by each tool's --version.
// Tested by tests/core/build_info_test.cc and tests/tools/ecosystem_cli_test.sh.
#pragma once

#include <string>
#include <string_view>

#include "core/json_util.h"

namespace trainplan {

struct BuildInfo {
  const char* version;     // project(VERSION) in CMakeLists.txt, e.g. "0.1.0"
  const char* git_commit;  // `git describe --always --dirty` at configure time, or "unknown"
  const char* compiler;    // CMAKE_CXX_COMPILER_ID and version, e.g. "GNU 12.2.0"
};
const BuildInfo& build_info();

// {"version": ..., "git_commit": ..., "compiler": ...}: the "build" field of JSON reports.
Json build_info_json();

// "PROGRAM (trainplan) VERSION, git COMMIT, COMPILER": the --version line.
std::string version_line(std::string_view program);

}  // namespace trainplan
