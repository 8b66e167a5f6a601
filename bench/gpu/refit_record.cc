// Fits a GPU lease's profile again, here, with this build's calibrate fit (calibration/fit.h),
// from the per-probe measurements its matrix record keeps (bench/gpu/matrix_record.py: the CUDA
// executor's task times and the device-copy bandwidths), and writes a copy of the record with
// the new profile for bench/gpu/repredict.sh. A change to the fit is then checked against every
// lease's measurements without a GPU. The probes are calibrate --backend cuda's
// (calibration/executor_probe.h, cuda_probe_plan); the models are the record's.
//
// Run: build/bench/gpu/refit_record RECORD OUT
// Prints the fitted efficiencies next to the lease's and calibrate's fit summary. Exit status 2
// with a message naming the file and field for a record it cannot read (no `measurements`: a
// record packed before they were kept). Tested by tests/bench/repredict_script_test.sh.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "calibration/executor_probe.h"
#include "calibration/fit.h"
#include "calibration/profile.h"
#include "core/cost/compute_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/units.h"

namespace tp = trainplan;
namespace cal = trainplan::calibration;

namespace {

int fail(const std::string& what) {
  std::cerr << "refit_record: " << what << "\n";
  return 2;
}

// "MODEL, micro-batch B, R rank(s)" of one of `models`: its plan; false if none matches.
bool probe_plan_of(const std::string& probe, const std::vector<tp::ModelSpec>& models,
                   tp::ModelSpec& model, tp::Plan& plan) {
  for (const tp::ModelSpec& m : models) {
    const std::string head = m.name + ", micro-batch ";
    if (probe.rfind(head, 0) != 0) continue;
    long long b = 0, r = 0;
    char tail[16] = {};
    if (std::sscanf(probe.c_str() + head.size(), "%lld, %lld rank%15s", &b, &r, tail) != 3 ||
        b < 1 || r < 1)
      return false;
    model = m;
    plan = cal::cuda_probe_plan(r, b);
    return cal::cuda_probe_name(model, plan) == probe;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: refit_record RECORD OUT");
  const std::string path = argv[1], out = argv[2];
  std::ifstream in(path);
  if (!in) return fail("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = tp::parse_json_text(text.str(), path);
  if (!parsed.ok()) return fail(parsed.status().message());
  tp::Json record = *parsed;
  if (!record.contains("measurements") || !record["measurements"].contains("tasks") ||
      !record["measurements"].contains("stream"))
    return fail(path + ": no 'measurements' with 'tasks' and 'stream' (a record packed before "
                       "bench/gpu/matrix_record.py kept them)");
  if (!record.contains("models") || !record.contains("profile"))
    return fail(path + ": no 'models' or 'profile'");
  std::vector<tp::ModelSpec> models;
  for (const auto& [key, j] : record["models"].items()) {
    auto m = tp::model_from_json(j, path + ": models." + key);
    if (!m.ok()) return fail(m.status().message());
    models.push_back(*m);
  }
  auto lease = tp::hardware_profile_from_json(record["profile"], path + ": profile");
  if (!lease.ok()) return fail(lease.status().message());

  cal::Measurements m;
  for (const tp::Json& t : record["measurements"]["tasks"]) {
    const std::string probe = t.value("probe", ""), name = t.value("name", "");
    tp::ModelSpec model;
    tp::Plan plan;
    if (!probe_plan_of(probe, models, model, plan))
      return fail(path + ": measurements.tasks: probe '" + probe +
                  "' is not a CUDA calibration probe of the record's models");
    auto s = cal::task_sample_of_span(model, plan, 0, probe, name, t.value("calls", 0),
                                      t.value("time_us", 0.0) * tp::kUs);
    if (!s.ok()) return fail(s.status().message());
    m.tasks.push_back(*s);
  }
  for (const tp::Json& s : record["measurements"]["stream"]) {
    cal::StreamSample st;
    st.kernel = s.value("kernel", "");
    st.array_bytes = s.value("array_MB", 0.0) * tp::kMB;
    st.bytes_moved = 2.0 * st.array_bytes;  // a copy: read and write (calibrate_cuda.cc)
    st.time_s = s.value("time_us", 0.0) * tp::kUs;
    m.stream.push_back(st);
  }
  cal::MachineIdentity id;
  id.kind = "gpu";
  id.date = lease->date;
  auto calib = cal::calibrate_from(m, id, cal::gpu_fit_options(lease->rates.sm_count));
  if (!calib.ok()) return fail(calib.status().message());
  tp::HardwareProfile& p = calib->profile;
  p.device = lease->device;
  p.baseline_memory_bytes = 0;  // as calibrate --backend cuda writes it
  const tp::DeviceRates& was = lease->rates;
  const tp::DeviceRates& now = p.rates;
  std::printf("%-32s %10s %10s\n", "", "lease", "refit");
  auto row = [](const char* k, double a, double b) { std::printf("%-32s %10.4g %10.4g\n", k, a, b); };
  row("gemm_efficiency", was.gemm_efficiency, now.gemm_efficiency);
  row("gemm_input_gradient_efficiency", was.gemm_input_gradient_efficiency,
      now.gemm_input_gradient_efficiency);
  row("gemm_weight_gradient_efficiency", was.gemm_weight_gradient_efficiency,
      now.gemm_weight_gradient_efficiency);
  row("attention_efficiency", was.attention_efficiency, now.attention_efficiency);
  row("attention_backward_efficiency", was.attention_backward_efficiency,
      now.attention_backward_efficiency);
  row("kernel_overhead_us", was.kernel_overhead_s / tp::kUs, now.kernel_overhead_s / tp::kUs);
  row("k_half", was.k_half, now.k_half);
  std::cout << cal::format_fit_summary(*calib);
  record["profile"] = tp::hardware_profile_to_json(p);
  std::ofstream o(out);
  o << record.dump(1) << "\n";
  if (!o) return fail("cannot write '" + out + "'");
  return 0;
}
