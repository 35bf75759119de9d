// What a `make_plan` call will cost, said before its expensive parts run (docs/planning.md
// "Cost of planning"), so that a huge but legal request says how long and how much memory it
// takes before it starts.
//
// Where the time goes (measured, docs/planning.md): for clusters of up to a few thousand devices
// the template search is milliseconds; what grows is
//  - the composition (instantiate.h): every probe of the bisection on the target time solves an
//    unbounded knapsack over (nodes used, pipelines) cells, each cell trying every usable
//    template, and the bisection is repeated per bound on the busiest node's parameter bytes:
//    cells = N x width per probe, width = B + 1 when B < N / n0 (pipelines counted exactly) and
//    f + 2 otherwise; pairs = cells x usable templates;
//  - the simulated schedule choice (schedule_aware.h): per template and kind two simulations at
//    m and 2m microbatches, each with stages x chunks per device x microbatches compute slots,
//    and the same per distinct (template, microbatches) of the plan's pipelines.
// Both are counted from the templates of the first search, before the composition starts. The
// planner runs twice (planner.h); the second run's microbatches per pipeline are estimated from
// the template with the best throughput per node.
//
// The seconds per unit are calibrated on the 2-core development machine (bench/plan/
// plan_cost.sh compares the estimate with measured runs over a grid); other machines scale it.
//
// Thread-safety: PlanWork's counters are atomic; the functions are pure.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/profile.h"
#include "plan/templates.h"

namespace bw::plan {

// Work the planner actually did (instrumented; for tests and the benchmark).
struct PlanWork {
  std::atomic<int64_t> compose_cells{0};    // knapsack cells visited
  std::atomic<int64_t> compose_pairs{0};    // (cell, template) steps tried
  std::atomic<int64_t> simulated_slots{0};  // stages x chunks per device x microbatches simulated
};

struct PlanCost {
  // "search": said before the first template search, whose transitions (state, first stage)
  // are counted up to the memory limit only (its cost bounds prune data-dependently), so its
  // time is an upper bound; "rest": said after it, for the composition and the simulations.
  std::string stage = "rest";
  double search_transitions = 0;
  double compose_cells = 0;  // predicted counts of the rest of make_plan
  double compose_pairs = 0;
  double simulated_slots = 0;
  double compose_seconds = 0;
  double simulate_seconds = 0;
  double seconds = 0;         // predicted wall time of the rest (one thread)
  double peak_bytes = 0;      // predicted peak memory: the process, its largest knapsack table
                              // or its largest simulation
};

// Calibration (CPU seconds per unit on one core of the development machine; bytes per unit).
inline constexpr double kSecondsPerTransition = 2.0e-8;  // with its labels, memory never binding
inline constexpr double kSecondsPerCell = 2.0e-9;
inline constexpr double kSecondsPerPair = 0;  // few cells are reachable: the cells dominate
inline constexpr double kSecondsPerSlot = 6.0e-8;
inline constexpr double kBytesPerCell = 12;  // best value (8) + choice (4)
inline constexpr double kBytesPerSlot = 60;  // the largest simulation's schedule and timeline
inline constexpr double kBaseBytes = 6e6;    // the process itself, profile and templates

// Transitions of the template search (generate_templates): every state (first layer i, devices
// u) and first stage (d devices, layers [i, e)) that fits in memory with one microbatch in
// flight, counted before the search in O(L^2 w). The search's cost-bound pruning only lowers it.
double search_transitions(const Profile& profile, const Cluster& cluster,
                          const TemplateOptions& options);
PlanCost estimate_search(const Profile& profile, const Cluster& cluster,
                         const TemplateOptions& options);

// Knapsack work: cells visited (exact), (cell, template) steps (at most: every cell reachable,
// every usable template tried) and the largest table.
struct ComposeWork {
  double cells = 0, pairs = 0, peak_cells = 0;
};
// One bisection among the templates whose busiest node holds <= max_node_bytes (exactly what
// choose_composition without a cluster does).
ComposeWork bisection_work(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                           int microbatches, double max_node_bytes);
// choose_composition with a cluster: the unconstrained bisection and one per smaller bound on
// the busiest node's bytes, up to the unconstrained optimum's, which is taken to be that of the
// template with the most throughput per node.
ComposeWork compose_work(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                         int microbatches);

// Simulated slots of choosing the schedule kind of every template of `templates` at its
// microbatch count m (generate_templates with schedule kinds).
double choice_slots(const TemplateSet& templates, const std::vector<std::string>& kinds);

// The rest of make_plan after its first template search gave `first` (optimised for m1):
// composition and schedule fitting, and the second search's run when there is one.
PlanCost estimate_rest(const TemplateSet& first, const Cluster& cluster, int fault_tolerance,
                       int microbatches, const std::vector<std::string>& kinds,
                       bool second_run_possible);

}  // namespace bw::plan
