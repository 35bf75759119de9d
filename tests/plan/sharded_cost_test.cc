// Sharded stages (FULL_SHARD on d devices of a node): the cost model's time and memory of
// hand-made stages against the formulas of docs/planning.md written out here, per layer, without
// CostModel; the simulator-based evaluator uses the same per-layer costs; and stages wider than
// the microbatch are never costed as runnable.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plan/cost_model.h"
#include "plan/schedule_aware.h"
#include "plan/templates.h"
#include "schedule/generate.h"
#include "sim/predict.h"
#include "test_util.h"

namespace bw::plan {
namespace {

// hand_profile (test_util.h) with activations 1e8..4e8.
Profile hand_profile(int microbatch_size) {
  return plan::hand_profile(microbatch_size, {1e8, 2e8, 3e8, 4e8});
}

struct Expected {
  double stage_ms, memory;
};

// Stage [first, end) on d devices of b-sample microbatches with `in_flight` microbatches kept,
// plus its boundary transfer `send_ms`.
Expected expect_stage(const Profile& p, const Cluster& c, int first, int end, int d, int in_flight,
                      double send_ms) {
  const int b = p.microbatch_size;
  const double share = d == 1 ? 1.0 : std::ceil(static_cast<double>(b) / d) / b;
  double ms = send_ms, params = 0, acts = 0, largest = 0;
  for (int l = first; l < end; ++l) {
    const auto& x = p.layers[l];
    ms += (x.forward_ms + x.backward_ms) * share;
    if (d > 1) ms += 2 * all_gather_ms(x.param_bytes, d, c) + all_reduce_ms(x.param_bytes, d, c);
    params += x.param_bytes;
    acts += x.activation_bytes;
    largest = std::max(largest, x.param_bytes);
  }
  const double memory = 4 * params / d + (d > 1 ? 2 * largest : 0) + in_flight * acts * share;
  return {ms, memory};
}

TEST(ShardedCost, StageTimeAndMemoryAreTheClosedForm) {
  const Cluster cl = hand_cluster();
  const double lat = cl.latency_us * 1e-3, bw = cl.intra_node_gbps / 8 * 1e6;
  int checked = 0;
  // b = 5 on 3 devices: the busiest device computes 2 of 5 samples; b = 4 on 2: 2 of 4.
  for (int b : {4, 5, 6})
    for (int d0 : {1, 2, 3})
      for (int m : {1, 2, 8}) {
        const Profile p = hand_profile(b);
        CostOptions o;
        o.microbatches = m;
        const CostModel model(p, cl, o);
        // Stage 0: layers 0-2 on d0 devices; stage 1: layer 3 on the remaining 4 - d0 (a stage
        // on one node after it: the intra-node link carries the boundary).
        const int d1 = 4 - d0;
        const PipelineCost got = model.evaluate({{0, 3, d0}, {3, 1, d1}}, 1);
        const double send = 2 * (lat + p.layers[2].output_bytes / bw);
        const Expected s0 = expect_stage(p, cl, 0, 3, d0, std::min(m, 2), send);
        const Expected s1 = expect_stage(p, cl, 3, 4, d1, 1, 0);
        EXPECT_NEAR(got.stage_ms[0], s0.stage_ms, 1e-9 * s0.stage_ms) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_ms[1], s1.stage_ms, 1e-9 * s1.stage_ms) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_memory[0], s0.memory, 1e-6) << b << " " << d0 << " " << m;
        EXPECT_NEAR(got.stage_memory[1], s1.memory, 1e-6) << b << " " << d0 << " " << m;
        const double t = s0.stage_ms + s1.stage_ms + (m - 1) * std::max(s0.stage_ms, s1.stage_ms);
        EXPECT_NEAR(got.iteration_ms, t, 1e-9 * t);
        ++checked;
      }
  EXPECT_EQ(checked, 27);
  // One figure by hand: b = 5, layers 0-2 on 3 devices, m = 8 (2 in flight).
  // compute (6 + 9 + 12) * 2/5 = 10.8; per layer 4 * 2 * (0.01 + P/3e8): layer 0 (P = 3e8) 8.08,
  // layer 1 (6e8) 16.08, layer 2 (1.5e8) 4.08; send 2 * (0.01 + 2e7 / 1e8) = 0.42.
  // memory 4 * 10.5e8 / 3 + 2 * 6e8 + 2 * 6e8 * 2/5 = 14e8 + 12e8 + 4.8e8.
  const Profile p = hand_profile(5);
  CostOptions o;
  o.microbatches = 8;
  const PipelineCost got = CostModel(p, cl, o).evaluate({{0, 3, 3}, {3, 1, 1}}, 1);
  EXPECT_NEAR(got.stage_ms[0], 10.8 + 8.08 + 16.08 + 4.08 + 0.42, 1e-9);
  EXPECT_NEAR(got.stage_memory[0], 30.8e8, 1e-3);
}

