// Turns measurements and fits into the hardware profile `simulate --hardware` reads
// (hardware_profile_to_json, units in every key), the raw measurements (under the profile's
// "measurements" key), a cluster file describing this machine for `simulate --cluster`, and
// the printed tables. Parsers for /proc text take the text (the tool reads the files).
// Tested by tests/calibration/profile_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/collective_bench.h"
#include "calibration/executor_probe.h"
#include "calibration/fit.h"
#include "calibration/kernels.h"
#include "core/cost/compute_model.h"
#include "core/json_util.h"
#include "core/step_report.h"

namespace trainplan::calibration {

// From /proc/self/status: resident set now and its high-water mark, in bytes (0 if absent).
struct ProcessMemory {
  double rss_bytes = 0;
  double hwm_bytes = 0;
};
ProcessMemory parse_proc_status(std::string_view text);
// From /proc/cpuinfo: the first "model name" (empty if absent).
std::string parse_cpu_model(std::string_view text);
// From /proc/meminfo: MemTotal in bytes (0 if absent).
double parse_mem_total_bytes(std::string_view text);

struct Measurements {
  std::vector<TaskSample> tasks;  // the executor's code per cost-model task, and GEMM sweeps
  std::vector<StreamSample> stream;
  std::vector<CollectiveSample> collectives;  // benchmark loop; empty with one rank
  // The executor's collectives inside its traced steps (executor_probe.h); empty with one rank.
  std::vector<CollectiveSample> step_collectives;
  // The ranks' compute between waits per traced step (executor_probe.h); empty with one rank.
  std::vector<SkewSample> skew;
  // Each rank's traced compute in the executor probes, summed over the probes (index: rank;
  // add_rank_compute); empty with one rank. Gives profile.rank_compute_time_factor.
  std::vector<double> rank_compute_s;
  ProcessMemory baseline;                     // before any model-sized allocation (max over ranks)
  // The reference kernel before the executor's steps, after them and after the GEMM sweep
  // (rank 0's); written as measurements.reference_gemm (reference_gemm_json).
  ReferenceSamples reference;
  // The triad reference at the same points (rank 0's); measurements.reference_triad.
  TriadReferenceSamples triad_reference;
  // The NVMe offload tier's file I/O (time_offload_file, calibrate --offload-dir), every active
  // rank at once on its own file; this rank's samples and the directory's free space (bytes).
  // Empty: not measured.
  std::vector<FileIoSample> file_io;
  double file_io_free_bytes = 0;
};

// measurements.reference_gemm: the shape, the calls per sample, every sample's rate, their
// median ("flops_per_s", what validation/reference_gate.h compares an in-run rate with) and
// their spread ((max - min) / median, percent: how much the host's speed moved during the
// calibration itself). Null when not measured.
Json reference_gemm_json(const ReferenceSamples& r);
// measurements.reference_triad: the same for the triad, its rate in bytes/s ("bytes_per_s",
// "samples_bytes_per_s") and its size in elements. Null when not measured.
Json reference_triad_json(const TriadReferenceSamples& r);

// Adds one probe's per-rank traced compute (ProbeSamples::rank_compute_s) to m.rank_compute_s,
// entry by entry. A probe over another number of ranks is left out (the factors are per rank of
// one world).
void add_rank_compute(Measurements& m, const std::vector<double>& per_rank_s);

struct Calibration {
  HardwareProfile profile;
  ComputeFit compute;
  bool has_link_fit = false;
  bool links_from_steps = false;  // fitted to step_collectives, not the benchmark loop
  LinkFit links;
  // The spread the skew samples gave before it was held at the profile's bound of 1 (a rank's
  // compute with a standard deviation above its mean: other processes sharing the cores);
  // equal to profile.rank_compute_spread when within it.
  double measured_rank_compute_spread = 0;
  // The NVMe tier per rank (bytes/s, one direction: the median of Measurements::file_io) and the
  // directory's free space; 0 when not measured.
  double file_io_bytes_per_s = 0;
  double file_io_free_bytes = 0;
};

// Now, UTC, ISO 8601 ("2026-11-22T03:24:37Z"): MachineIdentity::date.
std::string iso8601_utc_now();

struct MachineIdentity {
  std::string cpu_model;     // /proc/cpuinfo model name; with kind "gpu", the GPU's name
  std::int64_t ranks = 1;    // processes measured at once
  std::int64_t threads_per_rank = 1;
  std::string date;          // ISO 8601
  std::string kind = "cpu";  // "cpu" (ranks are threads) or "gpu" (ranks are GPUs)
};

// Fits and assembles the profile. Link figures only when collectives were measured: from the
// executor's step collectives when there are any, else from the benchmark loop.
// The executing process's own fixed memory: from a measured run of `execute` on a negligible
// model (models/probe.json), each rank's measured peak less the model memory the cost model
// predicts for it; the largest over ranks. Measured in the process that will run the plans,
// so it includes that binary's libraries and MPI buffers, which calibrate's own process
// cannot see.
Result<double> executor_baseline_bytes(const StepReport& probe, std::string_view source);

Result<Calibration> calibrate_from(const Measurements& m, const MachineIdentity& id,
                                   const ComputeFitOptions& options = {});
// The best streaming bandwidth among the samples (bytes/s).
double best_stream_bytes_per_s(const std::vector<StreamSample>& stream);

Json measurements_to_json(const Measurements& m, const Calibration& c);
// hardware_profile_to_json plus "measurements" and fit residuals under "notes".
Json profile_json(const Calibration& c, const Measurements& m);
// A cluster file for cluster_from_json: one node, `ranks_per_node` "GPUs" that are this CPU's
// ranks (or, with a gpu_name, this node's GPUs), with the fitted rates and links and
// memory_bytes_per_rank of capacity. For CPU ranks also the offload tiers' figures: a rank's
// host memory is the same DRAM, so pcie_GBps is the fitted elementwise (copy) bandwidth,
// host_memory_GBps_per_node the fitted optimizer-kernel bandwidth times the ranks, and
// host_memory_GB_per_node the ranks' capacity; with file I/O measured, nvme_GBps_per_node the
// measured rate times the ranks (each rank has its own file, all timed at once) and
// nvme_TB_per_node the directory's free space.
Json cpu_cluster_json(const Calibration& c, std::int64_t ranks_per_node,
                      double memory_bytes_per_rank, const std::string& gpu_name = "");

// Each sample: measured, fitted (sum of task_time_s) and the error in percent.
std::string format_task_table(const std::vector<TaskSample>& samples, const DeviceRates& fitted);
std::string format_stream_table(const std::vector<StreamSample>& stream);
std::string format_fit_summary(const Calibration& c);

}  // namespace trainplan::calibration
