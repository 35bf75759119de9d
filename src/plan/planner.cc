#include "plan/planner.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "core/check.h"
#include "plan/cost_model.h"
#include "plan/schedule_aware.h"
#include "schedule/generate.h"

namespace bw::plan {
namespace {

TemplateOptions template_options(const PlannerOptions& o, int m, const Profile& profile,
                                 const Cluster& cluster) {
  TemplateOptions t;
  t.cost.microbatches = m;
  t.cost.state_bytes_per_param_byte = o.state_bytes_per_param_byte;
  t.cost.max_stage_devices = o.max_stage_devices;
  t.threads = o.threads;
  t.schedule_kinds = o.schedule_kinds;
  t.evaluator = o.evaluator;
  if (!t.schedule_kinds.empty() && !t.evaluator)
    t.evaluator = simulator_evaluator(profile, cluster, o.state_bytes_per_param_byte);
  return t;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Why stages cannot be as wide as the node, or "" when they can.
std::string width_note(const CostModel& model, const Cluster& cluster, const TemplateOptions& opt) {
  const int g = cluster.devices_per_node, b = model.microbatch_size();
  if (model.max_stage_devices() >= g) return "";
  if (opt.cost.max_stage_devices > 0 && opt.cost.max_stage_devices <= b)
    return fmt::format(" Stages span at most {} of the {} devices of a node (--max-stage-devices).",
                       model.max_stage_devices(), g);
  return fmt::format(
      " A sharded stage splits every microbatch's samples over its devices, so it spans at most "
      "microbatch size = {} devices; {}a profile with larger microbatches (e.g. `breakwater "
      "profile synth --microbatch-size {}`) lets stages span up to {} devices.",
      b, b == 1 ? "with 1 no stage is sharded: " : "", g, g);
}

// Upper bound on the layers any pipeline can hold under 1F1B memory, or nullopt when there is
// none (some stage shape fits with every in-flight count up to m): stage s of S keeps
// j = min(m, S - s) microbatches in flight, distinct for the stages with j < m, and with j in
// flight holds at most c_j layers (the longest layer range that fits with j, on any allowed width).
std::optional<int> max_layers_in_a_pipeline(const CostModel& model, double mem_limit) {
  const int L = model.num_layers(), m = model.options().microbatches;
  const int cap = std::min(m, L + 1);
  std::vector<int> longest(cap + 1, 0);  // longest[k]: longest range tolerating exactly k
  for (int i = 0; i < L; ++i)
    for (int d = 1; d <= model.max_stage_devices(); ++d)
      for (int count = 1; i + count <= L; ++count) {
        const double fixed =
            model.stage_state_bytes(i, count, d) + model.stage_transient_bytes(i, count, d);
        const double act = model.stage_activation_bytes(i, count, d);
        if (fixed + act > mem_limit) break;
        const double k = act > 0 ? std::floor((mem_limit - fixed) / act) : cap;
        const int kk = static_cast<int>(std::min<double>(k, cap));
        longest[kk] = std::max(longest[kk], count);
      }
  for (int k = cap - 1; k >= 1; --k) longest[k] = std::max(longest[k], longest[k + 1]);
  if (longest[std::min(m, cap)] >= 1 && m <= L) return std::nullopt;
  long long total = 0;
  for (int j = 1; j <= std::min(m - 1, cap); ++j) total += longest[j];
  return static_cast<int>(std::min<long long>(total, L));
}

// Explains why nothing fits on `cluster`, with the node count that would or the memory term that
// does not fit.
[[noreturn]] void does_not_fit(const Profile& profile, const Cluster& cluster,
                               const TemplateOptions& opt) {
  Cluster bigger = cluster;
  bigger.num_nodes = profile.num_layers();
  TemplateOptions o = opt;
  o.max_nodes = bigger.num_nodes;
  o.min_nodes = cluster.num_nodes + 1;
  TemplateSet more =
      bigger.num_nodes > cluster.num_nodes ? generate_templates(profile, bigger, o) : TemplateSet{};
  const CostModel model(profile, cluster, opt.cost);
  const std::string note = width_note(model, cluster, opt);
  if (auto n0 = more.min_nodes()) {
    throw ConfigError(fmt::format(
        "model '{}' does not fit on {} nodes x {} devices of {} GB: its smallest pipeline needs "
        "{} nodes; use --nodes {} or more, or raise --memory-gb.{}",
        profile.model, cluster.num_nodes, cluster.devices_per_node, cluster.device_memory_gb, *n0,
        *n0, note));
  }
  const double mem = cluster.device_memory_bytes();
  const int w = model.max_stage_devices();
  // The heaviest layer on its own, on the allowed width where it needs least, one microbatch in
  // flight: the parameter state, the gathered copy and the activations.
  int worst = 0, worst_d = 1;
  double worst_bytes = -1;
  for (int l = 0; l < model.num_layers(); ++l) {
    double best = std::numeric_limits<double>::infinity();
    int best_d = 1;
    for (int d = 1; d <= w; ++d) {
      const double bytes = model.stage_memory(l, 1, d, 1);
      if (bytes < best) best = bytes, best_d = d;
    }
    if (best > worst_bytes) worst_bytes = best, worst = l, worst_d = best_d;
  }
  const auto gb = [](double bytes) { return bytes / 1e9; };
  const std::string terms = fmt::format(
      "layer '{}' on a stage of {} device(s) needs {:.2f} GB per device: parameters, gradients "
      "and AdamW state {:.2f} GB, gathered layer and gradient {:.2f} GB, activations {:.2f} GB "
      "per microbatch in flight ({} of the microbatch's {} samples)",
      profile.layers[worst].name, worst_d, gb(worst_bytes),
      gb(model.stage_state_bytes(worst, 1, worst_d)),
      gb(model.stage_transient_bytes(worst, 1, worst_d)),
      gb(model.stage_activation_bytes(worst, 1, worst_d)),
      (model.microbatch_size() + worst_d - 1) / worst_d, model.microbatch_size());
  if (worst_bytes > mem) {
    throw ConfigError(fmt::format(
        "model '{}' does not fit on devices of {} GB with any number of nodes: {}; raise "
        "--memory-gb or use a smaller microbatch.{}",
        profile.model, cluster.device_memory_gb, terms, note));
  }
  if (auto most = max_layers_in_a_pipeline(model, mem); most && *most < model.num_layers()) {
    throw ConfigError(fmt::format(
        "model '{}' does not fit on devices of {} GB with any number of nodes: the activations "
        "kept in flight do not fit. 1F1B keeps S - s microbatches in flight at stage s of S, and "
        "within {} GB a stage with j in flight holds at most as many layers as fit j microbatches' "
        "activations beside its parameter state, so a pipeline holds at most {} of the {} layers "
        "(e.g. {}); raise --memory-gb or use a profile with less activation memory per sample.{}",
        profile.model, cluster.device_memory_gb, cluster.device_memory_gb, *most,
        model.num_layers(), terms, note));
  }
  throw ConfigError(
      fmt::format("model '{}' does not fit on devices of {} GB even with one layer per node of {} "
                  "devices ({}); "
                  "raise --memory-gb or use more devices per node.{}",
                  profile.model, cluster.device_memory_gb, cluster.devices_per_node, terms, note));
}

// Whether schedule::generate accepts `kind` for template `t` with m microbatches.
bool generates(Template t, const std::string& kind, int m) {
  t.schedule = kind;
  try {
    schedule::check_spec(schedule_spec(t, m));
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Templates choose their kind at the template's microbatch count; the batch split may give a
// pipeline another count. Re-picks each pipeline's kind at the count it actually gets: the
// fastest (simulated at that count) that generate() accepts and that fits memory, else the
// accepted one with the least memory. Then the plan's predictions follow.
void fit_schedules(Plan& plan, const Profile& profile, const Cluster& cluster,
                   const TemplateOptions& opt) {
  if (opt.schedule_kinds.empty()) return;
  const CostModel model(profile, cluster, opt.cost);
  const double mem_limit = cluster.device_memory_bytes();
  for (auto& p : plan.pipelines) {
    const int m = p.microbatches;
    Template at_m = p.tmpl;
    at_m.microbatches = m;
    std::optional<std::pair<std::string, ScheduleEstimate>> fast, small;
    for (const auto& kind : opt.schedule_kinds) {
      if (!generates(at_m, kind, m)) continue;
      auto est = opt.evaluator(at_m, kind);
      if (!est) continue;
      const double ms = est->fixed_ms + est->per_microbatch_ms * m;
      if (est->peak_memory_bytes <= mem_limit &&
          (!fast || ms < fast->second.fixed_ms + fast->second.per_microbatch_ms * m))
        fast = std::make_pair(kind, *est);
      if (!small || est->peak_memory_bytes < small->second.peak_memory_bytes)
        small = std::make_pair(kind, *est);
    }
    auto& pick = fast ? fast : small;
    if (pick) {
      set_schedule(at_m, pick->first, pick->second, model);
      p.tmpl = std::move(at_m);
    }
    BW_CHECK(generates(p.tmpl, p.tmpl.schedule, m), "no schedule kind runs {} microbatches", m);
  }
  update_predictions(plan, cluster);
}

}  // namespace

PlanResult make_plan(const Profile& profile, const Cluster& cluster, int fault_tolerance,
                     int microbatches, const PlannerOptions& options) {
  validate(cluster);
  if (fault_tolerance < 0)
    throw ConfigError(fmt::format("fault tolerance must be >= 0, got {}", fault_tolerance));
  if (microbatches < 1 || microbatches > kMaxPlanMicrobatches)
    throw ConfigError(
        fmt::format("microbatches must be in [1, {}], got {}", kMaxPlanMicrobatches, microbatches));
  if (options.template_microbatches && *options.template_microbatches < 1)
    throw ConfigError(
        fmt::format("template microbatches must be >= 1, got {}", *options.template_microbatches));
  const int m1 = options.template_microbatches.value_or(
      std::max(1, ceil_div(microbatches, fault_tolerance + 1)));
  TemplateOptions opt = template_options(options, m1, profile, cluster);
  PlanResult best;
  best.templates = generate_templates(profile, cluster, opt);
  if (best.templates.templates.empty()) does_not_fit(profile, cluster, opt);
  best.plan =
      instantiate(best.templates, cluster.num_nodes, fault_tolerance, microbatches, cluster);
  fit_schedules(best.plan, profile, cluster, opt);
  if (options.template_microbatches) return best;
  const int m2 = std::max(1, ceil_div(microbatches, static_cast<int>(best.plan.pipelines.size())));
  if (m2 == m1) return best;
  PlanResult second;
  const TemplateOptions opt2 = template_options(options, m2, profile, cluster);
  second.templates = generate_templates(profile, cluster, opt2);
  if (second.templates.templates.empty()) return best;
  try {
    second.plan =
        instantiate(second.templates, cluster.num_nodes, fault_tolerance, microbatches, cluster);
    fit_schedules(second.plan, profile, cluster, opt2);
  } catch (const ConfigError&) {
    return best;
  }
  return second.plan.step_ms < best.plan.step_ms ? second : best;
}

}  // namespace bw::plan
