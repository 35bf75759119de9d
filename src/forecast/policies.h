// The three ways a cluster can react to a change of membership, as replay policies.
//
// - breakwater: reconfigure from pipeline templates (Oobleck, SOSP'23, section 4.3, with
//   breakwater's schedule-aware templates). Cost of a failure: detection + transfer of the lost
//   node's model state from surviving replicas over the inter-node network + rebuilding process
//   groups; the interrupted step is replayed (its elapsed part is lost work). A join waits for
//   the next step boundary and costs the state transfer to the new node.
// - restart: checkpoint-restart (Varuna, EuroSys'22; TorchElastic). Periodic checkpoints stall
//   training; every change of membership is a full restart from the last completed checkpoint
//   (losing the work since), re-planned as identical pipelines for the new node count. A join
//   first takes a checkpoint at the next step boundary, so it loses nothing.
// - redundant: redundant computation (Bamboo, NSDI'23). Every step also computes a neighbour's
//   layers, so only part of a step is useful; an isolated failure fails over to the neighbour's
//   copy and rebalances; a failure next to a node that failed since the last rebalance has no
//   copy left and forces a full restart.
//
// Every cost is a field below with its default's source; the command line overrides each one.
// Invariant: a Policy never looks at time except through the Change it is given, so the replay
// (replay.h) alone owns the timeline and its accounting.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forecast/model.h"
#include "forecast/trace.h"

