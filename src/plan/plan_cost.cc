#include "plan/plan_cost.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/schedule_aware.h"
#include "schedule/generate.h"

namespace bw::plan {
namespace {

// Knapsack solves per bisection (instantiate.cc): one at an unbounded target, the probes that
// halve the bit patterns between 0 and 1e300, and the final one.
int solves_per_bisection() {
  const auto hi = std::bit_cast<std::uint64_t>(1e300), lo = std::bit_cast<std::uint64_t>(0.0);
  return 2 + static_cast<int>(std::bit_width(hi - lo - 1));
}

// Chunks per schedule device of a kind.
int chunks_per_device(const std::string& kind) {
  if (kind == "interleaved" || kind == "hanayo-w1") return 2;
  if (kind == "hanayo-w2") return 4;
  return 1;
}

// Slots of evaluating `t` under `kind` at m (simulations at m and 2m), 0 when the evaluator
// gives up before simulating (mixed stage widths, a schedule that cannot run these sizes).
double eval_slots(const Template& t, const std::string& kind, int m) {
  const int v = chunks_per_device(kind);
  if (kind != "1f1b") {
    for (const auto& s : t.stages)
      if (s.num_devices != t.stages.front().num_devices) return 0;
    // The layers are re-partitioned over stages x v chunks: each needs one.
    int layers = 0;
    for (const auto& s : t.stages) layers += s.num_layers;
    if (layers < t.num_stages() * v) return 0;
  }
  Template probe = t;
  probe.schedule = kind;
  double slots = 0;
  for (int run : {m, 2 * m}) {  // each simulation the sizes allow
    try {
      schedule::check_spec(schedule_spec(probe, run));
      slots += static_cast<double>(run) * t.num_stages() * v;
    } catch (const ConfigError&) {
    }
  }
  return slots;
}

double template_slots(const Template& t, const std::vector<std::string>& kinds, int m) {
  double slots = 0;
  for (const auto& k : kinds) slots += eval_slots(t, k, m);
  return slots;
}

// Slots of the largest single simulation (the one at 2m), which sets the simulator's memory.
double largest_simulation(const TemplateSet& set, const std::vector<std::string>& kinds) {
  double most = 0;
  for (const auto& t : set.templates)
    for (const auto& k : kinds) most = std::max(most, eval_slots(t, k, t.microbatches) * 2 / 3);
  return most;
}

}  // namespace

double search_transitions(const Profile& profile, const Cluster& cluster,
                          const TemplateOptions& options) {
  const CostModel model(profile, cluster, options.cost);
  const int L = profile.num_layers(), g = cluster.devices_per_node;
  const int max_nodes = options.max_nodes > 0 ? options.max_nodes : cluster.num_nodes;
  const int U = std::min(max_nodes, L) * g;
  const int w = model.max_stage_devices();
  const double mem = cluster.device_memory_bytes();
  double total = 0;
  for (int i = 0; i < L; ++i) {
    const int u_max = std::min(U, (L - i) * g);
    for (int d = 1; d <= w; ++d) {
      int e = i + 1;  // the scan over e stops at the first stage that does not fit
      while (e <= L && model.stage_state_bytes(i, e - i, d) + model.stage_transient_bytes(i, e - i, d) +
                               model.stage_activation_bytes(i, e - i, d) <=
                           mem)
        ++e;
      // States u whose first stage may take d devices of one node: (u - 1) mod g >= d - 1.
      const double states = static_cast<double>(u_max / g) * (g - d + 1) +
                            std::max(0, u_max % g - (d - 1));
      total += states * (e - 1 - i);
    }
  }
  return total;
}

PlanCost estimate_search(const Profile& profile, const Cluster& cluster,
                         const TemplateOptions& options) {
  PlanCost c;
  c.stage = "search";
  c.search_transitions = search_transitions(profile, cluster, options);
  c.seconds = c.search_transitions * kSecondsPerTransition;  // one search; make_plan may run two
  c.peak_bytes = kBaseBytes;
  return c;
}

ComposeWork bisection_work(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                           int microbatches, double max_node_bytes) {
  ComposeWork w;
  int usable = 0, min_size = 0;
  for (const auto& t : templates.templates) {
    if (t.num_nodes > num_nodes || max_node_param_bytes(t) > max_node_bytes) continue;
    if (usable++ == 0) min_size = t.num_nodes;
  }
  if (usable == 0) return w;
  const bool exact_count = microbatches < num_nodes / min_size;
  const double width = exact_count ? microbatches + 1.0 : fault_tolerance + 2.0;
  const double cells = static_cast<double>(num_nodes) * width;
  const double solves = solves_per_bisection();
  w.cells = solves * cells;
  w.pairs = solves * cells * usable;
  w.peak_cells = (num_nodes + 1.0) * width;
  return w;
}

const Template* best_per_node(const TemplateSet& templates, int num_nodes) {
  const Template* best = nullptr;
  for (const auto& t : templates.templates) {
    if (t.num_nodes > num_nodes) continue;
    if (!best || t.num_nodes * t.estimate.per_microbatch_ms <
                     best->num_nodes * best->estimate.per_microbatch_ms)
      best = &t;
  }
  return best;
}

ComposeWork compose_work(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                         int microbatches) {
  ComposeWork w;
  const Template* best = best_per_node(templates, num_nodes);
  if (!best) return w;
  // The unconstrained bisection, then one per distinct bound on the busiest node's bytes below
  // the unconstrained optimum's (taken to be the best template per node's).
  std::vector<double> calls = {std::numeric_limits<double>::infinity()};
  const double q_best = max_node_param_bytes(*best);
  for (const auto& t : templates.templates) {
    const double q = max_node_param_bytes(t);
    if (t.num_nodes <= num_nodes && q < q_best) calls.push_back(q);
  }
  std::sort(calls.begin() + 1, calls.end());
  calls.erase(std::unique(calls.begin() + 1, calls.end()), calls.end());
  for (double q : calls) {
    const ComposeWork b = bisection_work(templates, num_nodes, fault_tolerance, microbatches, q);
    w.cells += b.cells;
    w.pairs += b.pairs;
    w.peak_cells = std::max(w.peak_cells, b.peak_cells);
  }
  return w;
}

double choice_slots(const TemplateSet& templates, const std::vector<std::string>& kinds) {
  double slots = 0;
  for (const auto& t : templates.templates) slots += template_slots(t, kinds, t.microbatches);
  return slots;
}

PlanCost estimate_rest(const TemplateSet& first, const Cluster& cluster, int fault_tolerance,
                       int microbatches, const std::vector<std::string>& kinds,
                       bool second_run_possible) {
  PlanCost c;
  if (first.templates.empty()) return c;
  const int N = cluster.num_nodes;
  const ComposeWork compose = compose_work(first, N, fault_tolerance, microbatches);
  // The plan's pipelines, roughly: as many as possible of the template with the most
  // throughput per node (least nodes x time per microbatch).
  const Template* best = best_per_node(first, N);
  if (!best) return c;
  const int pipelines =
      std::max(fault_tolerance + 1, std::min(microbatches, N / std::max(1, best->num_nodes)));
  const int m1 = first.templates.front().microbatches;
  const int m2 = std::max(1, (microbatches + pipelines - 1) / pipelines);
  // Fitting the kinds at the pipelines' counts: two distinct counts (the split's floor and
  // ceiling) of that template.
  auto fit_slots = [&](int m_pipeline) { return 2 * template_slots(*best, kinds, m_pipeline); };
  double runs = 1;
  double slots = kinds.empty() ? 0 : choice_slots(first, kinds) + fit_slots(m2);
  if (second_run_possible && m2 != m1) {
    runs = 2;
    if (!kinds.empty()) slots += choice_slots(first, kinds) * m2 / m1 + fit_slots(m2);
  }
  c.compose_cells = runs * compose.cells;
  c.compose_pairs = runs * compose.pairs;
  c.simulated_slots = slots;
  c.compose_seconds = c.compose_cells * kSecondsPerCell + c.compose_pairs * kSecondsPerPair;
  c.simulate_seconds = c.simulated_slots * kSecondsPerSlot;
  c.seconds = c.compose_seconds + c.simulate_seconds;
  c.peak_bytes = kBaseBytes + std::max(compose.peak_cells * kBytesPerCell,
                                       largest_simulation(first, kinds) * kBytesPerSlot);
  return c;
}

}  // namespace bw::plan
