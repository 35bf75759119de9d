// The forecast on the real planner: small clusters where every failure set can be tried.
#include "forecast/planned.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "forecast/replay.h"

namespace bw::forecast {
namespace {

// 8 equal layers of 1e8 parameter bytes; 1 GB devices, 2 per node: one node cannot hold the
// model's 4 bytes of state per parameter byte, two can (n0 = 2). Compute dominates the
// gradient all-reduce, as in real models.
PlannerSetup small_setup(int nodes, int f) {
  PlannerSetup s;
  s.profile.model = "test8";
  for (int i = 0; i < 8; ++i) {
    plan::LayerProfile l;
    l.name = fmt::format("layer{}", i);
    l.forward_ms = 20;
    l.backward_ms = 40;
    l.activation_bytes = 1e6;
    l.output_bytes = 1e6;
    l.param_bytes = 1e8;
    s.profile.layers.push_back(l);
  }
  s.cluster.num_nodes = nodes;
  s.cluster.devices_per_node = 2;
  s.cluster.device_memory_gb = 1;
  s.cluster.inter_node_gbps = 100;
  s.fault_tolerance = f;
  s.microbatches = 16;
  return s;
}

Trace cluster_trace(int nodes, const std::vector<int>& failed, double at_ms) {
  std::string text;
  for (int n = 0; n < nodes; ++n) text += fmt::format("0,add,n{}\n", n);
  for (int n : failed) text += fmt::format("{:.0f},remove,n{}\n", at_ms, n);
  return parse_trace(text, "planned");
}

TEST(PlannerModel, TemplatesNeverSlowerThanIdenticalPipelines) {
  PlannerModel m(small_setup(8, 1));
  ASSERT_EQ(m.templates().min_nodes(), 2);
  EXPECT_FALSE(m.step_ms(1, Arrangement::kTemplates));
  for (int n = 2; n <= 8; ++n) {
    const auto t = m.step_ms(n, Arrangement::kTemplates);
    const auto u = m.step_ms(n, Arrangement::kUniform);
    ASSERT_TRUE(t && u) << n;
    EXPECT_LE(*t, *u * (1 + 1e-12)) << "n=" << n;
  }
}

TEST(PlannerModel, CopyTimeCountsEachLayerOncePerNodeLink) {
  PlannerModel m(small_setup(4, 1));
  const auto& c = m.setup().cluster;
  // Layer 0 to both devices of node 1 from node 0; layer 1 to node 1 from node 2.
  std::vector<plan::LayerCopy> copies = {
      {LayerId(0), {NodeId(1), 0}, {NodeId(0), 0}},
      {LayerId(0), {NodeId(1), 1}, {NodeId(0), 1}},
      {LayerId(1), {NodeId(1), 0}, {NodeId(2), 0}},
  };
  // Node 1 receives two layers (0.3 GB each, weights + two moments) over its link and fans
  // three copies out over the intra-node link.
  const double want = c.transfer_ms(6e8, false) + c.transfer_ms(9e8, true);
  EXPECT_NEAR(m.copy_ms(copies), want, 1e-9 * want);
  EXPECT_DOUBLE_EQ(m.copy_bytes(copies), 9e8);
  EXPECT_DOUBLE_EQ(m.copy_ms({}), 0.0);
}

TEST(PlannedBreakwater, NoFailuresRunsThePlanAllAlong) {
  PlannerModel m(small_setup(6, 1));
  PlannedBreakwaterPolicy policy(PolicyCosts{}, m);
  ReplayOptions o;
  o.duration_ms = 60e3;
  const auto r = replay(cluster_trace(6, {}, 0), policy, m, o);
  const double step = *m.step_ms(6, Arrangement::kTemplates);
  EXPECT_NEAR(r.steps, o.duration_ms / step, 1e-9 * r.steps);
  EXPECT_NEAR(r.useful_fraction(), 1.0, 1e-12);
}

TEST(PlannedBreakwater, OneFailureCostsDetectionCopiesRegroup) {
  const auto setup = small_setup(6, 1);
  PlannerModel m(setup);
  PolicyCosts costs;
  costs.breakwater.replan_horizon_ms = 0;  // purely incremental, as Oobleck
  for (int failed = 0; failed < 6; ++failed) {
    PlannedBreakwaterPolicy policy(costs, m);
    ReplayOptions o;
    o.duration_ms = 60e3;
    const auto r = replay(cluster_trace(6, {failed}, 1000), policy, m, o);
    // The same reconfiguration done directly on the planner.
    const auto before = *m.plan_for(6);
    const auto next = plan::reconfigure(before, m.templates(), {NodeId(failed)}, setup.cluster);
    const double want =
        costs.breakwater.detection_ms + m.copy_ms(next.copies) + costs.breakwater.regroup_ms;
    EXPECT_NEAR(r.time.reconfigure_ms, want, 1e-6) << "failed node " << failed;
    EXPECT_EQ(r.reconfigurations, 1);
    EXPECT_EQ(r.restarts, 0);
    // After the failure the timeline runs at the new plan's rate.
    EXPECT_NEAR(r.timeline.back().samples_per_s, m.samples_per_step() / next.plan.step_ms * 1e3,
                1e-9);
  }
}

TEST(PlannedBreakwater, ReplansWhenAFreshPlanDoesMoreStepsOverTheHorizon) {
  // Two failures in different pipelines. With an unbounded horizon any faster fresh plan wins,
  // so the rate after them is at least that of a fresh plan for the 4 survivors and of the
  // incremental plan; with horizon 0 it is the incremental plan's.
  const auto setup = small_setup(6, 1);
  PlannerModel m(setup);
  const auto trace = cluster_trace(6, {}, 0);
  const std::string text = format_trace(trace) + "10000,remove,n0\n30000,remove,n3\n";
  ReplayOptions o;
  o.duration_ms = 100e3;
  PolicyCosts incremental;
  incremental.breakwater.replan_horizon_ms = 0;
  PolicyCosts replanning;
  replanning.breakwater.replan_horizon_ms = 1e12;
  PlannedBreakwaterPolicy a(incremental, m), b(replanning, m);
  const auto ra = replay(parse_trace(text, "replan"), a, m, o);
  const auto rb = replay(parse_trace(text, "replan"), b, m, o);
  const double fresh_rate = m.samples_per_step() * 1e3 / *m.step_ms(4, Arrangement::kTemplates);
  const double rate_a = ra.timeline.back().samples_per_s, rate_b = rb.timeline.back().samples_per_s;
  EXPECT_GE(rate_b, fresh_rate * (1 - 1e-12));
  EXPECT_GE(rate_b, rate_a * (1 - 1e-12));
  EXPECT_EQ(ra.reconfigurations, 2);
  EXPECT_EQ(rb.reconfigurations, 2);
}

TEST(PlannedBreakwater, ReturningNodesWaitUntilTheyCanFormAPipeline) {
  // 6 nodes, smallest pipeline 2 nodes: after two failures, the first node back is a spare (no
  // reconfiguration, throughput unchanged), the second makes a pipeline with it.
  PlannerModel m(small_setup(6, 1));
  ASSERT_EQ(PlannedBreakwaterPolicy::smallest_pipeline(*m.plan_for(6)), 2);
  const auto trace = cluster_trace(6, {}, 0);
  std::string text = format_trace(trace);
  text += "10000,remove,n0\n10000,remove,n1\n20000,add,n0\n30000,add,n1\n";
  PolicyCosts costs;
  costs.breakwater.replan_horizon_ms = 0;
  PlannedBreakwaterPolicy policy(costs, m);
  ReplayOptions o;
  o.duration_ms = 60e3;
  const auto r = replay(parse_trace(text, "spares"), policy, m, o);
  EXPECT_EQ(r.joins, 2);
  EXPECT_EQ(r.reconfigurations, 2);  // the failures (one change) and the second join
  double rate_at_25s = -1, rate_at_50s = -1;
  for (const auto& seg : r.timeline) {
    if (seg.start_ms <= 25e3 && 25e3 < seg.end_ms) rate_at_25s = seg.samples_per_s;
    if (seg.start_ms <= 50e3 && 50e3 < seg.end_ms) rate_at_50s = seg.samples_per_s;
  }
  const double rate = m.samples_per_step() * 1e3;
  EXPECT_NEAR(rate_at_25s, rate / *m.step_ms(4, Arrangement::kTemplates), 1e-6 * rate_at_25s);
  EXPECT_GT(rate_at_50s, rate_at_25s);
}

class FailureSets : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FailureSets, UpToFFailuresNeverRestart) {
  const auto [nodes, f] = GetParam();
  PlannerModel m(small_setup(nodes, f));
  const auto plan = m.plan_for(nodes);
  ASSERT_TRUE(plan);
  ASSERT_GE(static_cast<int>(plan->pipelines.size()), f + 1);
  // Every failure set of size <= f, at staggered times: reconfiguration, never a restart.
  for (unsigned mask = 1; mask < (1u << nodes); ++mask) {
    std::vector<int> failed;
    for (int n = 0; n < nodes; ++n) {
      if (mask & (1u << n)) failed.push_back(n);
    }
    if (static_cast<int>(failed.size()) > f) continue;
    std::string text;
    for (int n = 0; n < nodes; ++n) text += fmt::format("0,add,n{}\n", n);
    for (std::size_t i = 0; i < failed.size(); ++i) {
      text += fmt::format("{},remove,n{}\n", 1000 + 5000 * i, failed[i]);
    }
    PlannedBreakwaterPolicy policy(PolicyCosts{}, m);
    ReplayOptions o;
    o.duration_ms = 60e3;
    const auto r = replay(parse_trace(text, "sets"), policy, m, o);
    EXPECT_EQ(policy.fatal_restarts(), 0) << "mask " << mask;
    EXPECT_EQ(r.restarts, 0) << "mask " << mask;
    EXPECT_EQ(r.time.stalled_ms, 0) << "mask " << mask;
  }
}

INSTANTIATE_TEST_SUITE_P(Small, FailureSets,
                         ::testing::Values(std::make_tuple(4, 1), std::make_tuple(6, 1),
                                           std::make_tuple(6, 2), std::make_tuple(8, 2)));

TEST(PlannedBreakwater, LosingTheLastReplicaRestartsThenStalls) {
  // 4 nodes, n0 = 2: two pipelines of 2. Losing one node of each leaves no replica of some
  // layer (or too few nodes): a restart on a fresh plan of the 2 survivors.
  PlannerModel m(small_setup(4, 1));
  const auto plan = *m.plan_for(4);
  ASSERT_EQ(plan.pipelines.size(), 2u);
  const int a = plan.pipelines[0].nodes[0].value();
  const int b = plan.pipelines[1].nodes[0].value();
  std::string text;
  for (int n = 0; n < 4; ++n) text += fmt::format("0,add,n{}\n", n);
  text += fmt::format("1000,remove,n{}\n5000,remove,n{}\n", a, b);
  PlannedBreakwaterPolicy policy(PolicyCosts{}, m);
  ReplayOptions o;
  o.duration_ms = 200e3;
  const auto r = replay(parse_trace(text, "last"), policy, m, o);
  EXPECT_EQ(policy.fatal_restarts(), 1);
  EXPECT_EQ(r.restarts, 1);
  EXPECT_NEAR(r.time.restart_ms, PolicyCosts{}.restart.restart_ms, 1e-6);
  EXPECT_GT(r.time.useful_ms, 0);
  EXPECT_NEAR(r.time.total_ms(), o.duration_ms, 1e-6);
}

}  // namespace
}  // namespace bw::forecast
