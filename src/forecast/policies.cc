#include "forecast/policies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace bw::forecast {

PolicyKind parse_policy(const std::string& name) {
  if (name == "breakwater") return PolicyKind::kBreakwater;
  if (name == "restart") return PolicyKind::kRestart;
  if (name == "redundant") return PolicyKind::kRedundant;
  throw ConfigError(
      fmt::format("unknown policy '{}'; choose breakwater, restart or redundant", name));
}

std::string to_string(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kBreakwater:
      return "breakwater";
    case PolicyKind::kRestart:
      return "restart";
    case PolicyKind::kRedundant:
      return "redundant";
  }
  return "?";
}

std::string to_string(Cause cause) {
  switch (cause) {
    case Cause::kReconfigure:
      return "reconfigure";
    case Cause::kRestart:
      return "restart";
    case Cause::kRebalance:
      return "rebalance";
  }
  return "?";
}

PolicyCosts oobleck_artifact_bert_large() {
  PolicyCosts c;  // restart and redundant defaults are the artifact's BERT-large constants
  c.breakwater.fixed_reconfigure_ms = 2000;
  return c;
}

double RestartCosts::restart_for(int nodes_before) const {
  if (restart_ms_by_nodes.empty()) return restart_ms;
  auto it = restart_ms_by_nodes.upper_bound(nodes_before);
  if (it == restart_ms_by_nodes.begin()) return it->second;
  return std::prev(it)->second;
}

int young_checkpoint_steps(double checkpoint_ms, double mtbf_ms, double step_ms) {
  if (!(checkpoint_ms > 0) || !(mtbf_ms > 0) || !(step_ms > 0)) {
    throw ConfigError(fmt::format(
        "Young's checkpoint interval needs a checkpoint cost, a mean time between failures and a "
        "step time > 0 (got {} ms, {} ms, {} ms)",
        checkpoint_ms, mtbf_ms, step_ms));
  }
  const double steps = std::sqrt(2.0 * checkpoint_ms * mtbf_ms) / step_ms;
  return std::max(1, static_cast<int>(std::lround(steps)));
}

namespace {

// A join that waits as a spare for the next failure (join_waits_for_failure_from_nodes).
bool waits_for_failure(int from_nodes, const Change& change) {
  return change.kind == EventKind::kAdd && from_nodes > 0 && change.nodes_before >= from_nodes;
}

class BreakwaterPolicy final : public Policy {
 public:
  BreakwaterPolicy(const BreakwaterCosts& costs, ThroughputModel& model)
      : costs_(costs), model_(model) {
    if (!(costs_.inter_node_gbps > 0)) {
      throw ConfigError(
          fmt::format("--inter-node-gbps must be > 0 (got {})", costs_.inter_node_gbps));
    }
  }
  PolicyKind kind() const override { return PolicyKind::kBreakwater; }

  std::optional<RunParams> run_params(int nodes) override {
    const auto step = model_.step_ms(nodes, Arrangement::kTemplates);
    if (!step) return std::nullopt;
    return RunParams{*step, 1.0, 0, 0.0};
  }

  Reaction on_cold_start(int) override {
    Reaction r;
    r.cause = Cause::kReconfigure;
    r.rollback = Rollback::kNone;
    r.downtime_ms = costs_.fixed_reconfigure_ms ? *costs_.fixed_reconfigure_ms : costs_.regroup_ms;
    return r;
  }

  Reaction on_change(const Change& change) override {
    Reaction r;
    r.cause = Cause::kReconfigure;
    const int nodes = std::max(1, change.nodes_after);
    // Bytes one node receives, over its own link, from the surviving replicas in parallel.
    const double transfer_ms =
        model_.state_bytes_per_node(nodes) * 8.0 / (costs_.inter_node_gbps * 1e9) * 1e3;
    if (change.kind == EventKind::kRemove) {
      r.downtime_ms = costs_.fixed_reconfigure_ms
                          ? *costs_.fixed_reconfigure_ms
                          : costs_.detection_ms + transfer_ms + costs_.regroup_ms;
      r.rollback = Rollback::kStep;
      r.train_through = costs_.train_through_reconfiguration && change.running;
      r.rendezvous = costs_.stalled_rendezvous;
    } else {
      if (waits_for_failure(costs_.join_waits_for_failure_from_nodes, change)) {
        r.no_op = true;
        return r;
      }
      r.downtime_ms = costs_.fixed_reconfigure_ms ? *costs_.fixed_reconfigure_ms
                                                  : transfer_ms + costs_.regroup_ms;
      r.rollback = Rollback::kNone;
      r.at_step_boundary = true;
      r.rendezvous = costs_.stalled_rendezvous;
    }
    return r;
  }

