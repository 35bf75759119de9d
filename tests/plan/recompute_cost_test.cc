// Activation recomputation (CostOptions::recompute, the runtime's pipeline.recompute): the cost
// model's time and memory of hand-made stages against the formulas of docs/planning.md written
// out here per layer, without CostModel; the simulator-based evaluator uses the same per-layer
// terms; and GPT-3 175B, which does not fit 64 nodes x 8 x 80 GB with f = 2 without it, gets a
// plan whose every stage fits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan/schedule_aware.h"
#include "plan/synth.h"
#include "plan/templates.h"
#include "schedule/generate.h"
#include "sim/predict.h"
#include "test_util.h"

namespace bw::plan {
namespace {

// hand_profile (test_util.h) with a small first layer (its activations are its input, the token
// ids) and a large third; layer l's input is layer l-1's output.
Profile hand_profile(int microbatch_size) {
  return plan::hand_profile(microbatch_size, {1e7, 2e8, 5e8, 4e8});
}

struct Expected {
  double stage_ms, memory;
};

// Stage [first, end) on d devices, recomputing, with `in_flight` microbatches and `send_ms`.
Expected expect_stage(const Profile& p, const Cluster& c, int first, int end, int d, int in_flight,
                      double send_ms) {
  const int b = p.microbatch_size;
  const double share = d == 1 ? 1.0 : std::ceil(static_cast<double>(b) / d) / b;
  double ms = send_ms, params = 0, inputs = 0, largest_param = 0, largest_act = 0;
  for (int l = first; l < end; ++l) {
    const auto& x = p.layers[l];
    ms += (2 * x.forward_ms + x.backward_ms) * share;                  // the forward runs twice
    if (d > 1) ms += 4 * (d - 1) * ring_step_ms(x.param_bytes, d, c);  // 2 gathers + 1 reduce
    params += x.param_bytes;
    inputs += l == 0 ? x.activation_bytes : p.layers[l - 1].output_bytes;
    largest_param = std::max(largest_param, x.param_bytes);
    largest_act = std::max(largest_act, x.activation_bytes);
  }
  const double memory = 4 * params / d + (d > 1 ? 2 * largest_param : 0) + largest_act * share +
                        in_flight * inputs * share;
  return {ms, memory};
}

TEST(RecomputeCost, StageTimeAndMemoryAreTheClosedForm) {
  const Cluster cl = hand_cluster();
  const double lat = cl.latency_us * 1e-3, bw = cl.intra_node_gbps / 8 * 1e6;
  int checked = 0;
  for (int b : {4, 5})
    for (int d0 : {1, 2, 3})
      for (int m : {1, 2, 8}) {
        const Profile p = hand_profile(b);
        CostOptions o;
        o.microbatches = m;
        o.recompute = true;
        const CostModel model(p, cl, o);
        const PipelineCost got = model.evaluate({{0, 3, d0}, {3, 1, 4 - d0}}, 1);
        const double send = 2 * (lat + p.layers[2].output_bytes / bw);
        const Expected s0 = expect_stage(p, cl, 0, 3, d0, std::min(m, 2), send);
        const Expected s1 = expect_stage(p, cl, 3, 4, 4 - d0, 1, 0);
        EXPECT_NEAR(got.stage_ms[0], s0.stage_ms, 1e-9 * s0.stage_ms) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_ms[1], s1.stage_ms, 1e-9 * s1.stage_ms) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_memory[0], s0.memory, 1e-3) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_memory[1], s1.memory, 1e-3) << b << " " << d0 << " " << m;
        ++checked;
      }
  EXPECT_EQ(checked, 18);
  // One figure by hand: b = 4, layers 0-2 on 2 devices (2 of 4 samples each), m = 8 (2 in
  // flight). Compute (2*2+4 + 2*3+6 + 2*4+8) * 1/2 = 18; collectives per layer 4 * (0.01 + P/2e8):
  // 6.04 + 12.04 + 3.04; send 2 * (0.01 + 0.2) = 0.42. Memory 4 * 10.5e8 / 2 = 21e8, gathered
  // 2 * 6e8 = 12e8, one layer recomputed 5e8 / 2 = 2.5e8, inputs (1e7 + 5e6 + 1e7) / 2 * 2 in
  // flight = 2.5e7.
  const Profile p = hand_profile(4);
  CostOptions o;
  o.microbatches = 8;
  o.recompute = true;
  const PipelineCost got = CostModel(p, cl, o).evaluate({{0, 3, 2}, {3, 1, 2}}, 1);
  EXPECT_NEAR(got.stage_ms[0], 18 + 6.04 + 12.04 + 3.04 + 0.42, 1e-9);
  EXPECT_NEAR(got.stage_memory[0], 21e8 + 12e8 + 2.5e8 + 2.5e7, 1e-3);
  // Without recomputation the same stage keeps 2 microbatches of (1e7 + 2e8 + 5e8) / 2.
  o.recompute = false;
  const PipelineCost plain = CostModel(p, cl, o).evaluate({{0, 3, 2}, {3, 1, 2}}, 1);
  EXPECT_NEAR(plain.stage_memory[0], 21e8 + 12e8 + 7.1e8, 1e-3);
  EXPECT_NEAR(plain.stage_ms[0], got.stage_ms[0] - 9 * 0.5, 1e-9);
}