namespace bw::forecast {

enum class PolicyKind { kBreakwater, kRestart, kRedundant };
PolicyKind parse_policy(const std::string& name);  // ConfigError listing the names
std::string to_string(PolicyKind kind);

struct BreakwaterCosts {
  // A crashed worker's connections close at once; docs/design.md targets reconfiguration starting
  // within 1 s of a crash (a hang waits for the 10 s heartbeat timeout instead).
  double detection_ms = 1000;
  // Inter-node bandwidth for state transfer: 100 Gb/s, one commodity NIC per node
  // (AWS p3dn/p4d nodes have 100-400 Gb/s).
  double inter_node_gbps = 100;
  // New process groups for the next generation: assumption, to be replaced by the runtime's
  // measurement (issue 4's recovery benchmark).
  double regroup_ms = 500;
  // When set, a reconfiguration costs exactly this instead (Oobleck's artifact uses 2 s for
  // BERT-large), for comparisons with published numbers.
  std::optional<double> fixed_reconfigure_ms;
  // On the planner: after a change, a fresh plan for the whole membership replaces the
  // incremental one (reconfigure/join) when it does more steps over this horizon, its larger
  // state transfer included (default 10 minutes, the scale of failure intervals on spot
  // instances). 0: always incremental, as Oobleck.
  double replan_horizon_ms = 600e3;
  // Oobleck's artifact: a node that joins while at least this many nodes are live (the
  // artifact's 12, one pipeline, whether the model fits on them or not) waits as a spare and is
  // taken in only by the next failure's reconfiguration; with fewer live nodes a join
  // reconfigures. 0: every join reconfigures at the next step boundary.
  int join_waits_for_failure_from_nodes = 0;
  // Oobleck's artifact: the configuration that lost a node keeps training until the
  // reconfiguration ends (its run is only abandoned then), so a step that completes within the
  // reconfiguration is kept. Physically a pipeline that lost a stage cannot finish its step:
  // off by default (RestartCosts::train_through_restart is the same for Varuna).
  bool train_through_reconfiguration = false;
  // Oobleck's artifact: a change while training is stalled (too few nodes) starts a
  // rendezvous of the usual cost even if the nodes are still too few; nodes that become ready
  // during a rendezvous join it without extending it, and training starts at its end if enough
  // took part. Off: a recovery starts only once training can resume, and a join extends it.
  bool stalled_rendezvous = false;
};

struct RestartCosts {
  // Varuna's restart after a membership change (rendezvous, process start, checkpoint load):
  // 76 s for BERT-large in Oobleck's SOSP'23 artifact (tools/simulator, varuna_simulator.py).
  double restart_ms = 76e3;
  // Restart cost by the node count the cluster ran on before the change (the artifact's
  // BERT-large Varuna: 49.1-112 s for 15-30 nodes); counts between rows take the next lower
  // row, counts below the first the first. Empty: restart_ms for every count.
  std::map<int, double> restart_ms_by_nodes;
  // Varuna's artifact behaviour: a checkpoint right after the first step that follows a
  // failure's restart, and the restart's downtime is its cost minus one checkpoint (the cost
  // includes it).
  bool checkpoint_after_restart = false;
  // Checkpoints when the count of steps completed since the start (rolled-back ones included)
  // reaches a multiple of checkpoint_every_steps, as the artifact counts them, instead of every
  // checkpoint_every_steps steps after each (re)start.
  bool align_checkpoints = false;
  // Varuna's artifact: the configuration that lost a node keeps training until the restart
  // ends (the run in flight is only abandoned then), so the steps it completes during the
  // restart are kept unless a later failure rolls them back, and the first step it completes
  // after the failure is followed by a checkpoint (then no checkpoint follows the restart's
  // first step). Physically a pipeline that lost a stage cannot train: off by default.
  bool train_through_restart = false;
  // As BreakwaterCosts::join_waits_for_failure_from_nodes and stalled_rendezvous, for
  // Varuna's artifact (12; on).
  int join_waits_for_failure_from_nodes = 0;
  bool stalled_rendezvous = false;
  double restart_for(int nodes_before) const;
  // Checkpoint cost and cadence from the same artifact: 15.8 s every 10 steps.
  double checkpoint_ms = 15.8e3;
  int checkpoint_every_steps = 10;
};

struct RedundantCosts {
  // Bamboo's rebalance after an isolated failure: 76 s for BERT-large in Oobleck's artifact
  // (bamboo_simulator.py, local rendezvous).
  double rebalance_ms = 76e3;
  // Full restart when neighbours fail together: taken equal to Varuna's restart (76 s).
  double restart_ms = 76e3;
  // Useful share of a step: 0.1971 at one failure every 10 minutes in Oobleck's artifact (the
  // rest of each step is redundant computation).
  double useful_share = 0.1971;
  // The model's step time is Bamboo's measured step, redundant work included (the artifact's
  // throughput tables), rather than the non-redundant step it slows by 1 / useful_share.
  bool step_includes_redundancy = false;
  // Set: after an isolated failure the step in flight is not lost; its remaining part runs this
  // many times slower on the neighbour's copy (the artifact: 1.5) and the rebalance follows the
  // step. Unset: the step in flight is lost and the rebalance starts at once.
  std::optional<double> failover_slowdown;
  // Bamboo's artifact: a join rebalances (at the next step boundary) only when the live nodes
  // can form one more pipeline of this many nodes than the configuration that runs (12);
  // otherwise the node waits as a spare for the next rebalance. 0: every join rebalances.
  int join_rebalance_pipeline_nodes = 0;
  // Bamboo's artifact, with join_rebalance_pipeline_nodes: pipelines are the first whole
  // multiples of that many nodes (in trace order) at each rebalance; removing a node outside
  // them (a spare) slows training by failover_slowdown, the step in flight included, until the
  // next rebalance, which no failure of a spare calls for. Physically a spare trains nothing,
  // and its loss changes nothing: off.
  bool idle_removal_slows = false;
};

struct PolicyCosts {
  BreakwaterCosts breakwater;
  RestartCosts restart;
  RedundantCosts redundant;
};

// The constants of Oobleck's SOSP'23 artifact for BERT-large: Oobleck's reconfiguration 2 s,
// Varuna's restart 76 s with checkpoints of 15.8 s every 10 steps, Bamboo's rebalance 76 s and
// useful share 0.1971. With one failure every 10 minutes the paper reports 95.5% (Oobleck),
// 54.4% (Varuna) and 15.0% (Bamboo) useful time; docs/forecast.md derives the step times these
// imply and tests/forecast/published_test.cc checks that the policies reproduce them.
PolicyCosts oobleck_artifact_bert_large();

// Steps between checkpoints that minimise the expected loss for a checkpoint cost C and a mean
// time between failures M: Young's interval sqrt(2 C M) (Young, CACM 1974), in steps of
// `step_ms`, at least 1. ConfigError for non-positive inputs.
int young_checkpoint_steps(double checkpoint_ms, double mtbf_ms, double step_ms);

// How training runs on a configuration.
struct RunParams {
  double step_ms = 0;              // wall time of one step, redundant work included
  double useful_share = 1;         // fraction of a step that is useful work
  int checkpoint_every_steps = 0;  // 0: no periodic checkpoints
  double checkpoint_ms = 0;
  bool checkpoint_after_first_step = false;  // RestartCosts::checkpoint_after_restart
  bool align_checkpoints = false;            // RestartCosts::align_checkpoints
};

enum class Rollback { kNone, kStep, kCheckpoint };
enum class Cause { kReconfigure, kRestart, kRebalance };
std::string to_string(Cause cause);

struct Change {
  EventKind kind = EventKind::kRemove;
  std::string node;
  int nodes_before = 0;
  int nodes_after = 0;
  bool running = false;  // training was running (not recovering or stalled) when it happened
};

struct Reaction {
  Cause cause = Cause::kReconfigure;
  double downtime_ms = 0;
  double checkpoint_ms = 0;  // a checkpoint taken before the downtime (counted as checkpoint)
  Rollback rollback = Rollback::kStep;
  bool at_step_boundary = false;  // applied at the end of the in-flight step, losing nothing
  bool no_op = false;             // nothing changes for training (e.g. a node kept as a spare)
  // With at_step_boundary: the rest of the in-flight step runs this many times slower (the
  // extra time counts as downtime of `cause`).
  double slowdown = 1;
  // While running, with a rollback: the run goes on through the downtime, its steps kept, and
  // is abandoned when the downtime ends; with Rollback::kCheckpoint the steps since the last
  // completed checkpoint are lost at once and the first step completed after the change is
  // checkpointed (BreakwaterCosts::train_through_reconfiguration,
  // RestartCosts::train_through_restart).
  bool train_through = false;
  // While stalled, the change starts a recovery even if training cannot resume after it;
  // during a recovery, a join (Rollback::kNone) joins it without extending it
  // (BreakwaterCosts::stalled_rendezvous).
  bool rendezvous = false;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual PolicyKind kind() const = 0;
  // How training runs on `nodes` nodes, or nullopt when it cannot.
  virtual std::optional<RunParams> run_params(int nodes) = 0;
  // The reaction to one membership change after the initial membership.
  virtual Reaction on_change(const Change& change) = 0;
  // Recovery finished and training resumes (or stalls) on the current membership of `nodes`.
  virtual void on_resumed(int nodes) { (void)nodes; }
  // The initial membership, in trace order (before any on_change).
  virtual void on_start(const std::vector<std::string>& nodes) { (void)nodes; }
  // The system's own start-up on `nodes` nodes, after the instances booted, for a cold start
  // (ReplayOptions::startup_ms): Oobleck's first rendezvous, Varuna's first launch, Bamboo's
  // global rendezvous. No rollback; the replay accounts it as downtime of its cause.
  virtual Reaction on_cold_start(int nodes) {
    (void)nodes;
    Reaction r;
    r.no_op = true;
    return r;
  }
};

std::unique_ptr<Policy> make_policy(PolicyKind kind, const PolicyCosts& costs,
                                    ThroughputModel& model);

}  // namespace bw::forecast
