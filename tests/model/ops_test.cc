// The Llama block's single-node operations (model/ops.h) against autograd of the composites they
// replace, written as Hugging Face writes them: RoPE bit for bit forward and backward; RMSNorm
// bit for bit forward and within a few ulps of float64 backward; SwiGLU within a few ulps of
// float64 (fp32) and equal to the composite but for rare one-ulp ties (bf16). Inputs are
// non-contiguous where the block's are (views of one matmul's output) and include large
// activations (|gate| up to 100).
#include "model/ops.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace bw::model {
namespace {

// Hugging Face's forms: LlamaRMSNorm.forward, apply_rotary_pos_emb, LlamaMLP's act * up.
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto h = x.to(torch::kFloat);
  h = h * at::rsqrt(h.pow(2).mean({-1}, true) + eps);
  return w * h.to(x.scalar_type());
}
torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

// Largest |got - want| over the largest |want|; prints where the worst one is.
double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  auto diff = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs();
  return diff.max().item<double>() / want.to(torch::kDouble).abs().max().item<double>();
}

void expect_bitwise(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  auto bad = got.ne(want).reshape({-1}).nonzero().reshape({-1});
  EXPECT_EQ(bad.numel(), 0) << what << ": " << bad.numel() << " of " << got.numel()
                            << " differ, first at flat index "
                            << (bad.numel() ? bad[0].item<int64_t>() : -1) << ": "
                            << (bad.numel() ? got.reshape({-1})[bad[0]].item<double>() : 0)
                            << " vs "
                            << (bad.numel() ? want.reshape({-1})[bad[0]].item<double>() : 0);
}

GptConfig llama(int d, int heads) {
  GptConfig c;
  c.family = Family::kLlama;
  c.d_model = d;
  c.n_heads = heads;
  c.rope_theta = 10000.0;
  return c;
}

class Dtypes : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(Dtypes, RopeEqualsHuggingFacesFormBitForBitBothWays) {
  const auto dtype = GetParam();
  for (auto [b, heads, t, hd] : {std::array<int64_t, 4>{2, 4, 16, 8}, {3, 2, 37, 64}}) {
    torch::manual_seed(5);
    auto c = llama(static_cast<int>(heads * hd), static_cast<int>(heads));
    auto table = rope_table(c, t + 3);
    auto cos = table.cos.narrow(0, 0, t).to(dtype);
    auto sin_signed = table.sin_signed.narrow(0, 0, t).to(dtype);
    // The sin Hugging Face uses: the signed table with its first half's sign restored.
    auto sin = at::cat({-sin_signed.narrow(1, 0, hd / 2), sin_signed.narrow(1, hd / 2, hd / 2)}, 1);
    // A view of a wider matmul output, as q is in the block: [b, t, heads, hd] inside [b, t, 3
    // heads hd], transposed to [b, heads, t, hd].
    auto wide = torch::randn({b, t, 3 * heads * hd}).mul(3).to(dtype);
    auto x0 = wide.narrow(2, heads * hd, heads * hd).view({b, t, heads, hd}).transpose(1, 2);
    auto x1 = x0.detach().clone().requires_grad_(true);
    auto x2 = x0.detach().clone().requires_grad_(true);
    auto got = apply_rope(x1, cos, sin_signed);
    auto want = rope_reference(x2, cos, sin);
    expect_bitwise(got, want, "forward");
    auto dy = torch::randn(got.sizes()).to(dtype);
    got.backward(dy);
    want.backward(dy);
    expect_bitwise(x1.grad(), x2.grad(), "backward");
  }
}

TEST_P(Dtypes, RmsNormForwardIsBitwiseAndItsBackwardWithinAFewUlps) {
  const auto dtype = GetParam();
  torch::manual_seed(6);
  const int64_t d = 96;
  auto w0 = (1 + 0.1 * torch::randn({d}));
  auto x0 = (torch::randn({3, 17, d}) * 2 + 0.5).to(dtype);
  auto x1 = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
  auto w1 = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
  auto got = rms_norm(x1, w1, 1e-5);
  auto want = rms_norm_reference(x2, w2, 1e-5);
  expect_bitwise(got, want, "forward");
  // The oracle of the gradients: autograd of the same function in float64.
  auto x3 = x0.to(torch::kDouble).requires_grad_(true);
  auto w3 = w0.to(torch::kDouble).requires_grad_(true);
  auto exact = rms_norm_reference(x3, w3, 1e-5);
  auto dy = torch::randn(got.sizes());
  got.backward(dy);
  want.backward(dy);
  exact.backward(dy.to(torch::kDouble));
  // fp32: a few ulps of the largest gradient; bf16: the input gradient is rounded to bf16 once
  // (2^-8), and autograd of the composite rounds it twice.
  const double tol = dtype == torch::kFloat ? 1e-6 : 1.0 / 128;
  EXPECT_LE(relative_error(x1.grad(), x3.grad()), tol) << "input gradient";
  EXPECT_LE(relative_error(w1.grad(), w3.grad()), dtype == torch::kFloat ? 1e-6 : 1.0 / 128)
      << "weight gradient";
  // And no worse than autograd of the composite in the same dtype, with room for rounding.
  EXPECT_LE(relative_error(x1.grad(), x3.grad()),
            2 * relative_error(x2.grad(), x3.grad()) + 1e-7);
}

