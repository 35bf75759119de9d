// The behaviours of Oobleck's SOSP'23 artifact that the replay reproduces behind switches
// (docs/forecast.md), each on a timeline small enough to work out by hand: every expected
// breakdown below is the sum of the intervals written in its comment, not the replay's output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "forecast/replay.h"
#include "replay_util.h"

namespace bw::forecast {
namespace {

ReplayOptions window(double ms) {
  ReplayOptions o;
  o.duration_ms = ms;
  return o;
}

TEST(ArtifactSwitches, JoinWaitsForTheNextFailure) {
  // Steps of 1.5 s on 3 nodes, 1.2 s on 4, 1 s on 5. node5 joins at 2.5 s, node1 fails at 6.3 s.
  TableModel model({{3, 1500}, {4, 1200}, {5, 1000}}, 8);
  const auto t = nodes_then(4, "2500,add,node5\n6300,remove,node1\n");
  PolicyCosts c = hand_costs();
  c.breakwater.join_waits_for_failure_from_nodes = 4;
  // node5 waits: 5 steps of 1.2 s to 6 s, 0.3 s lost, reconfiguration [6.3, 8.3) onto the 4
  // live nodes (the spare included), 2 steps of 1.2 s to 10.7 s.
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10700)),
                   {.useful_ms = 6000 + 2400, .lost_ms = 300, .reconfigure_ms = 2000});
  // Off, or with fewer live nodes than the threshold: node5 joins at the boundary at 3.6 s
  // (reconfiguration to 5.6 s), 0.7 s of a 1 s step lost at 6.3 s, reconfiguration to 8.3 s, 2
  // steps of 1.2 s.
  const TimeBreakdown joined{.useful_ms = 3600 + 2400, .lost_ms = 700, .reconfigure_ms = 4000};
  c.breakwater.join_waits_for_failure_from_nodes = 5;
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10700)), joined);
  c.breakwater.join_waits_for_failure_from_nodes = 0;
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10700)), joined);
}

TEST(ArtifactSwitches, RestartCostIsTheRunningConfigurations) {
  // Restart 3 s from 4 nodes, 6 s from 5. node5 joins at 1.2 s as a spare; node1 fails at 4.2
  // s. Steps [0, 2), checkpoint [2, 2.5), step [2.5, 3.5) rolled back, 0.7 s of the next lost,
  // restart from the 4 nodes that ran [4.2, 7.2), steps [7.2, 9.2), checkpoint [9.2, 9.7), 0.3
  // of a step to 10 s.
  ConstantModel model(1000, 8);
  const auto t = nodes_then(4, "1200,add,node5\n4200,remove,node1\n");
  PolicyCosts c = hand_costs();
  c.restart.restart_ms_by_nodes = {{4, 3000}, {5, 6000}};
  c.restart.join_waits_for_failure_from_nodes = 4;
  expect_breakdown(replay(t, PolicyKind::kRestart, c, model, window(10000)),
                   {.useful_ms = 2000 + 2000 + 300,
                    .lost_ms = 1000 + 700,
                    .checkpoint_ms = 500 + 500,
                    .restart_ms = 3000});
}

TEST(ArtifactSwitches, TrainThroughReconfiguration) {
  // Steps of 1 s; node2 fails at 3.5 s; reconfiguration 2 s. The old configuration finishes
  // the steps [3, 4) and [4, 5) and is abandoned at 5.5 s, 0.5 s into [5, 6); then 4.5 steps to
  // 10 s. Off: 0.5 s lost at 3.5 s, reconfiguration [3.5, 5.5), 4.5 steps.
  ConstantModel model(1000, 8);
  const auto t = nodes_then(4, "3500,remove,node2\n");
  PolicyCosts c = hand_costs();
  c.breakwater.train_through_reconfiguration = true;
  auto r = replay(t, PolicyKind::kBreakwater, c, model, window(10000));
  expect_breakdown(r, {.useful_ms = 5000 + 4500, .lost_ms = 500});
  EXPECT_EQ(r.reconfigurations, 1);
  c.breakwater.train_through_reconfiguration = false;
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10000)),
                   {.useful_ms = 3000 + 4500, .lost_ms = 500, .reconfigure_ms = 2000});
}

// The restart policy as the artifact runs it: restart 3 s - 0.5 s (the checkpoint after the
// restart's first step is part of the cost), checkpoints every 2 steps. Run from 0: steps
// [0, 2), checkpoint [2, 2.5), steps [2.5, 4.5), checkpoint [4.5, 5), ...
PolicyCosts artifact_restart() {
  PolicyCosts c = hand_costs();
  c.restart.checkpoint_after_restart = true;
  c.restart.train_through_restart = true;
  return c;
}

