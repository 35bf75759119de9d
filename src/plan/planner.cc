#include "plan/planner.h"

#include <fmt/format.h>

#include "plan/schedule_aware.h"

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

}  // namespace

PlanResult make_plan(const Profile& profile, const Cluster& cluster, int fault_tolerance,
                     int microbatches, const PlannerOptions& options) {
  validate(cluster);
  if (fault_tolerance < 0)
    throw ConfigError(fmt::format("fault tolerance must be >= 0, got {}", fault_tolerance));
  if (microbatches < 1)
    throw ConfigError(fmt::format("microbatches must be >= 1, got {}", microbatches));
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
  if (options.template_microbatches) return best;
  const int m2 = std::max(1, ceil_div(microbatches, static_cast<int>(best.plan.pipelines.size())));
  if (m2 == m1) return best;
  PlanResult second;
  second.templates =
      generate_templates(profile, cluster, template_options(options, m2, profile, cluster));
  if (second.templates.templates.empty()) return best;
  try {
    second.plan =
        instantiate(second.templates, cluster.num_nodes, fault_tolerance, microbatches, cluster);
  } catch (const ConfigError&) {
    return best;
  }
  return second.plan.step_ms < best.plan.step_ms ? second : best;
}

}  // namespace bw::plan
