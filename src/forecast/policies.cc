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
    } else {
      r.downtime_ms = costs_.fixed_reconfigure_ms ? *costs_.fixed_reconfigure_ms
                                                  : transfer_ms + costs_.regroup_ms;
      r.rollback = Rollback::kNone;
      r.at_step_boundary = true;
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
  // once it has run on a node count).
  Reaction on_cold_start(int) override {
    Reaction r;
    r.cause = Cause::kRestart;
    r.rollback = Rollback::kNone;
    r.downtime_ms = costs_.checkpoint_after_restart
                        ? std::max(0.0, costs_.restart_ms - costs_.checkpoint_ms)
                        : costs_.restart_ms;
    return r;
  }

  void on_resumed() override {
    after_restart_ = costs_.checkpoint_after_restart && restarting_;
    restarting_ = false;
  }

  Reaction on_change(const Change& change) override {
    Reaction r;
    r.cause = Cause::kRestart;
    r.downtime_ms = downtime(change.nodes_before);
    restarting_ = true;
    if (change.kind == EventKind::kRemove) {
      r.rollback = Rollback::kCheckpoint;
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
    const auto step = model_.step_ms(nodes, Arrangement::kUniform);
    if (!step) return std::nullopt;
    const double wall = costs_.step_includes_redundancy ? *step : *step / costs_.useful_share;
    return RunParams{wall, costs_.useful_share, 0, 0.0};
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
    for (const auto& n : nodes) ring_.push_back({n, true});
  }

  Reaction on_change(const Change& change) override {
    Reaction r;
    if (change.kind == EventKind::kAdd) {
      ring_.push_back({change.node, true});
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
        r.slowdown = *costs_.failover_slowdown;
      }
    }
    return r;
  }

  void on_resumed() override {
    std::erase_if(ring_, [](const Slot& s) { return !s.alive; });
  }

 private:
  struct Slot {
    std::string name;
    bool alive = true;
  };
  RedundantCosts costs_;
  ThroughputModel& model_;
  std::vector<Slot> ring_;
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
