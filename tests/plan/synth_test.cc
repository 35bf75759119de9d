// Synthetic profiles against the closed forms they are built from.
#include "plan/synth.h"

#include <gtest/gtest.h>

#include <cmath>

namespace bw::plan {
namespace {

TEST(Synth, Gpt3ParameterCountsMatchThePaper) {
  // Brown et al. 2020, table 2.1: parameter counts of the GPT-3 family (fp32 bytes / 4). The
  // head's weights are tied to the embedding there, so they are counted once.
  struct Want {
    const char* name;
    double params;
  };
  for (Want w : {Want{"gpt3-175b", 175.0e9}, Want{"gpt3-6.7b", 6.7e9}, Want{"gpt3-2.7b", 2.7e9},
                 Want{"gpt3-medium", 350e6}}) {
    Profile p = synthesize_profile(find_model(w.name), find_device("a100"), 1);
    double params = 0;
    for (const auto& l : p.layers)
      if (l.name != "head") params += l.param_bytes / 4;
    EXPECT_NEAR(params / w.params, 1.0, 0.05) << w.name << ": " << params;
  }
}

TEST(Synth, TimesFollowFlopsAndDeviceRate) {
  ModelSpec m = find_model("gpt3-2.7b");
  for (int b : {1, 4}) {
    Profile a = synthesize_profile(m, find_device("a100"), b);
    Profile h = synthesize_profile(m, find_device("h100"), b);
    ASSERT_EQ(a.num_layers(), m.n_blocks + 2);
    const auto& blk = a.layers[1];
    // A third of PaLM's 6 N + 12 L H Q T per token: Narayanan et al.'s 24bsh^2 + 4bs^2h and
    // 2 FLOPs per token for each of the block's 13h norm and bias parameters.
    const double s = double(m.seq_len), d = double(m.d_model);
    double flops = 24.0 * b * s * d * d + 26.0 * b * s * d + 4.0 * b * s * s * d;
    EXPECT_NEAR(blk.forward_ms, flops / (312e12 * 0.5) * 1e3, 1e-9 * blk.forward_ms);
    EXPECT_DOUBLE_EQ(blk.backward_ms, 2 * blk.forward_ms);
    EXPECT_NEAR(a.layers[1].forward_ms / h.layers[1].forward_ms, (989 * 0.45) / (312 * 0.5), 1e-9);
    // Korthikanti et al.: s*b*h*(34 + 5*a*s/h) bytes.
    EXPECT_NEAR(blk.activation_bytes, s * b * d * (34 + 5.0 * double(m.n_heads) * s / d), 1);
    EXPECT_DOUBLE_EQ(blk.output_bytes, 2.0 * b * s * d);
  }
}

TEST(Synth, UnknownNamesListTheKnownOnes) {
  try {
    find_model("gpt5");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt3-175b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_device("tpu"), ConfigError);
}

}  // namespace
}  // namespace bw::plan