// The schedule-aware evaluator, recomputing: the simulator on per-layer costs whose backward
// carries the forward again and whose in-flight activations are the layers' inputs; memory adds
// one layer's activations.
TEST(RecomputeCost, EvaluatorUsesTheSameTermsAsTheClosedForm) {
  const Cluster cl = hand_cluster();
  for (int d0 : {1, 2, 3}) {
    const Profile p = hand_profile(4);
    CostOptions o;
    o.microbatches = 6;
    o.recompute = true;
    const CostModel model(p, cl, o);
    const Template t = make_template(model, {{0, 3, d0}, {3, 1, 4 - d0}}, 1);
    auto e = simulator_evaluator(p, cl, 4, true)(t, "1f1b");
    ASSERT_TRUE(e.has_value());
    std::vector<sim::LayerCost> layers;
    for (int l = 0; l < 4; ++l) {
      const int d = l < 3 ? d0 : 4 - d0;
      const double share = d == 1 ? 1.0 : std::ceil(4.0 / d) / 4;
      const auto& x = p.layers[l];
      const double step = d > 1 ? (d - 1) * ring_step_ms(x.param_bytes, d, cl) : 0;
      sim::LayerCost c;
      c.forward_ms = x.forward_ms * share + step;
      c.backward_ms = (x.forward_ms + x.backward_ms) * share + 3 * step;
      c.activation_bytes = (l == 0 ? x.activation_bytes : p.layers[l - 1].output_bytes) * share;
      c.output_bytes = x.output_bytes;
      c.param_bytes = x.param_bytes / d;
      layers.push_back(c);
    }
    const sim::LinkModel link{cl.latency_us * 1e-3, cl.intra_node_gbps};
    schedule::ScheduleSpec spec{.kind = "1f1b", .devices = 2, .microbatches = 6};
    const double t6 =
        sim::predict(spec, sim::layer_costs(layers, {0, 3, 4}, {}, link)).iteration_ms;
    EXPECT_NEAR(e->fixed_ms + e->per_microbatch_ms * 6, t6, 1e-9 * t6) << d0;
    ASSERT_EQ(e->stage_memory_bytes.size(), 2u);
    const Expected s0 = expect_stage(p, cl, 0, 3, d0, 2, 0);
    const Expected s1 = expect_stage(p, cl, 3, 4, 4 - d0, 1, 0);
    EXPECT_NEAR(e->stage_memory_bytes[0], s0.memory, 1e-3) << d0;
    EXPECT_NEAR(e->stage_memory_bytes[1], s1.memory, 1e-3) << d0;
  }
}

// GPT-3 175B, 8-sample microbatches, 64 nodes x 8 x 80 GB, f = 2, 512 microbatches: no plan
// without recomputation (Planner.ActivationsInFlightNameTheLayersThatFit), and the error names
// it as a fix; with it, a plan of at least f + 1 pipelines on all 64 nodes, sharded stages among
// them, every stage within 80 GB by the closed form re-evaluated here.
TEST(RecomputeCost, Gpt3_175BFitsSixtyFourNodesOfEight) {
  const Profile p = synthesize_profile(find_model("gpt3-175b"), find_device("a100"), 8);
  const Cluster c = small_cluster(64, 8, 80);
  const std::string msg = error_of([&] { make_plan(p, c, 2, 512); });
  EXPECT_NE(msg.find("--recompute"), std::string::npos) << msg;
  PlannerOptions o;
  o.recompute = true;
  const PlanResult r = make_plan(p, c, 2, 512, o);
  ASSERT_GE(r.plan.pipelines.size(), 3u);
  int nodes = 0, sharded = 0;
  for (const auto& pipe : r.plan.pipelines) {
    const Template* t = &pipe.tmpl;
    nodes += t->num_nodes;
    CostOptions co;
    co.microbatches = t->microbatches;
    co.recompute = true;
    const CostModel model(p, c, co);
    std::vector<StageShape> shape;
    for (const auto& s : t->stages) {
      shape.push_back({s.first_layer, s.num_layers, s.num_devices});
      sharded += s.sharded();
    }
    const PipelineCost cost = model.evaluate(shape, t->num_nodes);
    EXPECT_TRUE(cost.fits);
    EXPECT_LE(cost.peak_memory_bytes, 80e9);
  }
  EXPECT_EQ(nodes, 64);
  EXPECT_GT(sharded, 0);
}

}  // namespace
}  // namespace bw::plan
