// The Python module `trainplan` (pybind11): load a model and a cluster, plan and simulate, with
// dicts in and dicts out. plan() returns what `plan --json` prints and simulate() what
// `simulate --json` prints (the same library calls with the same defaults), so scripts can
// call the planner without parsing tool output. Errors raise ValueError with the tools'
// message (the field and the value). Files are read only when a path is given.
// Tested by python/test_trainplan.py (ctest: python_module), which also checks plan() and
// simulate() against the tools' --json byte for byte.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "core/build_info.h"
#include "core/cluster_spec.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "planner/planner.h"
#include "planner/refine.h"
#include "planner/report.h"
#include "simulator/simulator.h"
#include "validation/coverage.h"
#include "validation/error_band.h"

namespace py = pybind11;

namespace trainplan::python {
namespace {

// Python value <-> our JSON, through Python's json module (exact for what json.dumps accepts).
Json to_json(const py::handle& value, const std::string& what) {
  const std::string text = py::module_::import("json").attr("dumps")(value).cast<std::string>();
  auto j = parse_json_text(text, what);
  if (!j.ok()) throw py::value_error(j.status().message());
  return *j;
}
py::object to_python(const Json& json) {
  return py::module_::import("json").attr("loads")(json.dump());
}

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) throw py::value_error(r.status().message());
  return std::move(*r);
}

// A dict, or a path to a JSON file (read here, at the edge).
Json json_argument(const py::handle& arg, const std::string& what) {
  if (!py::isinstance<py::str>(arg)) return to_json(arg, what);
  const std::string path = arg.cast<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw py::value_error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return value_or_raise(parse_json_text(ss.str(), path));
}

ModelSpec model_argument(const py::handle& arg, std::optional<std::int64_t> seq_len,
                         bool allow_unknown_model_type) {
  const std::string source = py::isinstance<py::str>(arg) ? arg.cast<std::string>() : "model";
  HfReadOptions hf;
  hf.allow_unknown_model_type = allow_unknown_model_type;
  ModelSpec m = value_or_raise(model_from_json_with(json_argument(arg, source), source, hf));
  return seq_len ? value_or_raise(with_seq_len(m, *seq_len)) : m;
}

ClusterSpec cluster_argument(const py::handle& arg) {
  const std::string source = py::isinstance<py::str>(arg) ? arg.cast<std::string>() : "cluster";
  return value_or_raise(cluster_from_json(json_argument(arg, source), source));
}

// plan()'s options, named as `plan`'s command-line options with '_' for '-'; defaults are the
// tool's. Unknown keys are an error naming the key.
PlannerOptions planner_options(const Json& j, const ClusterSpec& cluster,
                               std::optional<double>& tokens) {
  PlannerOptions opt;
  JsonReader r(j, "plan options");
  r.get_int("global_batch", opt.global_batch_size, 1, PlanLimits::kMaxBatch, false);
  r.get_double("memory_headroom", opt.memory_headroom, 0.0, 0.99, false);
  r.get_int("top", opt.top_k, 1, 1000, false);
  r.get_int("simulate_top", opt.simulate_top, 0, 1000, false);
  r.get_int("max_cp", opt.max_cp, 1, PlanLimits::kMaxDegree, false);
  double run_tokens = 0;
  if (r.get_double("tokens", run_tokens, 1, 1e18, false)) tokens = run_tokens;
  int precision = 0;
  const bool precision_given =
      r.get_choice("precision", precision, {"bf16", "fp16", "fp32"}, false);
  opt.precision = static_cast<Precision>(precision);
  // As `plan`: bf16 where the GPU has it, fp16 on Volta.
  if (!precision_given && cluster.gpu.peak_flops_per_s(Precision::kBf16) <= 0)
    opt.precision = Precision::kFp16;
  int optimizer = 0, attention = 0;
  if (r.get_choice("optimizer", optimizer, {"adamw", "sgd", "sgd-momentum"}, false))
    opt.optimizer = static_cast<Optimizer>(optimizer);
  if (r.get_choice("attention", attention, {"fused", "unfused"}, false))
    opt.attention = static_cast<AttentionImpl>(attention);
  r.get_bool("fp8", opt.fp8, false);
  r.get_bool("allow_cross_node_tp", opt.allow_cross_node_tp, false);
  r.get_double("tie_tolerance", opt.tie_tolerance, 0.0, 1.0, false);
  // As `plan` without --hardware: the expected error from the published runs of this GPU.
  opt.error_band = expected_error_band(cluster.gpu.name, corpus_residuals());
  // As `plan`: among tied candidates, a pipeline the published runs of this GPU measured.
  opt.measured = measured_layouts_for(cluster.gpu.name, corpus_layouts());
  bool no_prefer_measured = false;
  r.get_bool("no_prefer_measured", no_prefer_measured, false);
  opt.prefer_measured = !no_prefer_measured;
  if (Status st = r.finish(); !st.ok()) throw py::value_error(st.message());
  return opt;
}

