// Running the tools from end-to-end tests: a command's exit code and its stdout and stderr
// together, and the mpirun prefix that works as root and with more ranks than cores.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace trainplan::test_support {

struct CommandResult {
  int code = -1;       // exit status; -1 if it did not exit normally or could not start
  std::string output;  // stdout and stderr
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// "mpirun --oversubscribe [--allow-run-as-root] OPTIONS -np N " (ends with a space).
inline std::string mpirun_prefix(int np, const std::string& options = "") {
  std::string s = "mpirun --oversubscribe";
  if (::geteuid() == 0) s += " --allow-run-as-root";
  if (!options.empty()) s += " " + options;
  return s + " -np " + std::to_string(np) + " ";
}

}  // namespace trainplan::test_support
