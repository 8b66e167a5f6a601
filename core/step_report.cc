// StepReport JSON; see step_report.h. Tested by tests/core/step_report_test.cc.
#include "core/step_report.h"

#include "core/build_info.h"

#include <algorithm>
#include <limits>

namespace trainplan {

namespace {
Json memory_to_json(const MemoryBreakdown& m) {
  Json j = {{"weights_bytes", m.weights_bytes},         {"gradients_bytes", m.gradients_bytes},
          {"optimizer_bytes", m.optimizer_bytes},     {"activations_bytes", m.activations_bytes},
          {"buffers_bytes", m.buffers_bytes},         {"host_optimizer_bytes", m.host_optimizer_bytes},
          {"runtime_bytes", m.runtime_bytes}};
  // Written only when used, so that reports without checkpoint offload keep their JSON.
  if (m.host_activation_bytes > 0) j["host_activation_bytes"] = m.host_activation_bytes;
  if (m.host_param_bytes > 0) j["host_param_bytes"] = m.host_param_bytes;
  if (m.nvme_bytes > 0) j["nvme_bytes"] = m.nvme_bytes;
  return j;
}
Status memory_from_json(const Json& j, const std::string& where, MemoryBreakdown& m) {
  JsonReader r(j, where);
  r.get_double("weights_bytes", m.weights_bytes, 0, 1e18, false);
  r.get_double("gradients_bytes", m.gradients_bytes, 0, 1e18, false);
  r.get_double("optimizer_bytes", m.optimizer_bytes, 0, 1e18, false);
  r.get_double("activations_bytes", m.activations_bytes, 0, 1e18, false);
  r.get_double("buffers_bytes", m.buffers_bytes, 0, 1e18, false);
  r.get_double("host_optimizer_bytes", m.host_optimizer_bytes, 0, 1e18, false);
  r.get_double("host_activation_bytes", m.host_activation_bytes, 0, 1e18, false);
  r.get_double("host_param_bytes", m.host_param_bytes, 0, 1e18, false);
  r.get_double("nvme_bytes", m.nvme_bytes, 0, 1e18, false);
  r.get_double("runtime_bytes", m.runtime_bytes, 0, 1e18, false);
  return r.finish();
}
}  // namespace

Json step_report_to_json(const StepReport& s) {
  Json j;
  j["schema"] = "trainplan.step_report/1";
  j["build"] = build_info_json();
  j["kind"] = s.kind;
  j["source"] = s.source;
  j["model"] = s.model;
  j["plan"] = s.plan;
  j["cluster"] = s.cluster;
  j["step_time_s"] = s.step_time_s;
  j["tokens_per_s"] = s.tokens_per_s;
  j["model_tflops_per_gpu"] = s.model_tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = s.hardware_tflops_per_gpu;
  j["mfu"] = s.mfu;
  j["bubble_fraction"] = s.bubble_fraction;
  j["bytes_per_group"] = s.bytes_per_group;
  Json ranks = Json::array();
  for (const RankStep& r : s.ranks) {
    Json rj;
    rj["rank"] = r.rank;
    rj["stage"] = r.stage;
    rj["peak_memory_bytes"] = r.peak_memory_bytes;
    rj["memory"] = memory_to_json(r.memory);
    rj["compute_s"] = r.compute_s;
    rj["optimizer_s"] = r.optimizer_s;
    rj["idle_s"] = r.idle_s;
    Json cj = Json::object();
    for (const auto& [name, g] : r.comm)
      cj[name] = {{"bytes_sent", g.bytes_sent}, {"time_s", g.time_s}, {"exposed_s", g.exposed_s}};
    rj["comm"] = cj;
    ranks.push_back(rj);
  }
  j["ranks"] = ranks;
  if (!s.loss.empty()) j["loss"] = s.loss;
  if (!s.aux_loss.empty()) j["aux_loss"] = s.aux_loss;
  if (!s.step_times_s.empty()) j["step_times_s"] = s.step_times_s;
  if (s.kind == "measured") j["warmup_steps"] = s.warmup_steps;
  return j;
}

Result<StepReport> step_report_from_json(const Json& j, std::string_view source) {
  StepReport s;
  const std::string where = "step report '" + std::string(source) + "'";
  JsonReader r(j, where);
  std::string schema;
  r.get_string("schema", schema, true);
  r.accept("build");  // which build wrote it; not compared
  if (!r.failed() && schema != "trainplan.step_report/1")
    r.fail_field("schema", "unsupported schema \"" + schema + "\" (expected trainplan.step_report/1)");
  r.get_string("kind", s.kind, true);
  if (!r.failed() && s.kind != "predicted" && s.kind != "measured")
    r.fail_field("kind", "unknown value \"" + s.kind + "\" (expected one of: predicted, measured)");
  r.get_string("source", s.source, false);
  for (const char* k : {"model", "plan", "cluster"}) {
    r.accept(k);
    if (j.is_object() && j.contains(k)) {
      if (std::string(k) == "model") s.model = j[k];
      if (std::string(k) == "plan") s.plan = j[k];
      if (std::string(k) == "cluster") s.cluster = j[k];
    }
  }
  r.get_double("step_time_s", s.step_time_s, 0, 1e12, true);
  r.get_double("tokens_per_s", s.tokens_per_s, 0, 1e18, false);
  r.get_double("model_tflops_per_gpu", s.model_tflops_per_gpu, 0, 1e9, false);
  r.get_double("hardware_tflops_per_gpu", s.hardware_tflops_per_gpu, 0, 1e9, false);
  r.get_double("mfu", s.mfu, 0, 1e3, false);
  r.get_double("bubble_fraction", s.bubble_fraction, 0, 1, false);
  r.get_int("warmup_steps", s.warmup_steps, 0, 1 << 30, false);
  r.accept("bytes_per_group");
  r.accept("ranks");
  r.accept("loss");
  r.accept("aux_loss");
  r.accept("step_times_s");
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  auto number_list = [&](const char* key, std::vector<double>& out, double min) -> Status {
    if (!j.contains(key)) return Status::Ok();
    if (!j[key].is_array()) return Status::Error(where + ": field '" + key + "': expected an array");
    for (const Json& v : j[key]) {
      if (!v.is_number() || v.get<double>() < min)
        return Status::Error(where + ": field '" + key + "': entry " + json_value_for_message(v) +
                             (v.is_number() ? " is negative" : " is not a number"));
      out.push_back(v.get<double>());
    }
    return Status::Ok();
  };
  TRAINPLAN_RETURN_IF_ERROR(number_list("loss", s.loss, std::numeric_limits<double>::lowest()));
  TRAINPLAN_RETURN_IF_ERROR(number_list("step_times_s", s.step_times_s, 0.0));
  TRAINPLAN_RETURN_IF_ERROR(number_list("aux_loss", s.aux_loss, 0.0));
  if (j.contains("bytes_per_group")) {
    const Json& b = j["bytes_per_group"];
    if (!b.is_object()) return Status::Error(where + ": field 'bytes_per_group': expected an object");
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!it->is_number() || it->get<double>() < 0)
        return Status::Error(where + ": field 'bytes_per_group." + it.key() +
                             "': expected a number >= 0, got " + json_value_for_message(*it));
      s.bytes_per_group[it.key()] = it->get<double>();
    }
  }
  if (j.contains("ranks")) {
    if (!j["ranks"].is_array()) return Status::Error(where + ": field 'ranks': expected an array");
    std::size_t i = 0;
    for (const Json& rj : j["ranks"]) {
      RankStep rs;
      const std::string rw = where + " ranks[" + std::to_string(i++) + "]";
      JsonReader rr(rj, rw);
      rr.get_int("rank", rs.rank, 0, std::int64_t{1} << 40, true);
      rr.get_int("stage", rs.stage, 0, std::int64_t{1} << 40, false);
      rr.get_double("peak_memory_bytes", rs.peak_memory_bytes, 0, 1e18, false);
      rr.get_double("compute_s", rs.compute_s, 0, 1e12, false);
      rr.get_double("optimizer_s", rs.optimizer_s, 0, 1e12, false);
      rr.get_double("idle_s", rs.idle_s, 0, 1e12, false);
      const Json* mem = rr.get_object("memory", false);
      const Json* cm = rr.get_object("comm", false);
      TRAINPLAN_RETURN_IF_ERROR(rr.finish());
      if (mem) TRAINPLAN_RETURN_IF_ERROR(memory_from_json(*mem, rw + " memory", rs.memory));
      if (cm) {
        for (auto it = cm->begin(); it != cm->end(); ++it) {
          GroupComm g;
          JsonReader gr(*it, rw + " comm." + it.key());
          gr.get_double("bytes_sent", g.bytes_sent, 0, 1e18, false);
          gr.get_double("time_s", g.time_s, 0, 1e12, false);
          gr.get_double("exposed_s", g.exposed_s, 0, 1e12, false);
          TRAINPLAN_RETURN_IF_ERROR(gr.finish());
          rs.comm[it.key()] = g;
        }
      }
      s.ranks.push_back(rs);
    }
  }
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void set_measured_steps(StepReport& r, const ModelSpec& model, const Plan& plan,
                        std::vector<double> step_times_s, std::vector<double> losses,
                        std::int64_t warmup, std::int64_t gpus, double peak_flops_per_s) {
  const auto first = static_cast<std::ptrdiff_t>(
      std::clamp<std::int64_t>(warmup, 0, static_cast<std::int64_t>(step_times_s.size())));
  r.kind = "measured";
  r.model = model_to_json(model);
  r.plan = plan_to_json(plan);
  r.step_time_s = median(std::vector<double>(step_times_s.begin() + first, step_times_s.end()));
  const double tokens = static_cast<double>(plan.global_batch_size * model.seq_len);
  r.tokens_per_s = r.step_time_s > 0 ? tokens / r.step_time_s : 0.0;
  const StepFlops flops = step_flops(model, plan);
  const double per_gpu = r.step_time_s > 0 ? 1.0 / (r.step_time_s * static_cast<double>(gpus)) : 0;
  r.model_tflops_per_gpu = flops.model * per_gpu / kTFLOP;
  r.hardware_tflops_per_gpu = flops.hardware * per_gpu / kTFLOP;
  r.mfu = peak_flops_per_s > 0 ? flops.model * per_gpu / peak_flops_per_s : 0.0;
  r.loss = std::move(losses);
  r.step_times_s = std::move(step_times_s);
  r.warmup_steps = warmup;
}

void add_group_comm(StepReport& report, RankStep& rank, CommGroup g, const GroupComm& c) {
  if (c.bytes_sent == 0 && c.time_s == 0) return;
  const std::string name(report_group(g));
  GroupComm& gc = rank.comm[name];
  gc.bytes_sent += c.bytes_sent;
  gc.time_s += c.time_s;
  gc.exposed_s += c.exposed_s;
  report.bytes_per_group[name] += c.bytes_sent;
}

TimeNs covered_ns(const std::vector<std::pair<TimeNs, TimeNs>>& busy, TimeNs a, TimeNs b) {
  if (b <= a) return 0;
  auto it = std::upper_bound(busy.begin(), busy.end(), std::make_pair(a, TimeNs{0}),
                             [](const auto& x, const auto& y) { return x.first < y.first; });
  if (it != busy.begin()) --it;
  TimeNs total = 0;
  for (; it != busy.end() && it->first < b; ++it)
    total += std::max<TimeNs>(0, std::min(b, it->second) - std::max(a, it->first));
  return total;
}

}  // namespace trainplan
