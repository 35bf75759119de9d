#include "forecast/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace bw::forecast {
namespace {

struct Row {
  const char* name;
  const char* artifact;
  double samples_per_step;
  double oobleck_reconfigure_ms;
  double varuna_restart_ms, varuna_checkpoint_ms;
  double bamboo_rebalance_ms;
};

// Constants of tools/simulator/{oobleck,varuna,bamboo}_simulator.py (see artifact.h).
constexpr Row kRows[] = {
    {"bert-large", "BERT-large", 8192, 2e3, 76e3, 15.8e3, 76e3},
    {"gpt2", "GPT-2-ours", 1024, 2e3, 83e3, 11.5e3, 80e3},
    {"gpt3-medium", "GPT-3-medium", 819, 3e3, 78.7e3, 11.2e3, 100e3},
    {"gpt3-2.7b", "GPT-3-2_7b", 512, 6e3, 515e3, 50e3, 230e3},
    {"gpt3-6.7b", "GPT-3-6_7b", 1024, 10e3, 701e3, 120e3, 450e3},
};

}  // namespace

const std::vector<std::string>& artifact_model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& r : kRows) v.emplace_back(r.name);
    return v;
  }();
  return names;
}

ArtifactModel artifact_model(const std::string& name) {
  for (const auto& r : kRows) {
    if (name != r.name) continue;
    ArtifactModel m;
    m.name = r.name;
    m.artifact = r.artifact;
    m.samples_per_step = r.samples_per_step;
    auto& c = m.costs;
    c.breakwater.fixed_reconfigure_ms = r.oobleck_reconfigure_ms;
    c.breakwater.replan_horizon_ms = 0;
    c.restart.restart_ms = r.varuna_restart_ms;
    c.restart.checkpoint_ms = r.varuna_checkpoint_ms;
    c.restart.checkpoint_every_steps = 10;
    c.restart.checkpoint_after_restart = true;
    c.restart.align_checkpoints = true;
    c.restart.train_through_restart = true;
    c.breakwater.train_through_reconfiguration = true;
    c.breakwater.stalled_rendezvous = true;
    c.restart.stalled_rendezvous = true;
    // Oobleck's and Varuna's simulators take a node that becomes ready while they train only
    // into the next failure's rendezvous (their reconfiguration on joins is commented out).
    c.breakwater.join_waits_for_failure_from_nodes = m.min_nodes;
    c.restart.join_waits_for_failure_from_nodes = m.min_nodes;
    if (m.name == "bert-large") {
      // bertLarge_simulate_step_delta sets the restart cost by node count (the count the
      // cluster ran on before the change): 30+ nodes 71.3 s ... 16 nodes 75 s, 15 or fewer
      // 71.3 s.
      c.restart.restart_ms_by_nodes = {{15, 71.3e3},  {16, 75e3},    {17, 78.7e3},  {18, 82.4e3},
                                       {19, 86.1e3},  {20, 89.8e3},  {21, 93.5e3},  {22, 97.2e3},
                                       {23, 100.9e3}, {24, 104.6e3}, {25, 108.3e3}, {26, 112e3},
                                       {27, 49.1e3},  {28, 67.6e3},  {29, 67.6e3},  {30, 71.3e3}};
    }
    c.redundant.rebalance_ms = r.bamboo_rebalance_ms;
    c.redundant.restart_ms = 30e3;
    c.redundant.useful_share = 0.1971;
    c.redundant.step_includes_redundancy = true;
    c.redundant.failover_slowdown = 1.5;
    c.redundant.join_rebalance_pipeline_nodes = m.min_nodes;
    c.redundant.idle_removal_slows = true;
    return m;
  }
  throw ConfigError(fmt::format("unknown artifact model '{}'; choose {}", name,
                                fmt::join(artifact_model_names(), ", ")));
}

Trace fixed_removal_trace(double period_ms, int from, int to) {
  if (!(period_ms > 0) || from < 1 || to < 0 || to >= from || from - to > (from + 1) / 2) {
    throw ConfigError(fmt::format(
        "fixed removal trace: need a period > 0 and 0 <= to < from with at most half the nodes "
        "removed (got {} ms, {} -> {})",
        period_ms, from, to));
  }
  Trace t;
  for (int i = 1; i <= from; ++i)
    t.events.push_back({0, EventKind::kAdd, fmt::format("node{}", i)});
  for (int k = 1; k <= from - to; ++k) {
    t.events.push_back({k * period_ms, EventKind::kRemove, fmt::format("node{}", 2 * k - 1)});
  }
  return t;
}

ReplayOptions artifact_options(const ArtifactModel& model) {
  ReplayOptions o;
  o.startup_ms = model.startup_ms;
  o.join_boot_ms = model.startup_ms;  // every instance the artifact adds boots for 45 s
  o.record_timeline = false;
  return o;
}

ReplayResult replay_artifact(const Trace& trace, PolicyKind kind, const ArtifactModel& model,
                             const StepTable& table, const ReplayOptions& options) {
  const auto it = table.step_ms.find(kind);
  if (it == table.step_ms.end()) {
    throw ConfigError(
        fmt::format("the step table has no rows for policy {}; add `{},nodes,...` rows",
                    to_string(kind), to_string(kind)));
  }
  TableModel tm(it->second, model.samples_per_step, 0, model.min_nodes);
  return replay(trace, kind, model.costs, tm, options);
}

}  // namespace bw::forecast