TEST(ArtifactSwitches, TrainThroughRestart) {
  ConstantModel model(1000, 8);
  const auto t = nodes_then(4, "4200,remove,node1\n");
  // Failure at 4.2 s: [2.5, 3.5) is rolled back at once; the restart ends at 6.7 s. Until then
  // the old run finishes [3.5, 4.5), checkpoints it [4.5, 5) (the first step after a failure),
  // does [5, 6) and 0.7 s of [6, 7). The new run needs no checkpoint after its first step: steps
  // [6.7, 8.7), checkpoint [8.7, 9.2), 0.8 of a step to 10 s.
  PolicyCosts c = artifact_restart();
  auto r = replay(t, PolicyKind::kRestart, c, model, window(10000));
  expect_breakdown(r, {.useful_ms = 2000 + 1000 + 1000 + 2000 + 800,
                       .lost_ms = 1000 + 700,
                       .checkpoint_ms = 500 + 500 + 500});
  EXPECT_EQ(r.restarts, 1);
  // Off: 1.7 s lost at 4.2 s, restart [4.2, 6.7), step [6.7, 7.7), checkpoint [7.7, 8.2), steps
  // [8.2, 9.2) and 0.8 of [9.2, 10.2).
  c.restart.train_through_restart = false;
  expect_breakdown(replay(t, PolicyKind::kRestart, c, model, window(10000)),
                   {.useful_ms = 2000 + 1000 + 1000 + 800,
                    .lost_ms = 1700,
                    .checkpoint_ms = 500 + 500,
                    .restart_ms = 2500});
}

TEST(ArtifactSwitches, JoinDuringARestartTrainedThrough) {
  // As TrainThroughRestart, and node5 joins at 5 s. Joining the rendezvous (stalled_rendezvous)
  // does not extend it: the same timeline. Otherwise the restart ends at 5 + 2.5 = 7.5 s: the
  // old run does [5, 7) and its checkpoint [7, 7.5), the new run [7.5, 9.5) and [9.5, 10).
  ConstantModel model(1000, 8);
  const auto t = nodes_then(4, "4200,remove,node1\n5000,add,node5\n");
  PolicyCosts c = artifact_restart();
  c.restart.stalled_rendezvous = true;
  expect_breakdown(replay(t, PolicyKind::kRestart, c, model, window(10000)),
                   {.useful_ms = 2000 + 1000 + 1000 + 2000 + 800,
                    .lost_ms = 1000 + 700,
                    .checkpoint_ms = 500 + 500 + 500});
  c.restart.stalled_rendezvous = false;
  expect_breakdown(replay(t, PolicyKind::kRestart, c, model, window(10000)),
                   {.useful_ms = 2000 + 1000 + 2000 + 2000,
                    .lost_ms = 1000,
                    .checkpoint_ms = 500 + 500 + 500 + 500});
}

TEST(ArtifactSwitches, FailureWhileTrainingThroughARestart) {
  // As above, and node2 fails at 4.8 s, inside the checkpoint [4.5, 5): it fails, so [3.5, 4.5)
  // is lost too, and its rest [4.8, 5) still runs. Then [5, 6) and its checkpoint [6, 6.5),
  // 0.8 s of [6.5, 7.5) lost when the restart ends at 4.8 + 2.5 = 7.3 s; the new run: steps
  // [7.3, 9.3), checkpoint [9.3, 9.8), 0.2 of a step to 10 s.
  ConstantModel model(1000, 8);
  const auto t = nodes_then(4, "4200,remove,node1\n4800,remove,node2\n");
  auto r = replay(t, PolicyKind::kRestart, artifact_restart(), model, window(10000));
  expect_breakdown(r, {.useful_ms = 2000 + 1000 + 2000 + 200,
                       .lost_ms = 1000 + 1000 + 800,
                       .checkpoint_ms = 500 + 300 + 200 + 500 + 500});
  EXPECT_EQ(r.restarts, 2);
}

TEST(ArtifactSwitches, CheckpointInFlightWhenTheRestartEnds) {
  // Restart of 3 s (no checkpoint after it): failure at 4.2 s, restart to 7.2 s. The old run:
  // [3.5, 4.5), checkpoint [4.5, 5), steps [5, 7), checkpoint [7, 7.5) still in flight at 7.2 s
  // (0.2 s of it counted). The new run starts at 7.2 s; a failure at 7.4 s comes before that
  // checkpoint completes, so [5, 7) is lost as well; at 7.6 s it comes after and [5, 7) stays.
  // Either way the new run trains through its own restart (to 10.4 or 10.6 s): [7.2, 8.2),
  // checkpoint [8.2, 8.7), [8.7, 9.7) and 0.3 of a step to 10 s.
  ConstantModel model(1000, 8);
  PolicyCosts c = artifact_restart();
  c.restart.checkpoint_after_restart = false;
  const TimeBreakdown before{.useful_ms = 2000 + 1000 + 1000 + 1000 + 300,
                             .lost_ms = 1000 + 2000,
                             .checkpoint_ms = 500 + 500 + 200 + 500};
  expect_breakdown(replay(nodes_then(4, "4200,remove,node1\n7400,remove,node2\n"),
                          PolicyKind::kRestart, c, model, window(10000)),
                   before);
  TimeBreakdown after = before;
  after.useful_ms += 2000;
  after.lost_ms -= 2000;
  expect_breakdown(replay(nodes_then(4, "4200,remove,node1\n7600,remove,node2\n"),
                          PolicyKind::kRestart, c, model, window(10000)),
                   after);
}