TEST(ShardedCost, StagesWiderThanTheMicrobatchNeverFit) {
  const Cluster cl = hand_cluster();
  for (int b : {1, 2, 3}) {
    const Profile p = hand_profile(b);
    const CostModel model(p, cl, CostOptions{});
    EXPECT_EQ(model.max_stage_devices(), std::min(4, b));
    for (int d = 1; d <= 4; ++d) {
      // Layers 0-2 on d devices, layer 3 on the rest (when there is a rest).
      std::vector<StageShape> shape{{0, 3, d}};
      if (d < 4) shape.push_back({3, 1, 4 - d});
      if (d == 4) shape = {{0, 4, 4}};
      const bool runnable = d <= b && (d == 4 || 4 - d <= b);
      EXPECT_EQ(model.evaluate(shape, 1).fits, runnable) << "b=" << b << " d=" << d;
    }
  }
  // --max-stage-devices caps the width below b.
  CostOptions o;
  o.max_stage_devices = 2;
  const CostModel capped(hand_profile(4), cl, o);
  EXPECT_EQ(capped.max_stage_devices(), 2);
  EXPECT_FALSE(capped.evaluate({{0, 3, 3}, {3, 1, 1}}, 1).fits);
  EXPECT_TRUE(capped.evaluate({{0, 3, 2}, {3, 1, 2}}, 1).fits);
}

// The schedule-aware evaluator's 1f1b estimate is the simulator on per-layer costs built from the
// formulas above (collectives added to forward and backward), and its memory is the closed form.
TEST(ShardedCost, EvaluatorUsesTheSameTermsAsTheClosedForm) {
  const Cluster cl = hand_cluster();
  int sharded = 0;
  for (int b : {4, 5})
    for (int d0 : {1, 2, 3}) {
      const Profile p = hand_profile(b);
      CostOptions o;
      o.microbatches = 6;
      const CostModel model(p, cl, o);
      const Template t = make_template(model, {{0, 3, d0}, {3, 1, 4 - d0}}, 1);
      sharded += t.stages[0].sharded();
      auto e = simulator_evaluator(p, cl)(t, "1f1b");
      ASSERT_TRUE(e.has_value());
      std::vector<sim::LayerCost> layers;
      for (int l = 0; l < 4; ++l) {
        const int d = l < 3 ? d0 : 4 - d0;
        const double share = d == 1 ? 1.0 : std::ceil(static_cast<double>(b) / d) / b;
        const auto& x = p.layers[l];
        const double gather = d > 1 ? all_gather_ms(x.param_bytes, d, cl) : 0;
        const double reduce = d > 1 ? all_reduce_ms(x.param_bytes, d, cl) : 0;
        sim::LayerCost c;
        c.forward_ms = x.forward_ms * share + gather;
        c.backward_ms = x.backward_ms * share + gather + reduce;
        c.activation_bytes = x.activation_bytes * share;
        c.output_bytes = x.output_bytes;
        c.param_bytes = x.param_bytes / d;
        layers.push_back(c);
      }
      const sim::LinkModel link{cl.latency_us * 1e-3, cl.intra_node_gbps};
      schedule::ScheduleSpec spec{.kind = "1f1b", .devices = 2, .microbatches = 6};
      const double t6 =
          sim::predict(spec, sim::layer_costs(layers, {0, 3, 4}, {}, link)).iteration_ms;
      EXPECT_NEAR(e->fixed_ms + e->per_microbatch_ms * 6, t6, 1e-9 * t6) << b << " " << d0;
      ASSERT_EQ(e->stage_memory_bytes.size(), 2u);
      const Expected s0 = expect_stage(p, cl, 0, 3, d0, 2, 0);
      const Expected s1 = expect_stage(p, cl, 3, 4, 4 - d0, 1, 0);
      EXPECT_NEAR(e->stage_memory_bytes[0], s0.memory, 1e-3) << b << " " << d0;
      EXPECT_NEAR(e->stage_memory_bytes[1], s1.memory, 1e-3) << b << " " << d0;
      EXPECT_NEAR(e->peak_memory_bytes, std::max(s0.memory, s1.memory), 1e-3);
    }
  EXPECT_EQ(sharded, 4);
}

