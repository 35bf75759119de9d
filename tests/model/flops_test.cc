// Model FLOPs per token (PaLM appendix B: 6 N + 12 L d T) against the parameters of the layers as
// built (N = every parameter of the blocks and the head, counted from the tensors themselves),
// the table of GPU peaks, and the CPU probe.
#include "model/flops.h"

#include <gtest/gtest.h>

namespace bw::model {
namespace {

class FlopsBySize : public ::testing::TestWithParam<std::string> {};

TEST_P(FlopsBySize, SixNPlusTheAttentionTermFromTheBuiltLayers) {
  auto c = named_config(GetParam(), 512);
  double n = 0;
  for (int l = 1; l < num_layers(c); ++l) {  // not the embedding tables (looked up, no matmul)
    const auto layer = build_layer(c, l, 1);  // alive while its list is read
    for (const auto& [name, p] : layer->parameter_list()) n += p.numel();
  }
  const double want = 6 * n + 12.0 * c.n_blocks * c.d_model * c.seq_len;
  EXPECT_DOUBLE_EQ(flops_per_token(c), want);
}

INSTANTIATE_TEST_SUITE_P(Sizes, FlopsBySize, ::testing::Values("tiny", "small", "tiny:5"));

TEST(Flops, Gpt2SmallByHand) {
  // gpt2-124m shapes, vocabulary 50257, untied head: N = 12 (12 d^2 + 13 d) + 2 d + V d.
  auto c = named_config("gpt2-124m", 50257);
  const double d = 768, v = 50257, T = 1024, L = 12;
  const double n = L * (12 * d * d + 13 * d) + 2 * d + v * d;
  EXPECT_DOUBLE_EQ(flops_per_token(c), 6 * n + 12 * L * d * T);
}

TEST(PeakFlops, TableOfKnownGpus) {
  EXPECT_DOUBLE_EQ(peak_from_table("NVIDIA H200", Precision::kBf16).flops_per_s, 989e12);
  EXPECT_DOUBLE_EQ(peak_from_table("NVIDIA H100 80GB HBM3", Precision::kFp32).flops_per_s, 67e12);
  EXPECT_DOUBLE_EQ(peak_from_table("NVIDIA A100-SXM4-80GB", Precision::kBf16).flops_per_s, 312e12);
  EXPECT_NE(peak_from_table("NVIDIA H200", Precision::kBf16).source.find("H200"),
            std::string::npos);
  EXPECT_EQ(peak_from_table("Tesla T4", Precision::kBf16).flops_per_s, 0.0);
}

TEST(PeakFlops, CpuProbeMeasuresAndSaysSo) {
  const auto p = measure_cpu_peak(Precision::kFp32, 1);
  EXPECT_GT(p.flops_per_s, 1e8);  // any CPU of this century
  EXPECT_NE(p.source.find("measured"), std::string::npos) << p.source;
  EXPECT_NE(measure_cpu_peak(Precision::kBf16, 1).source.find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace bw::model