TEST(ArtifactSwitches, CheckpointAfterARestartWaitsThroughAStall) {
  // 3 nodes needed. node1 fails at 4.2 s: 1.7 s rolled back, too few nodes, stalled to 6 s;
  // node4 joins: restart [6, 8.5) (3 - 0.5 s), and the checkpoint the failure calls for follows
  // the first step of that run, [8.5, 9.5) then [9.5, 10), then 0.5 of a step to 10.5 s.
  ConstantModel model(1000, 8, 3);
  PolicyCosts c = hand_costs();
  c.restart.checkpoint_after_restart = true;
  const auto t = nodes_then(3, "4200,remove,node1\n6000,add,node4\n");
  expect_breakdown(replay(t, PolicyKind::kRestart, c, model, window(10500)),
                   {.useful_ms = 2000 + 1000 + 500,
                    .lost_ms = 1700,
                    .checkpoint_ms = 500 + 500,
                    .restart_ms = 2500,
                    .stalled_ms = 1800});
}

TEST(ArtifactSwitches, ColdStartWithTheCheckpointAfterARestart) {
  // The artifact's rendezvous lasts restart - checkpoint, counting on the checkpoint a removal
  // flags for the next step; a cold start has no removal, so it costs 3 - 0.5 s and its first
  // step is not checkpointed: boot [0, 5), start-up [5, 7.5), steps [7.5, 9.5), checkpoint
  // [9.5, 10), steps [10, 12).
  ConstantModel model(1000, 8);
  PolicyCosts c = hand_costs();
  c.restart.checkpoint_after_restart = true;
  ReplayOptions o = window(12000);
  o.startup_ms = 5000;
  expect_breakdown(
      replay(nodes_then(6, ""), PolicyKind::kRestart, c, model, o),
      {.useful_ms = 4000, .checkpoint_ms = 500, .restart_ms = 2500, .stalled_ms = 5000});
  // Our own default charges the whole restart: start-up [5, 8), steps [8, 10), checkpoint
  // [10, 10.5), 1.5 steps.
  c.restart.checkpoint_after_restart = false;
  expect_breakdown(
      replay(nodes_then(6, ""), PolicyKind::kRestart, c, model, o),
      {.useful_ms = 3500, .checkpoint_ms = 500, .restart_ms = 3000, .stalled_ms = 5000});
}

TEST(ArtifactSwitches, StalledRendezvous) {
  // 4 nodes needed, 2 at first. node3 joins at 1 s: a rendezvous [1, 3) although 3 nodes are too
  // few; node4 joins at 2 s, inside it, without extending it; 7 steps from 3 s.
  ConstantModel model(1000, 8, 4);
  PolicyCosts c = hand_costs();
  c.breakwater.stalled_rendezvous = true;
  const auto t = nodes_then(2, "1000,add,node3\n2000,add,node4\n");
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10000)),
                   {.useful_ms = 7000, .reconfigure_ms = 2000, .stalled_ms = 1000});
  // A rendezvous that ends with too few nodes stalls again: [1, 3) for node3, node4 at 5 s
  // starts another [5, 7), then 3 steps.
  const auto late = nodes_then(2, "1000,add,node3\n5000,add,node4\n");
  expect_breakdown(replay(late, PolicyKind::kBreakwater, c, model, window(10000)),
                   {.useful_ms = 3000, .reconfigure_ms = 4000, .stalled_ms = 3000});
  // Off: stalled until node4 makes 4 nodes, then the 2 s reconfiguration.
  c.breakwater.stalled_rendezvous = false;
  expect_breakdown(replay(t, PolicyKind::kBreakwater, c, model, window(10000)),
                   {.useful_ms = 6000, .reconfigure_ms = 2000, .stalled_ms = 2000});
}

TEST(ArtifactSwitches, BambooRebalancesForAWholePipeline) {
  // Redundant steps of 2 s (half useful); pipelines of 4 nodes. One join at 3 s cannot form a
  // second pipeline: it waits, 5 steps to 10 s. Four joins can: the step ends at 4 s, the
  // rebalance [4, 5.5), 2.25 steps to 10 s (as every join does with the switch off).
  ConstantModel model(1000, 8);
  PolicyCosts c = hand_costs();
  c.redundant.join_rebalance_pipeline_nodes = 4;
  const auto one = nodes_then(4, "3000,add,node5\n");
  expect_breakdown(replay(one, PolicyKind::kRedundant, c, model, window(10000)),
                   {.useful_ms = 5000, .redundant_ms = 5000});
  const TimeBreakdown rebalanced{.useful_ms = 4250, .redundant_ms = 4250, .rebalance_ms = 1500};
  const auto four =
      nodes_then(4, "3000,add,node5\n3000,add,node6\n3000,add,node7\n3000,add,node8\n");
  expect_breakdown(replay(four, PolicyKind::kRedundant, c, model, window(10000)), rebalanced);
  c.redundant.join_rebalance_pipeline_nodes = 0;
  expect_breakdown(replay(one, PolicyKind::kRedundant, c, model, window(10000)), rebalanced);
}

}  // namespace
}  // namespace bw::forecast
