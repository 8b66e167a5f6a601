// `execute --trace` end to end under mpirun: two ranks (tp2, then pp2) write one Chrome trace
// with a process per rank, and each rank's traced bytes equal the step report's bytes of the
// traced (only measured) step; a trace path that cannot be written is a clear error with a
// non-zero exit, as for --out.
// Run: ctest -R ExecuteTrace (needs tools/execute; labels executor, mpi).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/json_util.h"
#include "tests/support/run_command.h"

namespace trainplan {
namespace {

namespace fs = std::filesystem;

using Outcome = trainplan::test_support::CommandResult;
Outcome run(const std::string& command) { return trainplan::test_support::run_command(command); }

std::string execute(int np) {
  return trainplan::test_support::mpirun_prefix(np, "--mca btl_vader_single_copy_mechanism none") +
         (fs::path(TRAINPLAN_BINARY_DIR) / "tools" / "execute").string() + " --model " +
         TRAINPLAN_SOURCE_DIR + "/models/tiny.json --random-tokens ";
}

class ExecuteTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trainplan-trace-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string plan(const std::string& name, const std::string& fields) {
    const fs::path p = dir_ / (name + ".json");
    std::ofstream(p) << "{" << fields
                     << ", \"micro_batch_size\": 2, \"global_batch_size\": 4, "
                        "\"precision\": \"fp32\"}";
    return p.string();
  }
  static Json read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return Json::parse(s.str());
  }
  // Two steps, the second measured and traced; checks the trace against the report.
  void check_two_ranks(const std::string& plan_fields, const std::set<std::string>& processes) {
    const fs::path trace = dir_ / "trace.json", report = dir_ / "report.json";
    const Outcome r = run(execute(2) + "--plan " + plan("p", plan_fields) +
                          " --steps 2 --warmup 1 --out " + report.string() + " --trace " +
                          trace.string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("wrote the trace of step 2"), std::string::npos) << r.output;
    const Json t = read(trace), rep = read(report);
    std::set<std::string> names;
    std::map<int, double> traced_bytes;
    std::map<std::pair<int, int>, int> spans;  // (pid, tid) -> complete events
    for (const Json& e : t["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"]);
      if (e["ph"] != "X") continue;
      traced_bytes[e["pid"].get<int>()] += e["args"]["bytes_sent"].get<double>();
      ++spans[{e["pid"].get<int>(), e["tid"].get<int>()}];
    }
    EXPECT_EQ(names, processes);
    for (int pid : {0, 1}) EXPECT_GT((spans[{pid, 0}]), 0) << "rank " << pid << " compute";
    // One measured step: the report's bytes per group are the traced step's.
    for (const Json& rank : rep["ranks"]) {
      double bytes = 0;
      for (const auto& [group, c] : rank["comm"].items()) bytes += c["bytes_sent"].get<double>();
      const int pid = rank["rank"].get<int>();
      EXPECT_GT(bytes, 0) << "rank " << pid;
      EXPECT_EQ(traced_bytes[pid], bytes) << "rank " << pid;
    }
  }
  fs::path dir_;
};

TEST_F(ExecuteTrace, TensorParallelTwoRanks) {
  check_two_ranks("\"tp\": 2, \"pp\": 1, \"dp\": 1", {"rank 0 (stage 0)", "rank 1 (stage 0)"});
}

TEST_F(ExecuteTrace, PipelineTwoRanks) {
  check_two_ranks("\"tp\": 1, \"pp\": 2, \"dp\": 1", {"rank 0 (stage 0)", "rank 1 (stage 1)"});
}

TEST_F(ExecuteTrace, UnwritablePathIsAClearError) {
  const std::string bad = (dir_ / "no-such-dir" / "trace.json").string();
  const Outcome r = run(execute(1) + "--plan " + plan("one", "\"tp\": 1, \"pp\": 1, \"dp\": 1") +
                        " --steps 1 --warmup 0 --out " + (dir_ / "r.json").string() +
                        " --trace " + bad);
  EXPECT_NE(r.code, 0) << r.output;
  // mpirun forwards the rank's stderr in pieces that may interleave with other output, so the
  // message is looked for without its "execute: error:" prefix.
  EXPECT_NE(r.output.find("cannot write '" + bad + "'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(bad));
}

}  // namespace
}  // namespace trainplan