py::object plan(const py::handle& model_arg, const py::handle& cluster_arg,
                const py::handle& options_arg) {
  const ModelSpec model = model_argument(model_arg, std::nullopt, false);
  const ClusterSpec cluster = cluster_argument(cluster_arg);
  std::optional<double> tokens;
  const Json options = options_arg.is_none() ? Json::object() : to_json(options_arg, "options");
  PlannerOptions opt = planner_options(options, cluster, tokens);
  SimOptions sim_opt;
  // As `plan`: long pipelines are played as two short steps and extrapolated.
  sim_opt.extrapolate_above_micro_batches = 32;
  // As `plan`: the batch said beside it, and the usual layout (or what fills memory) beside the
  // pick.
  ReportContext ctx;
  ctx.model = &model;
  ctx.cluster = &cluster;
  ctx.options = &opt;
  ctx.run_tokens = tokens;
  ctx.batch_source = opt.global_batch_size > 0
                         ? "--global-batch " + std::to_string(opt.global_batch_size)
                         : default_batch_source(model);
  if (opt.global_batch_size == 0)
    opt.global_batch_size = default_global_batch(model, cluster.total_gpus());
  const RefineFn refine = simulator_refine(model, cluster, sim_opt);
  PlanResult result = [&] {
    py::gil_scoped_release release;  // a search takes a fraction of a second to seconds
    PlanResult r = value_or_raise(plan_training(model, cluster, opt, refine));
    add_usual_references(ctx, r, refine);
    return r;
  }();
  return to_python(plan_report_to_json(result, ctx));
}

py::object simulate(const py::handle& model_arg, const py::handle& cluster_arg,
                    const py::handle& plan_arg) {
  const ModelSpec model = model_argument(model_arg, std::nullopt, false);
  const ClusterSpec cluster = cluster_argument(cluster_arg);
  const std::string source = py::isinstance<py::str>(plan_arg) ? plan_arg.cast<std::string>()
                                                                : "plan";
  const Plan p = value_or_raise(plan_from_json(json_argument(plan_arg, source), source));
  if (Status st = check_plan_world_size(p, cluster.total_gpus()); !st.ok())
    throw py::value_error(st.message());
  if (Status st = check_plan_fits_model(p, model); !st.ok()) throw py::value_error(st.message());
  SimResult res = value_or_raise(simulate_step(model, cluster, p, SimOptions{}));
  return to_python(step_report_to_json(res.report));
}

}  // namespace
}  // namespace trainplan::python

PYBIND11_MODULE(trainplan, m) {
  using namespace trainplan;
  using namespace trainplan::python;
  m.doc() = "trainplan: plan and simulate parallel transformer training (dicts in, dicts out)";
  m.attr("__version__") = build_info().version;
  m.def("build_info", [] { return to_python(build_info_json()); },
        "The version, git commit and compiler of this build.");
  m.def(
      "load_model",
      [](const py::handle& model, std::optional<std::int64_t> seq_len, bool allow_unknown) {
        return to_python(model_to_json(model_argument(model, seq_len, allow_unknown)));
      },
      py::arg("model"), py::arg("seq_len") = py::none(),
      py::arg("allow_unknown_model_type") = false,
      "A model (our JSON or a Hugging Face config.json; a dict or a path) as trainplan reads it.");
  m.def(
      "load_cluster", [](const py::handle& cluster) {
        return to_python(cluster_to_json(cluster_argument(cluster)));
      },
      py::arg("cluster"), "A cluster (a dict or a path), with every figure filled in.");
  m.def(
      "make_cluster",
      [](const std::string& gpu, std::int64_t gpus, std::optional<std::int64_t> per_node) {
        const std::int64_t node = per_node ? *per_node : value_or_raise(preset_gpus_per_node(gpu));
        return to_python(cluster_to_json(value_or_raise(make_cluster(gpu, gpus, node))));
      },
      py::arg("gpu") = "H100-80GB", py::arg("gpus") = 8, py::arg("gpus_per_node") = py::none(),
      "A cluster of a preset GPU, as `--gpus N --gpu NAME` builds it.");
  m.def("plan", &plan, py::arg("model"), py::arg("cluster"), py::arg("options") = py::none(),
        "Rank the plans for model on cluster; returns what `plan --json` prints.");
  m.def("simulate", &simulate, py::arg("model"), py::arg("cluster"), py::arg("plan"),
        "Simulate one step of plan; returns what `simulate --json` prints.");
}
