// Fused attention (at::scaled_dot_product_attention, is_causal) against the written-out causal
// attention it replaced, which lives only here as the reference: softmax(q k^T / sqrt(hd) with
// the upper triangle at -inf) v. In float32 the two agree within 1e-5 relative to the largest
// reference value, forward and backward (the gradients of q, k and v under one random upstream
// gradient), at several sequence lengths and head sizes. Under bf16 autocast the fused kernel
// really runs in bf16 (its output dtype), and the model's layers keep fp32 parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model/gpt.h"
#include "core/error.h"
#include "model/placement.h"

namespace bw::model {
namespace {

torch::Tensor written_out_attention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v) {
  const int64_t t = q.size(-2);
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask = torch::ones({t, t}, torch::kBool).triu(1);
  att = at::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  return at::matmul(att, v);
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
}

// max |a - b| / max |b|, printed with the worst index on failure.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

struct Shape {
  int64_t batch, heads, seq, head_dim;
};

class FusedAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(FusedAttention, MatchesTheWrittenOutAttentionForwardAndBackward) {
  const auto s = GetParam();
  torch::manual_seed(11 + s.seq);
  auto make = [&] {
    return torch::randn({s.batch, s.heads, s.seq, s.head_dim}).requires_grad_(true);
  };
  auto q = make(), k = make(), v = make();
  auto q2 = q.detach().clone().requires_grad_(true), k2 = k.detach().clone().requires_grad_(true),
       v2 = v.detach().clone().requires_grad_(true);
  auto upstream = torch::randn({s.batch, s.heads, s.seq, s.head_dim});
  auto want = written_out_attention(q, k, v);
  auto got = fused_attention(q2, k2, v2);
  EXPECT_LE(relative_error(got, want), 1e-5) << "forward";
  want.backward(upstream);
  got.backward(upstream);
  EXPECT_LE(relative_error(q2.grad(), q.grad()), 1e-5) << "dq";
  EXPECT_LE(relative_error(k2.grad(), k.grad()), 1e-5) << "dk";
  EXPECT_LE(relative_error(v2.grad(), v.grad()), 1e-5) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttention,
                         ::testing::Values(Shape{2, 2, 16, 16}, Shape{2, 4, 64, 32},
                                           Shape{1, 4, 256, 32}, Shape{1, 2, 1024, 64}),
                         [](const auto& info) {
                           return "seq" + std::to_string(info.param.seq) + "_hd" +
                                  std::to_string(info.param.head_dim);
                         });

TEST(FusedAttention, IsCausalAtEveryPosition) {
  // Changing position t's key and value leaves every earlier output row unchanged.
  torch::manual_seed(3);
  auto q = torch::randn({1, 2, 32, 8}), k = torch::randn({1, 2, 32, 8}),
       v = torch::randn({1, 2, 32, 8});
  auto base = fused_attention(q, k, v);
  for (int64_t t : {1, 16, 31}) {
    auto k2 = k.clone(), v2 = v.clone();
    k2.select(2, t).add_(1.0);
    v2.select(2, t).add_(1.0);
    auto changed = fused_attention(q, k2, v2);
    using torch::indexing::Slice;
    EXPECT_TRUE(torch::equal(base.index({Slice(), Slice(), Slice(0, t)}),
                             changed.index({Slice(), Slice(), Slice(0, t)})))
        << "position " << t;
    EXPECT_FALSE(torch::equal(base.index({Slice(), Slice(), t}),
                              changed.index({Slice(), Slice(), t})))
        << "position " << t;
  }
}

TEST(Autocast, Bf16RunsTheBlockInBf16AndKeepsFp32Parameters) {
  auto c = named_config("tiny", 64);
  auto block = build_layer(c, 1, 7);
  auto x = torch::randn({2, c.seq_len, c.d_model});
  torch::Tensor fp32_out, bf16_out;
  {
    AutocastGuard none(Placement::cpu(Precision::kFp32));
    fp32_out = block->forward(x);
  }
  {
    AutocastGuard bf16(Placement::cpu(Precision::kBf16));
    bf16_out = block->forward(x);
    // Inside the guard a matmul of fp32 inputs comes out in bf16.
    EXPECT_EQ(at::matmul(x, x.transpose(-2, -1)).scalar_type(), torch::kBFloat16);
  }
  // Outside it, fp32 again.
  EXPECT_EQ(at::matmul(x, x.transpose(-2, -1)).scalar_type(), torch::kFloat);
  EXPECT_EQ(fp32_out.scalar_type(), torch::kFloat);
  for (const auto& [name, p] : block->parameter_list()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat) << name;
  }
  // bf16 differs from fp32, by about bf16's precision (8 bits of mantissa), not more.
  const double rel = relative_error(bf16_out.to(torch::kFloat), fp32_out);
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 0.05);
}

TEST(Precision, NamesAndBadInput) {
  EXPECT_EQ(parse_precision("fp32"), Precision::kFp32);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_THROW(parse_precision("fp16"), ConfigError);
  EXPECT_EQ(Placement::cpu(Precision::kBf16).activation_element_bytes(), 2);
  EXPECT_EQ(Placement::cpu(Precision::kFp32).activation_element_bytes(), 4);
}

}  // namespace
}  // namespace bw::model
