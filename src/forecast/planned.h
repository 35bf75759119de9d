// The forecast on top of the real planner (plan/, Oobleck SOSP'23 section 4, done exactly).
//
// PlannerModel answers ThroughputModel questions from plans: templates are generated once for
// the cluster by plan::make_plan (which also picks the microbatch count they are optimised for);
// the step time on n nodes is that of `instantiate` on n nodes (kTemplates), or of
// the best plan made of identical pipelines (kUniform, what a restart-based system re-plans to).
// Plans are memoised by node count.
//
// PlannedBreakwaterPolicy follows the plan through the trace: every failure calls
// `reconfigure` and every join calls `join` on the current plan, so the throughput after a
// change is that of the plan breakwater would actually run, and the state-transfer cost comes
// from the plan's own copy list (bytes into and out of each node over its network link). When
// reconfiguration is impossible (a layer lost every replica) training stops with a checkpoint
// of the last committed step and restarts on a fresh plan (restart cost, as RestartCosts).
//
// Joins wait (docs/design.md: nodes join at a reconfiguration): a returning node is a spare until
// enough spares gather to form a pipeline as large as the plan's smallest, and they join at
// that moment or at the next failure's reconfiguration, whichever comes first. One node alone
// would become a one-node pipeline that carries the whole model's gradient over one link.
// Optionally (BreakwaterCosts::replan_horizon_ms > 0) the policy also compares each incremental
// plan with a fresh plan for the membership and takes the fresh one when it does more steps over
// that horizon, its transfer included (bounded as if every node received all the state it holds);
// each comparison costs an instantiate.
//
// Fault tolerance: plans keep f + 1 pipelines when the nodes allow it; with fewer nodes the
// planner is asked for f - 1, ..., 0 (training goes on without the guarantee, as it must).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "forecast/model.h"
#include "forecast/policies.h"
#include "plan/instantiate.h"
#include "plan/planner.h"
#include "plan/reconfigure.h"
#include "plan/templates.h"

namespace bw::forecast {

struct PlannerSetup {
  plan::Profile profile;
  plan::Cluster cluster;  // num_nodes: the most nodes the trace ever has live
  int fault_tolerance = 0;
  int microbatches = 1;
  // Template microbatch count, schedule kinds and their evaluator (schedule-aware templates).
  plan::PlannerOptions planner_options;
};

class PlannerModel final : public ThroughputModel {
 public:
  explicit PlannerModel(PlannerSetup setup);
  std::optional<double> step_ms(int nodes, Arrangement arrangement) override;
  double samples_per_step() const override;
  double state_bytes_per_node(int nodes) const override;

  const plan::TemplateSet& templates() const { return templates_; }
  const PlannerSetup& setup() const { return setup_; }
  // The plan for nodes 0 .. n-1, or nullopt when none exists.
  std::optional<plan::Plan> plan_for(int nodes);
  // Bytes of state per byte of parameters that a layer copy moves: weights and two AdamW
  // moments (gradients are recomputed).
  double copy_bytes(const std::vector<plan::LayerCopy>& copies) const;
  // Time of a copy list: the busiest node link (in or out) at the inter-node bandwidth; copies
  // inside a node use the intra-node link.
  double copy_ms(const std::vector<plan::LayerCopy>& copies) const;
  // Upper bound of moving a whole plan's state: every node receives all it holds.
  double full_state_ms(const plan::Plan& plan) const;

 private:
  PlannerSetup setup_;
  plan::TemplateSet templates_;
  std::vector<double> layer_param_bytes_;
  std::map<int, std::optional<plan::Plan>> plans_;
  std::map<int, std::optional<double>> uniform_;
};

class PlannedBreakwaterPolicy final : public Policy {
 public:
  PlannedBreakwaterPolicy(const PolicyCosts& costs, PlannerModel& model);
  PolicyKind kind() const override { return PolicyKind::kBreakwater; }
  std::optional<RunParams> run_params(int nodes) override;
  Reaction on_change(const Change& change) override;
  void on_start(const std::vector<std::string>& nodes) override;

  int fatal_restarts() const { return fatal_restarts_; }
  static int smallest_pipeline(const plan::Plan& p);

 private:
  NodeId id_of(const std::string& name);
  void replan();
  // Takes `next` (reached incrementally, moving `copies`) or a fresh plan for the membership,
  // whichever does more steps over the replan horizon; returns the transfer time.
  double adopt(plan::Plan next, const std::vector<plan::LayerCopy>& copies,
               const std::vector<NodeId>& dead);

  PolicyCosts costs_;
  PlannerModel& model_;
  std::unordered_map<std::string, NodeId> ids_;
  std::vector<NodeId> live_;
  std::vector<NodeId> spares_;  // joined, waiting for the next reconfiguration
  std::optional<plan::Plan> plan_;
  int next_id_ = 0;
  int fatal_restarts_ = 0;
};

}  // namespace bw::forecast
