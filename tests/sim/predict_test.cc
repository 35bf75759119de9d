#include "sim/predict.h"

#include <gtest/gtest.h>

namespace bw::sim {
namespace {

std::vector<LayerCost> uniform_layers(int n, double act = 1e9, double params = 1e9) {
  std::vector<LayerCost> layers(n);
  for (auto& l : layers) {
    l.forward_ms = 1;
    l.backward_ms = 2;
    l.activation_bytes = act;
    l.output_bytes = 1e6;
    l.param_bytes = params;
  }
  return layers;
}

TEST(Predict, MatchesTheClosedFormsOnUniformLayers) {
  const auto layers = uniform_layers(16);
  // 4 devices, 4 layers a stage: F = 4 ms, B = 8 ms per stage.
  const auto p = predict({.kind = "1f1b", .devices = 4, .microbatches = 8}, layers);
  EXPECT_NEAR(p.iteration_ms, (8 + 3) * 12, 1e-9);
  EXPECT_NEAR(p.bubble_ratio, 3.0 / 11, 1e-12);
  EXPECT_DOUBLE_EQ(p.peak_activation_bytes[0], 4 * 4e9);  // P microbatches of 4 layers
  EXPECT_DOUBLE_EQ(p.param_bytes[0], 4e9);
  EXPECT_NEAR(
      predict_iteration_ms({.kind = "interleaved", .devices = 4, .microbatches = 8}, layers),
      (2 * 8 + 3) * 6, 1e-9);
}

TEST(Predict, ChimeraHoldsTwoStagesOfParameters) {
  const auto p = predict({.kind = "chimera", .devices = 4, .microbatches = 4}, uniform_layers(8));
  for (double b : p.param_bytes) EXPECT_DOUBLE_EQ(b, 2 * 2e9);
}

TEST(Predict, FastestFittingPicksTheQuickestScheduleWithinMemory) {
  const auto layers = uniform_layers(32, 1e8, 1e8);
  const auto specs = candidate_specs(4, 16);
  EXPECT_GE(specs.size(), 8u);
  auto best = fastest_fitting(specs, layers, {}, 1e12);
  ASSERT_TRUE(best.has_value());
  for (const auto& s : specs)
    EXPECT_LE(best->iteration_ms, predict(s, layers).iteration_ms + 1e-9) << s.kind;
  // Tight memory: GPipe (16 microbatches in flight) no longer fits, 1F1B's 4 do.
  const double gpipe =
      predict({.kind = "gpipe", .devices = 4, .microbatches = 16}, layers).peak_memory_bytes(1);
  const double onef =
      predict({.kind = "1f1b", .devices = 4, .microbatches = 16}, layers).peak_memory_bytes(1);
  ASSERT_LT(onef, gpipe);
  auto tight = fastest_fitting({{.kind = "gpipe", .devices = 4, .microbatches = 16},
                                {.kind = "1f1b", .devices = 4, .microbatches = 16}},
                               layers, {}, onef);
  ASSERT_TRUE(tight.has_value());
  EXPECT_EQ(tight->spec.kind, "1f1b");
  EXPECT_FALSE(fastest_fitting(specs, layers, {}, 1.0).has_value());
}

TEST(Predict, TooFewLayersForTheChunksIsSkippedOrAnError) {
  const auto layers = uniform_layers(6);
  EXPECT_THROW(predict({.kind = "hanayo", .devices = 4, .microbatches = 4, .waves = 1}, layers),
               ConfigError);
  auto best = fastest_fitting(candidate_specs(4, 8), layers, {}, 1e15);
  ASSERT_TRUE(best.has_value());
  EXPECT_NE(best->spec.kind, "hanayo");
}

}  // namespace
}  // namespace bw::sim
