// Instantiation and batch distribution (Oobleck, SOSP'23, section 4.2): exact for the slowest
// pipeline, within one all-reduce of optimal for the step time.
//
// Batch split: pipeline p takes m_p >= 1 microbatches at time a_p + b_p * m_p (b_p >= 0);
// minimise the slowest. Greedy on marginal time with a heap is exact for such monotone costs
// (exchange argument, docs/planning.md).
//
// Instantiation: choose x_n pipelines of template n with sum n * x_n = N nodes exactly and
// sum x_n >= f + 1, minimising the slowest pipeline after the best split. For a target time tau
// a template-n pipeline can take cap_n(tau) = floor((tau - a_n) / b_n) microbatches (needs >= 1);
// tau is feasible iff an unbounded knapsack over node counts (state: nodes used, pipelines so
// far capped at f + 1) reaches capacity >= B with at most B pipelines. Feasibility is monotone in
// tau and the optimum is one of the values a_n + b_n * k, so a search over those values is exact.
// O(N * |templates| * (f + 2)) per probe (bisection over the bits of tau: <= 64 probes), no
// enumeration of partitions. instantiate() repeats this per bound on the busiest node's
// parameter bytes to account for the gradient all-reduce (see Composition below).
#pragma once

#include <vector>

#include "plan/plan.h"
#include "plan/plan_cost.h"

namespace bw::plan {

struct LinearTime {
  double fixed_ms = 0;
  double per_microbatch_ms = 0;
  double at(int m) const { return fixed_ms + per_microbatch_ms * m; }
};

// Splits `microbatches` among pipelines (each >= 1) minimising max_p time_p(m_p). Throws
// ConfigError when microbatches < number of pipelines. Deterministic: ties go to the lower index.
std::vector<int> split_batch(const std::vector<LinearTime>& times, int microbatches);

// Re-splits a plan's global batch over its pipelines and refreshes its predictions.
void resplit(Plan& plan, const Cluster& cluster);

// Covers `nodes` (all of them) with >= f + 1 pipelines from `templates` and splits
// `microbatches` among them. Throws ConfigError with the numbers and the fix when impossible.
// `work`, when given, counts the knapsack's work (plan_cost.h).
Plan instantiate(const TemplateSet& templates, const std::vector<NodeId>& nodes,
                 int fault_tolerance, int microbatches, const Cluster& cluster,
                 PlanWork* work = nullptr);
// Nodes 0 .. num_nodes - 1.
Plan instantiate(const TemplateSet& templates, int num_nodes, int fault_tolerance, int microbatches,
                 const Cluster& cluster, PlanWork* work = nullptr);

// Pipeline counts per template node count chosen by instantiate's optimisation (exposed for
// tests): (node count, pipelines) pairs, ascending by node count, and the predicted times.
//
// Without a cluster: the exact min-max pipeline time. With one, the step time
// (pipeline + gradient all-reduce, plan.h) is minimised over bounds q on the parameter bytes of
// the busiest node: for each q, the exact min-max composition among templates within q, scored
// with its all-reduce. The all-reduce of P >= 2 pipelines is 2 (P - 1) / P * q over the network,
// between q and 2q, so the result is within one optimal all-reduce of the optimal step time
// (and exact in the pipeline part for its q); docs/planning.md.
struct Composition {
  std::vector<std::pair<int, int>> counts;
  double pipeline_ms = 0;
  double allreduce_ms = 0;
  double step_ms = 0;
  double max_node_param_bytes = 0;
};
Composition choose_composition(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                               int microbatches, const Cluster* cluster = nullptr,
                               PlanWork* work = nullptr);

}  // namespace bw::plan