// Hanayo gives each stage several chunks: the gathered-layer term is twice the largest layer of
// all chunks the stage's devices hold, on top of the simulator's activations and 1/d of the
// parameter state, with the same per-layer times as above.
TEST(ShardedCost, MultiChunkStagesCountTheirLargestLayerOverAllChunks) {
  Profile p = random_profile(8, 12, false, 4);
  p.layers[5].param_bytes = 2e9;  // the largest layer, held by one stage only
  const Cluster cl = small_cluster(1, 4, 1000);
  CostOptions o;
  o.microbatches = 8;
  const CostModel model(p, cl, o);
  const Template t = make_template(model, {{0, 4, 2}, {4, 4, 2}}, 1);
  auto e = simulator_evaluator(p, cl)(t, "hanayo-w1");
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->chunks.size(), 4u);
  std::vector<sim::LayerCost> layers;
  for (const auto& x : p.layers) {
    const double gather = all_gather_ms(x.param_bytes, 2, cl);
    sim::LayerCost c;
    c.forward_ms = x.forward_ms * 0.5 + gather;
    c.backward_ms = x.backward_ms * 0.5 + gather + all_reduce_ms(x.param_bytes, 2, cl);
    c.activation_bytes = x.activation_bytes * 0.5;
    c.output_bytes = x.output_bytes;
    c.param_bytes = x.param_bytes / 2;
    layers.push_back(c);
  }
  const sim::LinkModel link{cl.latency_us * 1e-3, cl.intra_node_gbps};
  const schedule::ScheduleSpec spec{.kind = "hanayo", .devices = 2, .microbatches = 8, .waves = 1};
  const sim::Prediction want = sim::predict(spec, layers, link);
  int holds_largest = 0;
  for (int k = 0; k < 2; ++k) {
    double largest = 0;
    for (const auto& c : e->chunks)
      if (c.stage == k)
        for (int l = c.first_layer; l < c.end_layer(); ++l)
          largest = std::max(largest, p.layers[l].param_bytes);
    holds_largest += largest == 2e9;
    const double mem = want.peak_activation_bytes[k] + 4 * want.param_bytes[k] + 2 * largest;
    EXPECT_NEAR(e->stage_memory_bytes[k], mem, 1e-3 * mem) << "stage " << k;
  }
  EXPECT_EQ(holds_largest, 1);
  const double t8 = want.iteration_ms;
  EXPECT_NEAR(e->fixed_ms + e->per_microbatch_ms * 8, t8, 1e-9 * t8);
}

}  // namespace
}  // namespace bw::plan
