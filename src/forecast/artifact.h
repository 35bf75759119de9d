// The models of Oobleck's SOSP'23 artifact (github.com/SymbioticLab/Oobleck, branch
// sosp23-artifact, tools/simulator/), as cost sets for the replay: what each system pays per
// change, per model, with the source of every constant. The throughput tables by node count are
// data files (data/oobleck-sosp23/<model>.csv, read with step_table.h).
//
// Where a constant comes from (file: the model's branch of Simulator.__init__ unless noted):
// - Oobleck (our breakwater policy, fixed reconfiguration): oobleck_simulator.py,
//   local_rendezvous_timeout_delta: 2 s BERT-large and GPT-2, 3 s GPT-3 medium, 6 s 2.7B,
//   10 s 6.7B.
// - Varuna (restart): varuna_simulator.py, local_rendezvous_timeout_delta (restart) and
//   checkpointing_overhead: 76 s / 15.8 s BERT-large (restart by node count in
//   bertLarge_simulate_step_delta: 49.1-112 s), 83 s / 11.5 s GPT-2, 78.7 s / 11.2 s GPT-3
//   medium, 515 s / 50 s 2.7B, 701 s / 120 s 6.7B; checkpoint_per_iter 10.
// - Bamboo (redundant): bamboo_simulator.py, local_rendezvous_timeout_delta (rebalance) 76 s
//   BERT-large, 80 s GPT-2, 100 s GPT-3 medium, 230 s 2.7B, 450 s 6.7B;
//   global_rendezvous_timeout_delta (restart) 30 s; redundant_ratio 1 - 0.1971;
//   fallback_slowdown 1.5.
// - All three: spot_instance_creation_time 45 s (every added instance boots that long before it
//   is ready: the first ones before the first start, later ones before they can join);
//   num_stages_target 12 (fewer nodes train nothing); samples_per_step 8192 BERT-large, 1024
//   GPT-2, 819 GPT-3 medium, 512 2.7B, 1024 6.7B.
#pragma once

#include <string>
#include <vector>

#include "forecast/policies.h"
#include "forecast/replay.h"
#include "forecast/step_table.h"
#include "forecast/trace.h"

namespace bw::forecast {

struct ArtifactModel {
  std::string name;      // our name: bert-large, gpt2, gpt3-medium, gpt3-2.7b, gpt3-6.7b
  std::string artifact;  // the artifact's name: BERT-large, GPT-2-ours, GPT-3-medium, ...
  double samples_per_step = 0;
  int min_nodes = 12;        // pipelines of 12 stages, one node each
  double startup_ms = 45e3;  // instance boot (before the first start, and before each join)
  // Every artifact behaviour switched on: fixed reconfiguration, Varuna's restart by node count,
  // checkpoint after a restart and aligned cadence, Bamboo's measured steps and 1.5x failover,
  // Oobleck and Varuna training through their recovery, joins that wait for the next failure
  // (Bamboo: for a whole pipeline), rendezvous while stalled, and a spare's removal slowing
  // Bamboo (docs/forecast.md).
  PolicyCosts costs;
};

// ConfigError listing the names for an unknown one.
ArtifactModel artifact_model(const std::string& name);
const std::vector<std::string>& artifact_model_names();

// The artifact's fixed-interval traces (traces/10m.csv ... 6h.csv): `from` nodes at time 0, one
// removed every `period_ms` until `to` remain (10m: 601.2 s, 30m: 1800 s, 1h: 3600 s, 3h:
// 10800 s, 6h: 21600 s; 30 -> 15). Removed nodes are never ring neighbours (node1, node3, ...).
Trace fixed_removal_trace(double period_ms, int from = 30, int to = 15);

// Replays `trace` under `kind` as the artifact models it: the policy's rows of `table` (a
// ConfigError naming the policy if it has none), the model's costs, cold start and minimum
// cluster size, up to the trace's last event. `options` may switch the accounting
// (whole_step_loss) or turn the cold start or the joins' boot off (startup_ms, join_boot_ms = 0).
ReplayOptions artifact_options(const ArtifactModel& model);
ReplayResult replay_artifact(const Trace& trace, PolicyKind kind, const ArtifactModel& model,
                             const StepTable& table, const ReplayOptions& options);

}  // namespace bw::forecast