 private:
  BreakwaterCosts costs_;
  ThroughputModel& model_;
};

class RestartPolicy final : public Policy {
 public:
  RestartPolicy(const RestartCosts& costs, ThroughputModel& model) : costs_(costs), model_(model) {
    if (costs_.checkpoint_every_steps < 0 || costs_.checkpoint_ms < 0 || costs_.restart_ms < 0) {
      throw ConfigError("restart policy: checkpoint cadence and costs must be >= 0");
    }
  }
  PolicyKind kind() const override { return PolicyKind::kRestart; }

  std::optional<RunParams> run_params(int nodes) override {
    const auto step = model_.step_ms(nodes, Arrangement::kUniform);
    if (!step) return std::nullopt;
    RunParams p{*step, 1.0, costs_.checkpoint_every_steps, costs_.checkpoint_ms};
    p.checkpoint_after_first_step = after_restart_;
    p.align_checkpoints = costs_.align_checkpoints;
    return p;
  }

  // The first launch costs the base restart (the artifact sets the by-node-count cost only
  // once it has run on a node count). With checkpoint_after_restart that is the cost minus one
  // checkpoint, and no checkpoint follows the first step: the artifact's rendezvous always
  // lasts restart - checkpoint, counting on the checkpoint that a removal flags for the next
  // step, and a cold start has no removal (docs/forecast.md).
  Reaction on_cold_start(int) override {
    Reaction r;
    r.cause = Cause::kRestart;
    r.rollback = Rollback::kNone;
    r.downtime_ms = costs_.checkpoint_after_restart
                        ? std::max(0.0, costs_.restart_ms - costs_.checkpoint_ms)
                        : costs_.restart_ms;
    return r;
  }

  void on_resumed(int nodes) override {
    after_restart_ = costs_.checkpoint_after_restart && restarting_;
    // A recovery that ends stalled runs no step: the checkpoint it owes waits for the next run.
    if (nodes <= 0 || !model_.step_ms(nodes, Arrangement::kUniform)) return;
    restarting_ = false;
    run_nodes_ = nodes;
  }

  Reaction on_change(const Change& change) override {
    Reaction r;
    if (waits_for_failure(costs_.join_waits_for_failure_from_nodes, change)) {
      r.no_op = true;
      return r;
    }
    r.cause = Cause::kRestart;
    // The cost of the configuration that ran (spares waiting beside it do not count).
    r.downtime_ms = downtime(run_nodes_ > 0 ? run_nodes_ : change.nodes_before);
    // Only a failure calls for the checkpoint after the restart's first step (a join's restart
    // follows a checkpoint already; the artifact flags removals only).
    if (change.kind == EventKind::kRemove) restarting_ = true;
    r.rendezvous = costs_.stalled_rendezvous;
    if (change.kind == EventKind::kRemove) {
      r.rollback = Rollback::kCheckpoint;
      r.train_through = costs_.train_through_restart && change.running;
    } else {
      r.rollback = Rollback::kNone;
      r.at_step_boundary = true;
      if (change.running) r.checkpoint_ms = costs_.checkpoint_ms;
    }
    return r;
  }

 private:
  // The artifact's restart cost includes the checkpoint that follows the first step.
  double downtime(int nodes) const {
    const double cost = costs_.restart_for(nodes);
    return costs_.checkpoint_after_restart ? std::max(0.0, cost - costs_.checkpoint_ms) : cost;
  }

  RestartCosts costs_;
  ThroughputModel& model_;
  bool restarting_ = false;
  bool after_restart_ = false;
  int run_nodes_ = 0;  // nodes of the last (re)start
};

class RedundantPolicy final : public Policy {
 public:
  RedundantPolicy(const RedundantCosts& costs, ThroughputModel& model)
      : costs_(costs), model_(model) {
    if (!(costs_.useful_share > 0 && costs_.useful_share <= 1)) {
      throw ConfigError(
          fmt::format("--useful-share must be in (0, 1] (got {})", costs_.useful_share));
    }
    if (costs_.failover_slowdown && !(*costs_.failover_slowdown >= 1)) {
      throw ConfigError(
          fmt::format("--failover-slowdown must be >= 1 (got {})", *costs_.failover_slowdown));
    }
  }
  PolicyKind kind() const override { return PolicyKind::kRedundant; }

  std::optional<RunParams> run_params(int nodes) override {
    // Slowed by a spare's removal: the configuration that ran, s times slower, no more useful.
    const double s = slowed() ? slowdown() : 1.0;
    const auto step = model_.step_ms(slowed() ? run_nodes_ : nodes, Arrangement::kUniform);
    if (!step) return std::nullopt;
    const double wall = costs_.step_includes_redundancy ? *step : *step / costs_.useful_share;
    return RunParams{wall * s, costs_.useful_share / s, 0, 0.0};
  }

