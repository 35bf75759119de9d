#include "plan/planner.h"

#include <fmt/format.h>

#include <optional>
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
  t.threads = o.threads;
  t.schedule_kinds = o.schedule_kinds;
  t.evaluator = o.evaluator;
  if (!t.schedule_kinds.empty() && !t.evaluator)
    t.evaluator = simulator_evaluator(profile, cluster, o.state_bytes_per_param_byte);
  return t;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Explains why nothing fits on `cluster`, with the node count that would.
[[noreturn]] void does_not_fit(const Profile& profile, const Cluster& cluster,
                               const TemplateOptions& opt) {
  Cluster bigger = cluster;
  bigger.num_nodes = profile.num_layers();
  TemplateOptions o = opt;
  o.max_nodes = bigger.num_nodes;
  o.min_nodes = cluster.num_nodes + 1;
  TemplateSet more =
      bigger.num_nodes > cluster.num_nodes ? generate_templates(profile, bigger, o) : TemplateSet{};
  if (auto n0 = more.min_nodes()) {
    throw ConfigError(fmt::format(
        "model '{}' does not fit on {} nodes x {} devices of {} GB: its smallest pipeline needs "
        "{} nodes; use --nodes {} or more, or raise --memory-gb",
        profile.model, cluster.num_nodes, cluster.devices_per_node, cluster.device_memory_gb, *n0,
        *n0));
  }
  throw ConfigError(fmt::format(
      "model '{}' does not fit on devices of {} GB even with one layer per node of {} devices; "
      "raise --memory-gb, use more devices per node, or a smaller microbatch",
      profile.model, cluster.device_memory_gb, cluster.devices_per_node));
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
    throw ConfigError(fmt::format("microbatches must be in [1, {}], got {}", kMaxPlanMicrobatches,
                                  microbatches));
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
