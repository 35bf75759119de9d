// Replay on hand-computable cases: constant step times, failures at known times, every
// millisecond accounted for.
#include "forecast/replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "replay_util.h"

namespace bw::forecast {
namespace {

ReplayResult run(const Trace& t, PolicyKind k, double duration_ms, bool whole = false,
                 double step_ms = 1000) {
  ConstantModel model(step_ms, 8);
  ReplayOptions o;
  o.duration_ms = duration_ms;
  o.whole_step_loss = whole;
  return replay(t, k, hand_costs(), model, o);
}

TEST(Replay, NoFailuresEveryPolicy) {
  const auto t = nodes_then(4, "");
  // breakwater: 10 steps of 1 s.
  auto r = run(t, PolicyKind::kBreakwater, 10000);
  expect_breakdown(r, {.useful_ms = 10000});
  EXPECT_DOUBLE_EQ(r.steps, 10);
  EXPECT_DOUBLE_EQ(r.samples, 80);
  EXPECT_DOUBLE_EQ(r.useful_fraction(), 1.0);
  // restart: cycles of 2 steps + 0.5 s checkpoint; 4 cycles in 10 s.
  r = run(t, PolicyKind::kRestart, 10000);
  expect_breakdown(r, {.useful_ms = 8000, .checkpoint_ms = 2000});
  EXPECT_DOUBLE_EQ(r.steps, 8);
  // redundant: steps of 2 s, half useful.
  r = run(t, PolicyKind::kRedundant, 10000);
  expect_breakdown(r, {.useful_ms = 5000, .redundant_ms = 5000});
  EXPECT_DOUBLE_EQ(r.steps, 5);
  EXPECT_EQ(r.failures + r.joins + r.reconfigurations + r.restarts + r.rebalances, 0);
}

TEST(Replay, OneFailureBreakwater) {
  const auto t = nodes_then(4, "3500,remove,node2\n");
  // 3 steps, 0.5 s of the 4th lost, 2 s reconfiguration from 3.5 s to 5.5 s, then 4.5 steps.
  auto r = run(t, PolicyKind::kBreakwater, 10000);
  expect_breakdown(r, {.useful_ms = 7500, .lost_ms = 500, .reconfigure_ms = 2000});
  EXPECT_EQ(r.failures, 1);
  EXPECT_EQ(r.reconfigurations, 1);
  EXPECT_DOUBLE_EQ(r.steps, 7.5);
  // Whole-step accounting: the interrupted step runs out (to 4 s) before the reconfiguration.
  r = run(t, PolicyKind::kBreakwater, 10000, true);
  expect_breakdown(r, {.useful_ms = 7000, .lost_ms = 1000, .reconfigure_ms = 2000});
}

TEST(Replay, OneFailureRestartLosesWorkSinceCheckpoint) {
  // Cycle: steps [0,1) [1,2), checkpoint [2,2.5), steps [2.5,3.5) [3.5,4.5), checkpoint...
  // A failure at 4.2 s keeps the 2 checkpointed steps, loses the step done at 3.5 s and 0.7 s
  // of the next; restart 3 s to 7.2 s; then 2 steps + checkpoint (to 9.7 s) + 0.3 of a step.
  const auto t = nodes_then(4, "4200,remove,node1\n");
  const auto r = run(t, PolicyKind::kRestart, 10000);
  expect_breakdown(
      r,
      {.useful_ms = 2000 + 2000 + 300, .lost_ms = 1700, .checkpoint_ms = 1000, .restart_ms = 3000});
  EXPECT_EQ(r.restarts, 1);
}

TEST(Replay, FailureDuringCheckpointWastesIt) {
  // Failure at 2.2 s, inside the first checkpoint [2, 2.5): both steps lost (not covered yet).
  const auto t = nodes_then(4, "2200,remove,node1\n");
  const auto r = run(t, PolicyKind::kRestart, 5200);
  // Restart to 5.2 s; the run ends there.
  expect_breakdown(r, {.lost_ms = 2000, .checkpoint_ms = 200, .restart_ms = 3000});
}

TEST(Replay, RedundantIsolatedFailureRebalances) {
  // Steps of 2 s (half redundant). Failure at 5 s: 2 steps kept, 1 s lost, rebalance 1.5 s.
  const auto t = nodes_then(6, "5000,remove,node3\n");
  const auto r = run(t, PolicyKind::kRedundant, 10500);
  // Resume at 6.5 s: 2 more steps to 10.5 s.
  expect_breakdown(
      r, {.useful_ms = 4000, .redundant_ms = 4000, .lost_ms = 1000, .rebalance_ms = 1500});
  EXPECT_EQ(r.rebalances, 1);
  EXPECT_EQ(r.restarts, 0);
}

TEST(Replay, RedundantNeighboursFailingTogetherRestart) {
  // node3 fails at 5 s, its neighbour node4 at 5.5 s during the rebalance: full restart 4 s.
  const auto t = nodes_then(6, "5000,remove,node3\n5500,remove,node4\n");
  const auto r = run(t, PolicyKind::kRedundant, 11500);
  // Rebalance 5 -> 5.5 s, then restart until max(6.5, 9.5) = 9.5 s; 1 step to 11.5 s.
  expect_breakdown(r, {.useful_ms = 3000,
                       .redundant_ms = 3000,
                       .lost_ms = 1000,
                       .restart_ms = 4000,
                       .rebalance_ms = 500});
  EXPECT_EQ(r.restarts, 1);
  // Non-neighbours (node1 and node4) fail over twice without a restart.
  const auto t2 = nodes_then(6, "5000,remove,node1\n5500,remove,node4\n");
  const auto r2 = run(t2, PolicyKind::kRedundant, 11500);
  EXPECT_EQ(r2.restarts, 0);
  EXPECT_EQ(r2.rebalances, 2);
  EXPECT_NEAR(r2.time.rebalance_ms, 500 + 1500, 1e-6);
}

TEST(Replay, AllNodesLostStalls) {
  const auto t = nodes_then(2, "4200,remove,node1\n4200,remove,node2\n");
  for (auto k : {PolicyKind::kBreakwater, PolicyKind::kRedundant}) {
    const auto r = run(t, k, 10000);
    EXPECT_EQ(r.failures, 2);
    EXPECT_NEAR(r.time.stalled_ms + r.time.useful_ms + r.time.redundant_ms + r.time.lost_ms, 10000,
                1e-6);
  }
  const auto r = run(t, PolicyKind::kBreakwater, 10000);
  expect_breakdown(r, {.useful_ms = 4000, .lost_ms = 200, .stalled_ms = 5800});
  EXPECT_DOUBLE_EQ(r.samples, 32);
}

TEST(Replay, TooFewNodesStallsUntilAJoin) {
  // Needs 3 nodes. 3 -> 2 at 2.5 s (stall), node4 joins at 6 s: reconfigure 2 s, run from 8 s.
  ConstantModel model(1000, 8, 3);
  const auto t = nodes_then(3, "2500,remove,node1\n6000,add,node4\n");
  ReplayOptions o;
  o.duration_ms = 10000;
  const auto r = replay(t, PolicyKind::kBreakwater, hand_costs(), model, o);
  expect_breakdown(r,
                   {.useful_ms = 4000, .lost_ms = 500, .reconfigure_ms = 2000, .stalled_ms = 3500});
  EXPECT_EQ(r.joins, 1);
}

TEST(Replay, JoinWaitsForStepBoundary) {
  // Join at 3.4 s: the step ends at 4 s, then 2 s reconfiguration, 4 steps to 10 s; no loss.
  const auto t = nodes_then(4, "3400,add,node9\n");
  const auto r = run(t, PolicyKind::kBreakwater, 10000);
  expect_breakdown(r, {.useful_ms = 8000, .reconfigure_ms = 2000});
  // Restart policy: checkpoint at the boundary (0.5 s), then the restart (3 s). The run's own
  // checkpoint fell at [2, 2.5), so the step boundary after 3.4 s is 3.5 s.
  const auto r2 = run(t, PolicyKind::kRestart, 10000);
  // 3.5 + 0.5 + 3 = 7 s; then 2 steps + checkpoint to 9.5 s and half a step.
  expect_breakdown(
      r2, {.useful_ms = 3000 + 2500, .checkpoint_ms = 500 + 500 + 500, .restart_ms = 3000});
}

TEST(Replay, InitialMembershipLaterThanZeroIsStalledTime) {
  const auto t = parse_trace("1000,add,a\n1000,add,b\n", "late");
  const auto r = run(t, PolicyKind::kBreakwater, 5000);
  expect_breakdown(r, {.useful_ms = 4000, .stalled_ms = 1000});
}

TEST(Replay, RejectsInconsistentTraceAndEmptyWindow) {
  EXPECT_THROW(run(parse_trace("0,add,a\n5,remove,b\n", "x"), PolicyKind::kBreakwater, 100),
               ConfigError);
  EXPECT_THROW(run(parse_trace("0,add,a\n", "x"), PolicyKind::kBreakwater, 0), ConfigError);
}

TEST(Replay, TimelineCoversTheWindowAndMarksFailures) {
  const auto t = nodes_then(4, "3500,remove,node2\n");
  const auto r = run(t, PolicyKind::kBreakwater, 10000);
  ASSERT_FALSE(r.timeline.empty());
  EXPECT_DOUBLE_EQ(r.timeline.front().start_ms, 0);
  EXPECT_DOUBLE_EQ(r.timeline.back().end_ms, 10000);
  for (std::size_t i = 1; i < r.timeline.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.timeline[i].start_ms, r.timeline[i - 1].end_ms) << i;
  }
  EXPECT_EQ(r.failure_times_ms, std::vector<double>{3500});
}

TEST(YoungInterval, MatchesTheFormulaAndMinimisesLossOnPoisson) {
  // sqrt(2 * 15.8 s * 600 s) = 137.7 s = 4.2 steps of 32.6 s.
  EXPECT_EQ(young_checkpoint_steps(15.8e3, 600e3, 32.6e3), 4);
  EXPECT_EQ(young_checkpoint_steps(15.8e3, 600e3, 1e6), 1);
  EXPECT_THROW(young_checkpoint_steps(0, 600e3, 1e3), ConfigError);
  // On Poisson failures, Young's k is within 2% of the best k found by brute force.
  SyntheticSpec s;
  s.pattern = FailurePattern::kPoisson;
  s.nodes = 10000;
  s.interval_ms = 600e3;
  s.duration_ms = 100 * 3600e3;
  const auto trace = make_synthetic(s);
  ConstantModel model(2000, 1);
  ReplayOptions o;
  o.duration_ms = s.duration_ms;
  auto useful = [&](int k) {
    PolicyCosts c;
    c.restart.checkpoint_every_steps = k;
    return replay(trace, PolicyKind::kRestart, c, model, o).useful_fraction();
  };
  double best = 0;
  for (int k = 1; k <= 120; ++k) best = std::max(best, useful(k));
  EXPECT_GE(useful(young_checkpoint_steps(15.8e3, 600e3, 2000)), best - 0.02);
}

}  // namespace
}  // namespace bw::forecast