TEST_P(Dtypes, SwigluEqualsSiluTimesUpWithinItsRounding) {
  const auto dtype = GetParam();
  torch::manual_seed(7);
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{3 * 5 * 4099}}) {
    auto g0 = (torch::randn({n}) * 4).to(dtype), u0 = (torch::randn({n}) * 2).to(dtype);
    if (n > 8) {
      // Large activations: silu(g) = 0 or g to float precision, and no NaN or infinity.
      g0[0] = -100.0, g0[1] = 100.0, g0[2] = 0.0, g0[3] = -88.5, g0[4] = 88.5;
    }
    auto dy = torch::randn({n}).to(dtype);
    auto g1 = g0.clone().requires_grad_(true), u1 = u0.clone().requires_grad_(true);
    auto got = swiglu(g1, u1);
    got.backward(dy);
    ASSERT_TRUE(torch::isfinite(got).all().item<bool>());
    ASSERT_TRUE(torch::isfinite(g1.grad()).all().item<bool>());
    // Autograd of Hugging Face's form in the same dtype, and in float64.
    auto g2 = g0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
    auto composite = at::silu(g2) * u2;
    composite.backward(dy);
    auto g3 = g0.to(torch::kDouble).requires_grad_(true);
    auto u3 = u0.to(torch::kDouble).requires_grad_(true);
    auto exact = at::silu(g3) * u3;
    exact.backward(dy.to(torch::kDouble));
    // |a - b| / max(|b|, 1e-3 max |b|), elementwise.
    auto elementwise = [](const torch::Tensor& a, const torch::Tensor& b) {
      auto bd = b.to(torch::kDouble);
      auto scale = bd.abs().clamp_min(1e-3 * bd.abs().max().item<double>());
      return ((a.to(torch::kDouble) - bd) / scale).abs().max().item<double>();
    };
    const std::string at = "n " + std::to_string(n);
    if (dtype == torch::kFloat) {
      // A few ulps elementwise from float64 (ATen's own kernels are as far).
      EXPECT_LE(elementwise(got, exact.detach()), 4e-7) << "forward, " << at;
      EXPECT_LE(elementwise(u1.grad(), u3.grad()), 4e-7) << "up gradient, " << at;
      // silu' crosses zero (at g = -1.28): relative to the largest gate gradient there.
      EXPECT_LE(relative_error(g1.grad(), g3.grad()), 1e-6) << "gate gradient, " << at;
    } else {
      // Every value autograd rounds to bf16 is rounded here too: equal to the composite but
      // where the float value before a rounding lies within exp's error of a tie (rare), and
      // then one bf16 ulp apart. The large activations are left out of the count: silu(-100)
      // is -0 in ATen (exp overflows) and about -6e-37 here (exp clamped).
      const int64_t from = n > 8 ? 8 : 0;
      for (auto [a, b, what] : {std::tuple{got, composite.detach(), "forward"},
                                {u1.grad(), u2.grad(), "up gradient"},
                                {g1.grad(), g2.grad(), "gate gradient"}}) {
        const double differ =
            a.narrow(0, from, n - from).ne(b.narrow(0, from, n - from)).to(torch::kDouble)
                .mean().item<double>();
        EXPECT_LE(differ, 0.01) << what << ", " << at << ": share of elements that differ";
        EXPECT_LE(elementwise(a, b), 1.0 / 128) << what << ", " << at;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, Dtypes, ::testing::Values(torch::kFloat, torch::kBFloat16),
                         [](const auto& info) {
                           return info.param == torch::kFloat ? "fp32" : "bf16";
                         });

}  // namespace
}  // namespace bw::model