  Reaction on_cold_start(int) override {
    Reaction r;
    r.cause = Cause::kRestart;
    r.rollback = Rollback::kNone;
    r.downtime_ms = costs_.restart_ms;
    return r;
  }

  void on_start(const std::vector<std::string>& nodes) override {
    ring_.clear();
    for (const auto& n : nodes) ring_.push_back({n, true, false});
  }

  Reaction on_change(const Change& change) override {
    Reaction r;
    if (change.kind == EventKind::kAdd) {
      ring_.push_back({change.node, true, false});
      const int p = costs_.join_rebalance_pipeline_nodes;
      if (p > 0 && run_nodes_ > 0 && change.nodes_after / p <= run_nodes_ / p) {
        r.no_op = true;  // a spare until the next rebalance
        return r;
      }
      r.cause = Cause::kRebalance;
      r.downtime_ms = costs_.rebalance_ms;
      r.rollback = Rollback::kNone;
      r.at_step_boundary = true;
      return r;
    }
    const auto it = std::find_if(ring_.begin(), ring_.end(),
                                 [&](const Slot& s) { return s.name == change.node && s.alive; });
    BW_CHECK(it != ring_.end(), "redundant policy: removed node {} is not in the ring",
             change.node);
    if (costs_.idle_removal_slows && !it->trains && change.running) {
      ring_.erase(it);  // a spare: nobody's neighbour
      if (state_ != Slow::kNone) {
        r.no_op = true;  // already slowed until the next rebalance
        return r;
      }
      state_ = Slow::kSlowing;
      r.cause = Cause::kRebalance;
      r.rollback = Rollback::kNone;
      r.at_step_boundary = true;
      r.slowdown = slowdown();
      return r;
    }
    const auto i = static_cast<std::size_t>(it - ring_.begin());
    const std::size_t n = ring_.size();
    // The node before this one holds this node's redundant copy, and this node holds the one
    // after it: either of them already gone means some layer has no copy left.
    const bool neighbour_lost =
        n > 1 && (!ring_[(i + n - 1) % n].alive || !ring_[(i + 1) % n].alive);
    it->alive = false;
    r.rollback = Rollback::kStep;
    if (neighbour_lost) {
      r.cause = Cause::kRestart;
      r.downtime_ms = costs_.restart_ms;
    } else {
      r.cause = Cause::kRebalance;
      r.downtime_ms = costs_.rebalance_ms;
      if (costs_.failover_slowdown && change.running) {
        r.rollback = Rollback::kNone;
        r.at_step_boundary = true;
        // Already slowed by a spare's removal: the step in flight slows no further.
        r.slowdown = state_ == Slow::kSlowed ? 1.0 : *costs_.failover_slowdown;
      }
    }
    return r;
  }

  void on_resumed(int nodes) override {
    std::erase_if(ring_, [](const Slot& s) { return !s.alive; });
    if (state_ == Slow::kSlowing) {  // the slowed step ended: no rebalance, same pipelines
      state_ = Slow::kSlowed;
      return;
    }
    state_ = Slow::kNone;
    run_nodes_ = nodes;
    // Pipelines of p nodes in ring order; the rest are spares.
    const int p = costs_.join_rebalance_pipeline_nodes;
    const auto training = p > 0 ? static_cast<std::size_t>(nodes / p * p) : ring_.size();
    for (std::size_t i = 0; i < ring_.size(); ++i) ring_[i].trains = i < training;
  }

 private:
  struct Slot {
    std::string name;
    bool alive = true;
    bool trains = true;  // in a pipeline at the last rebalance (not a spare)
  };
  enum class Slow { kNone, kSlowing, kSlowed };  // idle_removal_slows
  bool slowed() const { return state_ == Slow::kSlowed; }
  double slowdown() const { return costs_.failover_slowdown.value_or(1.0); }
  RedundantCosts costs_;
  ThroughputModel& model_;
  std::vector<Slot> ring_;
  int run_nodes_ = 0;  // nodes of the last (re)start
  Slow state_ = Slow::kNone;
};

}  // namespace

std::unique_ptr<Policy> make_policy(PolicyKind kind, const PolicyCosts& costs,
                                    ThroughputModel& model) {
  switch (kind) {
    case PolicyKind::kBreakwater:
      return std::make_unique<BreakwaterPolicy>(costs.breakwater, model);
    case PolicyKind::kRestart:
      return std::make_unique<RestartPolicy>(costs.restart, model);
    case PolicyKind::kRedundant:
      return std::make_unique<RedundantPolicy>(costs.redundant, model);
  }
  BW_CHECK(false, "unknown policy kind {}", static_cast<int>(kind));
  return nullptr;
}

}  // namespace bw::forecast