namespace bw::forecast {
namespace {

// Instance start-up of joins: replaying with join_boot_ms equals replaying, over the same window,
// the trace with each later addition written that much later by hand.
TEST(Replay, JoinBootEqualsTheTraceWithLaterAdditions) {
  const auto given = nodes_then(3, "2500,remove,node1\n6000,add,node4\n9000,add,node5\n");
  const auto by_hand = nodes_then(3, "2500,remove,node1\n7500,add,node4\n10500,add,node5\n");
  for (const auto kind : {PolicyKind::kBreakwater, PolicyKind::kRestart, PolicyKind::kRedundant}) {
    ConstantModel model(1000, 8, 3);
    ReplayOptions o;
    o.duration_ms = 20000;
    const auto plain = replay(by_hand, kind, hand_costs(), model, o);
    o.join_boot_ms = 1500;
    const auto booted = replay(given, kind, hand_costs(), model, o);
    EXPECT_DOUBLE_EQ(booted.time.useful_ms, plain.time.useful_ms) << to_string(kind);
    EXPECT_DOUBLE_EQ(booted.time.stalled_ms, plain.time.stalled_ms) << to_string(kind);
    EXPECT_DOUBLE_EQ(booted.samples, plain.samples) << to_string(kind);
    EXPECT_EQ(booted.join_times_ms, plain.join_times_ms) << to_string(kind);
    o.join_boot_ms = 0;
    EXPECT_LT(replay(given, kind, hand_costs(), model, o).time.stalled_ms, plain.time.stalled_ms)
        << to_string(kind) << ": without the boot, node4 ends the stall earlier";
  }
}

TEST(Replay, NodeLeavingWhileBootingNeverJoins) {
  // node9 is added at 3 s and removed at 4 s, inside its 2 s boot: as if it never existed.
  const auto given = nodes_then(4, "3000,add,node9\n4000,remove,node9\n");
  ConstantModel model(1000, 8);
  ReplayOptions o;
  o.duration_ms = 10000;
  o.join_boot_ms = 2000;
  const auto r = replay(given, PolicyKind::kBreakwater, hand_costs(), model, o);
  expect_breakdown(r, {.useful_ms = 10000});
  EXPECT_EQ(r.joins, 0);
  EXPECT_EQ(r.failures, 0);
  // Removed after its boot, it joined and then failed.
  o.join_boot_ms = 500;
  const auto late = replay(given, PolicyKind::kBreakwater, hand_costs(), model, o);
  EXPECT_EQ(late.joins, 1);
  EXPECT_EQ(late.failures, 1);
}

TEST(Trace, DelayJoinsKeepsInitialMembershipAndRejectsBadDelays) {
  const auto t = parse_trace("0,add,a\n0,add,b\n100,remove,a\n200,add,c\n250,add,a\n", "test");
  const auto d = delay_joins(t, 100);
  EXPECT_EQ(
      format_trace(d),
      format_trace(parse_trace("0,add,a\n0,add,b\n100,remove,a\n300,add,c\n350,add,a\n", "test")));
  EXPECT_EQ(format_trace(delay_joins(t, 0)), format_trace(t));
  EXPECT_THROW(delay_joins(t, -1), ConfigError);
  EXPECT_THROW(delay_joins(t, std::nan("")), ConfigError);
}

}  // namespace
}  // namespace bw::forecast

