#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "schedule/generate.h"

namespace bw::sim {
namespace {

TEST(CostModel, StageCostsSpreadOverAReplicasChunks) {
  const auto h =
      schedule::generate({.kind = "hanayo", .devices = 4, .microbatches = 4, .waves = 2});
  const auto cm = stage_costs(h, {.forward_ms = 8, .backward_ms = 16, .activation_bytes = 4});
  ASSERT_EQ(cm.chunks.size(), 16u);
  EXPECT_DOUBLE_EQ(cm.chunks[0].forward_ms, 2);         // 1/(2W) of a stage
  EXPECT_DOUBLE_EQ(cm.chunks[0].backward_input_ms, 2);  // half of B
  EXPECT_DOUBLE_EQ(cm.chunks[0].activation_bytes, 1);
  // Chimera's replicas each hold the whole model: a chunk is a stage.
  const auto c = schedule::generate({.kind = "chimera", .devices = 4, .microbatches = 4});
  EXPECT_DOUBLE_EQ(stage_costs(c, {.forward_ms = 8}).chunks[5].forward_ms, 8);
}

TEST(CostModel, LayerCostsSumLayersPerStageAndDuplicateForChimera) {
  std::vector<LayerCost> layers(6);
  for (int l = 0; l < 6; ++l) {
    layers[l].forward_ms = l + 1;
    layers[l].backward_ms = 2 * (l + 1);
    layers[l].activation_bytes = 10;
    layers[l].output_bytes = 100 + l;
    layers[l].param_bytes = 1;
  }
  const auto cm = layer_costs(layers, {0, 2, 6}, {0, 1, 0, 1});
  ASSERT_EQ(cm.chunks.size(), 4u);
  EXPECT_DOUBLE_EQ(cm.chunks[0].forward_ms, 3);
  EXPECT_DOUBLE_EQ(cm.chunks[1].forward_ms, 18);
  EXPECT_DOUBLE_EQ(cm.chunks[1].backward_input_ms, 18);
  EXPECT_DOUBLE_EQ(cm.chunks[3].output_bytes, 105);
  EXPECT_DOUBLE_EQ(cm.chunks[2].activation_bytes, 20);
  EXPECT_THROW(layer_costs(layers, {0, 2, 2, 6}, {}), ConfigError);  // empty stage
  EXPECT_THROW(layer_costs(layers, {0, 5}, {}), ConfigError);        // does not cover
}

// Brute force over every partition of a few layers.
double best_bottleneck(const std::vector<LayerCost>& layers, int stages) {
  const int L = static_cast<int>(layers.size());
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int, double)> go = [&](int start, int left, double worst) {
    if (left == 0) {
      if (start == L) best = std::min(best, worst);
      return;
    }
    double sum = 0;
    for (int end = start + 1; end <= L - (left - 1); ++end) {
      sum += layers[end - 1].forward_ms + layers[end - 1].backward_ms;
      go(end, left - 1, std::max(worst, sum));
    }
  };
  go(0, stages, 0);
  return best;
}

TEST(CostModel, BalancedPartitionIsExactAgainstBruteForce) {
  unsigned seed = 7;
  auto next = [&] { return (seed = seed * 1103515245u + 12345u) % 1000 / 100.0 + 0.1; };
  for (int L = 1; L <= 9; ++L)
    for (int S = 1; S <= L; ++S)
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<LayerCost> layers(L);
        for (auto& l : layers) {
          l.forward_ms = next();
          l.backward_ms = next();
        }
        const auto begin = balanced_partition(layers, S);
        ASSERT_EQ(static_cast<int>(begin.size()), S + 1);
        double worst = 0;
        for (int k = 0; k < S; ++k) {
          ASSERT_LT(begin[k], begin[k + 1]);
          double sum = 0;
          for (int l = begin[k]; l < begin[k + 1]; ++l)
            sum += layers[l].forward_ms + layers[l].backward_ms;
          worst = std::max(worst, sum);
        }
        EXPECT_NEAR(worst, best_bottleneck(layers, S), 1e-9) << "L=" << L << " S=" << S;
      }
  EXPECT_THROW(balanced_partition(std::vector<LayerCost>(3), 4), ConfigError);
}

TEST(CostModel, LinkTimes) {
  LinkModel l{.latency_ms = 0.01, .bandwidth_gbps = 100};
  EXPECT_DOUBLE_EQ(l.busy_ms(12.5e6), 1.0);  // 100 Mbit at 100 Gbit/s
  EXPECT_DOUBLE_EQ(l.transfer_ms(12.5e6), 1.01);
  EXPECT_DOUBLE_EQ(LinkModel{}.transfer_ms(1e9), 0);
}

}  // namespace
}  // namespace bw::sim
