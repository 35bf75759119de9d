// One call from a profile and a cluster to templates and a plan: what `breakwater plan`, the
// coordinator and the forecast use.
//
// Templates are optimised for a microbatch count m per pipeline, which depends on how many
// pipelines the plan will have. Unless m is given, the planner runs twice: with
// m = ceil(B / (f + 1)), then with m = ceil(B / P) for the P pipelines the first plan chose, and
// keeps the plan with the lower predicted step time (ties: the first).
#pragma once

#include <functional>
#include <optional>

#include "plan/instantiate.h"
#include "plan/plan_cost.h"

namespace bw::plan {

// Most microbatches per global batch make_plan accepts (docs/planning.md).
inline constexpr int kMaxPlanMicrobatches = 1 << 20;

struct PlannerOptions {
  std::optional<int> template_microbatches;  // m; default as above
  double state_bytes_per_param_byte = kStateBytesPerParamByte;
  int max_stage_devices = 0;  // widest stage (1 = no sharding); 0 = devices per node
  bool recompute = false;     // activation recomputation (CostOptions::recompute)
  int threads = 1;
  std::vector<std::string> schedule_kinds;  // extra kinds for schedule-aware templates
  ScheduleEvaluator evaluator;
  // Called twice with what is coming (plan_cost.h): before the first template search with its
  // cost (stage "search", an upper bound), and after it, before the composition and the
  // simulated schedule choice, with what the rest will cost (stage "rest"). `breakwater plan`
  // prints either when it is large.
  std::function<void(const PlanCost&)> on_cost;
  PlanWork* work = nullptr;  // counts the work done (tests, benchmark)
};

struct PlanResult {
  TemplateSet templates;  // for node counts 1 .. cluster.num_nodes that fit
  Plan plan;
};

// Throws ConfigError with the numbers and the fix when the model does not fit on the cluster
// (naming the memory term that does not fit, and the microbatch size when it keeps stages from
// being sharded), the fault tolerance is too high for it (see instantiate.h), or the
// microbatches are too few or more than kMaxPlanMicrobatches.
PlanResult make_plan(const Profile& profile, const Cluster& cluster, int fault_tolerance,
                     int microbatches, const PlannerOptions& options = {});

}  // namespace bw::plan