namespace bw::forecast {
namespace {

// The artifact's behaviours, each switched on and off against hand-computed timelines.
TEST(ArtifactSwitches, FailoverSlowdownFinishesTheStepInFlightSlower) {
  // Redundant steps of 2 s. node3 fails at 5 s, inside the step [4, 6).
  const auto t = nodes_then(6, "5000,remove,node3\n");
  ConstantModel model(1000, 8);
  ReplayOptions o;
  o.duration_ms = 12000;
  PolicyCosts c = hand_costs();
  c.redundant.failover_slowdown = 1.5;
  // Its last 1 s runs 1.5x slower (0.5 s more, charged to the rebalance), the step is kept,
  // then the 1.5 s rebalance: resume at 8 s, 2 steps to 12 s.
  auto r = replay(t, PolicyKind::kRedundant, c, model, o);
  expect_breakdown(r, {.useful_ms = 5000, .redundant_ms = 5000, .rebalance_ms = 2000});
  // Switched off: the step in flight is lost and the rebalance starts at once (5 -> 6.5 s);
  // 2 steps and 1.5 s of a third to 12 s, half of each step useful.
  c.redundant.failover_slowdown.reset();
  r = replay(t, PolicyKind::kRedundant, c, model, o);
  expect_breakdown(r, {.useful_ms = (4000 + 4000 + 1500) / 2.0,
                       .redundant_ms = (4000 + 4000 + 1500) / 2.0,
                       .lost_ms = 1000,
                       .rebalance_ms = 1500});
}

TEST(ArtifactSwitches, CheckpointRightAfterARestart) {
  // As OneFailureRestartLosesWorkSinceCheckpoint: failure at 4.2 s (1.7 s lost). With the
  // switch the restart costs 3 - 0.5 s (to 6.7 s), the first step [6.7, 7.7) is checkpointed at
  // once [7.7, 8.2), then 0.3 of a step to 8.5 s. Without it: restart to 7.2 s, 1.3 steps.
  const auto t = nodes_then(4, "4200,remove,node1\n");
  ConstantModel model(1000, 8);
  ReplayOptions o;
  o.duration_ms = 8500;
  PolicyCosts c = hand_costs();
  c.restart.checkpoint_after_restart = true;
  auto r = replay(t, PolicyKind::kRestart, c, model, o);
  expect_breakdown(r, {.useful_ms = 2000 + 1000 + 300,
                       .lost_ms = 1700,
                       .checkpoint_ms = 500 + 500,
                       .restart_ms = 2500});
  c.restart.checkpoint_after_restart = false;
  r = replay(t, PolicyKind::kRestart, c, model, o);
  expect_breakdown(
      r, {.useful_ms = 2000 + 1300, .lost_ms = 1700, .checkpoint_ms = 500, .restart_ms = 3000});
}

TEST(ArtifactSwitches, AlignedCheckpointsCountEveryStepSinceTheStart) {
  // Failure at 4.2 s after 3 completed steps (the third rolled back); restart to 7.2 s.
  // Aligned: step 4 ends at 8.2 s, a multiple of 2, so a checkpoint [8.2, 8.7), then 0.3 of a
  // step to 9 s. Not aligned: the cadence restarts, 1.8 steps and no checkpoint by 9 s.
  const auto t = nodes_then(4, "4200,remove,node1\n");
  ConstantModel model(1000, 8);
  ReplayOptions o;
  o.duration_ms = 9000;
  PolicyCosts c = hand_costs();
  c.restart.align_checkpoints = true;
  auto r = replay(t, PolicyKind::kRestart, c, model, o);
  expect_breakdown(r, {.useful_ms = 2000 + 1000 + 300,
                       .lost_ms = 1700,
                       .checkpoint_ms = 500 + 500,
                       .restart_ms = 3000});
  c.restart.align_checkpoints = false;
  r = replay(t, PolicyKind::kRestart, c, model, o);
  expect_breakdown(
      r, {.useful_ms = 2000 + 1800, .lost_ms = 1700, .checkpoint_ms = 500, .restart_ms = 3000});
}

TEST(ArtifactSwitches, ColdStartBootsThenStartsEachSystem) {
  // 5 s of instance boot (stalled), then each system's own start-up, then steps to 10 s.
  const auto t = nodes_then(6, "");
  ConstantModel model(1000, 8);
  ReplayOptions o;
  o.duration_ms = 10000;
  o.startup_ms = 5000;
  expect_breakdown(replay(t, PolicyKind::kBreakwater, hand_costs(), model, o),
                   {.useful_ms = 3000, .reconfigure_ms = 2000, .stalled_ms = 5000});
  expect_breakdown(replay(t, PolicyKind::kRestart, hand_costs(), model, o),
                   {.useful_ms = 2000, .restart_ms = 3000, .stalled_ms = 5000});
  expect_breakdown(replay(t, PolicyKind::kRedundant, hand_costs(), model, o),
                   {.useful_ms = 500, .redundant_ms = 500, .restart_ms = 4000, .stalled_ms = 5000});
  o.startup_ms = 0;  // switched off: training from time 0 at no cost
  expect_breakdown(replay(t, PolicyKind::kBreakwater, hand_costs(), model, o),
                   {.useful_ms = 10000});
}

}  // namespace
}  // namespace bw::forecast
