// GPT layers: determinism per (seed, layer), shapes, parameter counts, causality, and the layered
// model's loss and gradients against a finite-difference oracle.
#include "model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace bw::model {
namespace {

torch::Tensor run_all(std::vector<std::shared_ptr<Layer>>& layers, torch::Tensor x) {
  for (auto& l : layers) x = l->forward(x);
  return x;
}

std::vector<std::shared_ptr<Layer>> build_all(const GptConfig& c, uint64_t seed) {
  std::vector<std::shared_ptr<Layer>> layers;
  for (int i = 0; i < num_layers(c); ++i) layers.push_back(build_layer(c, i, seed));
  return layers;
}

class GptBySize : public ::testing::TestWithParam<std::string> {};

TEST_P(GptBySize, SameSeedAndIndexGiveIdenticalWeights) {
  auto c = named_config(GetParam(), 256);
  for (int i = 0; i < num_layers(c); ++i) {
    auto a = named_parameters(*build_layer(c, i, 7));
    auto b = named_parameters(*build_layer(c, i, 7));
    auto other = named_parameters(*build_layer(c, i, 8));
    ASSERT_EQ(a.size(), b.size());
    int64_t count = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].first, b[k].first);
      EXPECT_TRUE(torch::equal(a[k].second, b[k].second)) << "layer " << i << " " << a[k].first;
      count += a[k].second.numel();
    }
    EXPECT_EQ(count, num_parameters(c, i)) << "layer " << i;
    // A different seed changes at least the random matrices.
    bool any_diff = false;
    for (size_t k = 0; k < a.size(); ++k) any_diff |= !torch::equal(a[k].second, other[k].second);
    EXPECT_TRUE(any_diff) << "layer " << i;
  }
}

TEST_P(GptBySize, ShapesFollowTheLayerTable) {
  auto c = named_config(GetParam(), 256);
  if (c.d_model > 128) GTEST_SKIP() << "large shapes checked by parameter count only";
  auto layers = build_all(c, 1);
  auto tokens = torch::randint(0, c.vocab_size, {3, c.seq_len}, torch::kInt64);
  torch::Tensor x = tokens;
  for (int i = 0; i < num_layers(c); ++i) {
    x = layers[i]->forward(x);
    auto expect = output_shape(c, i, 3);
    EXPECT_EQ(x.sizes().vec(), expect) << "layer " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GptBySize, ::testing::Values("tiny", "small", "tiny:5"));

TEST(Gpt, UnknownNamesAreConfigErrors) {
  EXPECT_THROW(named_config("huge", 256), ConfigError);
  EXPECT_THROW(named_config("tiny:x", 256), ConfigError);
  EXPECT_THROW(named_config("tiny:0", 256), ConfigError);
  EXPECT_THROW(named_config("tiny", 1), ConfigError);
  EXPECT_EQ(named_config("gpt2-124m", 50257).n_blocks, 12);
  EXPECT_EQ(num_layers(named_config("tiny:6", 256)), 8);
}

TEST(Gpt, InitialLossIsNearUniform) {
  auto c = named_config("tiny", 256);
  auto layers = build_all(c, 3);
  auto tokens = torch::randint(0, 256, {4, c.seq_len}, torch::kInt64);
  auto targets = torch::randint(0, 256, {4, c.seq_len}, torch::kInt64);
  const double loss = lm_loss(run_all(layers, tokens), targets).item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

// Changing token t must leave the logits of positions < t unchanged (causal mask).
TEST(Gpt, AttentionIsCausal) {
  auto c = named_config("tiny", 256);
  auto layers = build_all(c, 5);
  auto tokens = torch::randint(0, 256, {2, c.seq_len}, torch::kInt64);
  for (int t : {1, c.seq_len / 2, c.seq_len - 1}) {
    auto changed = tokens.clone();
    changed.index_put_({torch::indexing::Slice(), t},
                       (tokens.index({0, t}).item<int64_t>() + 1) % 256);
    auto a = run_all(layers, tokens), b = run_all(layers, changed);
    using torch::indexing::Slice;
    EXPECT_TRUE(torch::equal(a.index({Slice(), Slice(0, t)}), b.index({Slice(), Slice(0, t)})))
        << "position " << t;
    EXPECT_FALSE(torch::equal(a.index({Slice(), t}), b.index({Slice(), t}))) << "position " << t;
  }
}

// Autograd through the layer chain against central differences in double precision.
TEST(Gpt, GradientsMatchFiniteDifferences) {
  auto c = named_config("tiny", 16);
  auto layers = build_all(c, 11);
  for (auto& l : layers) l->to(torch::kFloat64);
  auto tokens = torch::randint(0, 16, {2, c.seq_len}, torch::kInt64);
  auto targets = torch::randint(0, 16, {2, c.seq_len}, torch::kInt64);
  lm_loss(run_all(layers, tokens), targets).backward();
  int checked = 0, mismatches = 0;
  for (auto& l : layers) {
    for (auto& [name, p] : named_parameters(*l)) {
      auto flat = p.data().view(-1);
      for (int64_t k : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
        const double orig = flat[k].item<double>(), h = 1e-6;
        torch::NoGradGuard ng;
        flat[k] = orig + h;
        const double up = lm_loss(run_all(layers, tokens), targets).item<double>();
        flat[k] = orig - h;
        const double down = lm_loss(run_all(layers, tokens), targets).item<double>();
        flat[k] = orig;
        const double numeric = (up - down) / (2 * h);
        const double analytic = p.grad().view(-1)[k].item<double>();
        ++checked;
        if (std::abs(numeric - analytic) > 1e-6 + 1e-4 * std::abs(numeric) && mismatches++ < 5) {
          ADD_FAILURE() << "layer " << l->index() << " " << name << "[" << k << "]: analytic "
                        << analytic << " numeric " << numeric;
        }
      }
    }
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace bw::model
