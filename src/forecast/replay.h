// Replays a cluster through a membership trace under one policy and accounts for every
// millisecond: useful work, redundant work, work lost to rollbacks, checkpoints, downtime by
// cause (reconfigure, restart, rebalance) and time stalled with too few nodes.
//
// Time advances from one event to the next (trace events, end of a recovery, the next step
// boundary for a pending join); between events training runs at a fixed step time, so the
// steps and checkpoints of a span are counted in closed form and the cost is O(events), not
// O(steps). Invariant (tested): the parts of TimeBreakdown sum to the replayed duration.
//
// Semantics:
// - The events at the trace's first timestamp are the initial membership; training starts then
//   at no cost (time before it is stalled).
// - A failure while running ends the run: steps completed so far are kept (or, for a rollback
//   to checkpoint, only those a completed checkpoint covers); the elapsed part of the in-flight
//   step is lost, or the whole step with ReplayOptions::whole_step_loss. Then the policy's
//   downtime, after which training resumes at the new membership's step time.
// - A change during a recovery extends it to max(current end, now + new downtime).
// - With Reaction::train_through (the artifact's Oobleck and Varuna) the configuration that lost
//   a node trains on until the downtime ends, its completed steps kept (for a rollback to
//   checkpoint: those since the last completed checkpoint are lost at once, the first step after
//   the failure is checkpointed, and a checkpoint still in flight when the downtime ends covers
//   its steps unless a failure comes before it completes); the downtime is then training time.
// - At the end of the window the in-flight step counts in proportion to its elapsed part.
#pragma once

#include <string>
#include <vector>

#include "forecast/model.h"
#include "forecast/policies.h"
#include "forecast/trace.h"

namespace bw::forecast {

struct TimeBreakdown {
  double useful_ms = 0;       // committed steps: the useful part
  double redundant_ms = 0;    // committed steps: the redundant part (redundant policy)
  double lost_ms = 0;         // rolled back: interrupted steps, steps after the last checkpoint
  double checkpoint_ms = 0;   // writing checkpoints
  double reconfigure_ms = 0;  // downtime by cause
  double restart_ms = 0;
  double rebalance_ms = 0;
  double stalled_ms = 0;  // too few nodes to train
  double total_ms() const;
};

// Piecewise-constant throughput for plots: `samples_per_s` of useful work while running,
// 0 while recovering or stalled.
struct Segment {
  double start_ms = 0;
  double end_ms = 0;
  double samples_per_s = 0;
  int nodes = 0;
};

struct ReplayOptions {
  double duration_ms = 0;        // replay [0, duration); 0: up to the trace's last event
  bool whole_step_loss = false;  // Oobleck's artifact accounting (see PolicyCosts)
  // Cold start: the instances boot for this long (stalled; the artifact: 45 s), then the
  // policy's own start-up (Policy::on_cold_start) before the first step. 0: training starts at
  // the trace's first timestamp at no cost.
  double startup_ms = 0;
  // Instance start-up of nodes that join later (the artifact: the same 45 s): each joins this
  // long after the trace adds it, and one removed before that never joins (delay_joins,
  // trace.h). 0: a node joins when the trace adds it.
  double join_boot_ms = 0;
  bool record_timeline = true;
};

struct ReplayResult {
  PolicyKind policy = PolicyKind::kBreakwater;
  double duration_ms = 0;
  TimeBreakdown time;
  double samples = 0;        // samples of committed steps
  double steps = 0;          // committed steps (fractional only for the one in flight at the end)
  int failures = 0;          // removals after the initial membership
  int joins = 0;             // additions after the initial membership
  int reconfigurations = 0;  // reactions by cause
  int restarts = 0;
  int rebalances = 0;
  std::vector<Segment> timeline;
  std::vector<double> failure_times_ms;
  std::vector<double> join_times_ms;
  double useful_fraction() const { return duration_ms > 0 ? time.useful_ms / duration_ms : 0.0; }
};

ReplayResult replay(const Trace& trace, Policy& policy, ThroughputModel& model,
                    const ReplayOptions& options);

// Convenience: builds the policy from its kind and costs.
ReplayResult replay(const Trace& trace, PolicyKind kind, const PolicyCosts& costs,
                    ThroughputModel& model, const ReplayOptions& options);

}  // namespace bw::forecast
