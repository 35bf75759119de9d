// Throughput models: the constant and table models by hand, the analytic GPT model against the
// 1F1B closed form and its own memory rule.
#include "forecast/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace bw::forecast {
namespace {

TEST(ConstantModel, FitsFromMinNodes) {
  ConstantModel m(1500, 64, 3, 1e9);
  EXPECT_FALSE(m.step_ms(2, Arrangement::kTemplates));
  EXPECT_DOUBLE_EQ(*m.step_ms(3, Arrangement::kUniform), 1500);
  EXPECT_DOUBLE_EQ(m.samples_per_step(), 64);
  EXPECT_THROW(ConstantModel(0, 1), ConfigError);
}

TEST(TableModel, TakesTheNextLowerEntry) {
  TableModel m({{4, 4000}, {8, 2100}, {16, 1200}}, 32);
  EXPECT_FALSE(m.step_ms(3, Arrangement::kUniform));
  EXPECT_DOUBLE_EQ(*m.step_ms(4, Arrangement::kUniform), 4000);
  EXPECT_DOUBLE_EQ(*m.step_ms(15, Arrangement::kUniform), 2100);
  EXPECT_DOUBLE_EQ(*m.step_ms(100, Arrangement::kUniform), 1200);
  EXPECT_THROW(TableModel({}, 1), ConfigError);
}

TEST(Gpt3Presets, KnownAndUnknown) {
  EXPECT_EQ(gpt3_preset("gpt3-6.7b").d_model, 4096);
  EXPECT_EQ(gpt3_preset("gpt3-175b").n_blocks, 96);
  EXPECT_THROW(gpt3_preset("gpt5"), ConfigError);
}

class AnalyticGrid : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AnalyticGrid, MatchesClosedFormsAndPrefersTemplates) {
  const auto& [name, microbatches] = GetParam();
  AnalyticCluster c;
  c.microbatches = microbatches;
  AnalyticGptModel m(gpt3_preset(name), c);
  const int n0 = m.min_nodes_per_pipeline();
  ASSERT_GE(n0, 1);
  // Memory rule: n0 nodes hold the 16 B/parameter state, n0 - 1 do not.
  const double act =
      double(gpt3_preset(name).n_blocks) * 2.0 * 2048 * double(gpt3_preset(name).d_model);
  const double usable = 0.9 * 80e9 - act;
  EXPECT_LE(16 * m.params() / (n0 * 8.0), usable);
  if (n0 > 1) EXPECT_GT(16 * m.params() / ((n0 - 1) * 8.0), usable);
  EXPECT_FALSE(m.step_ms(n0 - 1, Arrangement::kTemplates));
  // One pipeline of n0 nodes: the 1F1B closed form (B + P - 1) * m / P.
  const double single = m.pipeline_step_ms(n0, microbatches);
  EXPECT_NEAR(*m.step_ms(n0, Arrangement::kUniform), single, 1e-9 * single);
  // Every node count: templates (all nodes used) never slower than identical pipelines, and
  // more nodes never make the templates slower by more than rounding.
  double prev = INFINITY;
  for (int n = n0; n <= 8 * n0 + 7; ++n) {
    const double tmpl = *m.step_ms(n, Arrangement::kTemplates);
    const double uni = *m.step_ms(n, Arrangement::kUniform);
    EXPECT_LE(tmpl, uni * (1 + 1e-9)) << name << " n=" << n;
    EXPECT_LE(tmpl, prev * 1.05) << name << " n=" << n;
    prev = tmpl;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AnalyticGrid,
                         ::testing::Combine(::testing::Values("gpt3-1.3b", "gpt3-6.7b", "gpt3-13b",
                                                              "gpt3-175b"),
                                            ::testing::Values(64, 512)));

}  // namespace
}  // namespace bw::forecast
