// Sampler: every epoch is a permutation of the windows, samples are the right tokens (checked
// against the raw text), the order depends only on (seed, epoch), and the PRNG matches the
// published splitmix64 reference outputs so the order is the same on every machine.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <torch/torch.h>

#include "core/error.h"

namespace bw::data {
namespace {

std::string make_text(int64_t n, uint32_t salt) {
  std::string s;
  uint64_t state = salt;
  for (int64_t i = 0; i < n; ++i) s.push_back(static_cast<char>(splitmix64(state) & 0xff));
  return s;
}

TEST(Splitmix64, MatchesReferenceOutputs) {
  // Reference sequence for seed 0 from Vigna's splitmix64.c.
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(state), 0x06c45d188009454fULL);
}

TEST(SeededPermutation, IsAPermutationAndDependsOnSeedAndEpoch) {
  for (int64_t n : {1, 2, 3, 10, 257}) {
    for (uint64_t seed : {0ULL, 42ULL, 0xffffffffffffffffULL}) {
      for (int64_t epoch : {0, 1, 5}) {
        auto p = seeded_permutation(n, seed, epoch);
        auto sorted = p;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n " << n << " seed " << seed;
        EXPECT_EQ(p, seeded_permutation(n, seed, epoch));
      }
    }
    if (n >= 10) {
      EXPECT_NE(seeded_permutation(n, 1, 0), seeded_permutation(n, 2, 0)) << n;
      EXPECT_NE(seeded_permutation(n, 1, 0), seeded_permutation(n, 1, 1)) << n;
    }
  }
}

TEST(SeededPermutation, AllOrdersOfThreeAreRoughlyEquallyLikely) {
  std::map<std::vector<int64_t>, int> counts;
  const int trials = 6000;
  for (int s = 0; s < trials; ++s) counts[seeded_permutation(3, static_cast<uint64_t>(s), 0)]++;
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, c] : counts) {
    EXPECT_NEAR(c, trials / 6, 150) << perm[0] << perm[1] << perm[2];  // ~5 standard deviations
  }
}

TEST(Uniform, BelowBoundAndCoversRange) {
  uint64_t state = 7;
  for (uint64_t bound : {1ULL, 2ULL, 3ULL, 1000ULL, (1ULL << 63) + 5}) {
    std::set<uint64_t> seen;
    for (int i = 0; i < 30000; ++i) {  // misses a value of 1000 with prob. ~e^-30
      uint64_t v = uniform_below(state, bound);
      ASSERT_LT(v, bound);
      seen.insert(v);
    }
    if (bound <= 1000) EXPECT_EQ(seen.size(), bound);
  }
}

struct Case {
  int64_t tokens;
  int seq_len;
};

class SamplerGrid : public ::testing::TestWithParam<Case> {};

TEST_P(SamplerGrid, SamplesAreWindowsOfThePermutation) {
  const auto [n, T] = GetParam();
  std::string text = make_text(n, static_cast<uint32_t>(n * 31 + T));
  TokenDataset data = TokenDataset::from_text("grid", text);
  Sampler s(data, T, 99);
  const int64_t S = (n - 1) / T;
  ASSERT_EQ(s.num_samples(), S);
  // Three epochs: each is a permutation of the windows, each sample is window w's tokens.
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> windows;
    for (int64_t i = epoch * S; i < (epoch + 1) * S; ++i) windows.push_back(s.window_of(i));
    EXPECT_EQ(windows, seeded_permutation(S, 99, epoch));
  }
  for (int64_t i : {int64_t{0}, S - 1, S, 2 * S + 1}) {
    auto [x, y] = s.sample(i);
    ASSERT_EQ(x.dtype(), torch::kInt64);
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{T}));
    int64_t start = s.window_of(i) * T;
    ASSERT_LE(start + T, n - 1 + 1);
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(x[t].item<int64_t>(), static_cast<unsigned char>(text[start + t])) << i << "," << t;
      ASSERT_EQ(y[t].item<int64_t>(), static_cast<unsigned char>(text[start + t + 1]))
          << i << "," << t;
    }
  }
}

TEST_P(SamplerGrid, BatchStacksSamples) {
  const auto [n, T] = GetParam();
  TokenDataset data = TokenDataset::from_text("grid", make_text(n, 5));
  Sampler s(data, T, 3);
  for (int64_t first : {int64_t{0}, int64_t{1}, s.num_samples() - 1}) {
    for (int count : {1, 3}) {
      auto [x, y] = s.batch(first, count);
      ASSERT_EQ(x.sizes(), (std::vector<int64_t>{count, T}));
      for (int r = 0; r < count; ++r) {
        auto [xr, yr] = s.sample(first + r);
        EXPECT_TRUE(torch::equal(x[r], xr)) << "row " << r << " of batch at " << first;
        EXPECT_TRUE(torch::equal(y[r], yr)) << "row " << r << " of batch at " << first;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SamplerGrid,
                         ::testing::Values(Case{2, 1}, Case{17, 4}, Case{100, 7}, Case{1000, 16},
                                           Case{4097, 64}),
                         [](const auto& info) {
                           return "tokens" + std::to_string(info.param.tokens) + "_seq" +
                                  std::to_string(info.param.seq_len);
                         });

TEST(Sampler, EveryTokenIsATargetOncePerEpoch) {
  for (int T : {1, 3, 8}) {
    const int64_t n = 10 * T + 1;  // exactly 10 windows
    TokenDataset data = TokenDataset::from_text("cover", make_text(n, 1));
    Sampler s(data, T, 11);
    ASSERT_EQ(s.num_samples(), 10);
    std::vector<int> covered(n, 0);
    for (int64_t i = 0; i < 10; ++i) {
      int64_t start = s.window_of(i) * T;
      for (int t = 1; t <= T; ++t) covered[start + t]++;
    }
    for (int64_t p = 1; p < n; ++p) EXPECT_EQ(covered[p], 1) << "token " << p << " T " << T;
  }
}

TEST(Sampler, IndependentInstancesAndCopiesAgree) {
  TokenDataset data = TokenDataset::from_text("det", make_text(5000, 2));
  Sampler a(data, 16, 1234);
  Sampler b(data, 16, 1234);
  Sampler c = a;
  Sampler other(data, 16, 1235);
  int differing = 0;
  for (int64_t i = 0; i < 3 * a.num_samples(); i += 7) {
    EXPECT_EQ(a.window_of(i), b.window_of(i));
    EXPECT_EQ(a.window_of(i), c.window_of(i));
    differing += a.window_of(i) != other.window_of(i);
  }
  EXPECT_GT(differing, 0);
}

TEST(Sampler, TooShortCorpusIsConfigError) {
  TokenDataset data = TokenDataset::from_text("tiny.txt", "abcdefghij");  // 10 tokens
  try {
    Sampler s(data, 16, 1);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tiny.txt"), std::string::npos) << m;
    EXPECT_NE(m.find("10 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("17"), std::string::npos) << m;
  }
  Sampler s(data, 3, 1);  // 3 samples
  EXPECT_NO_THROW(s.require_global_batch(3));
  try {
    s.require_global_batch(4);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tiny.txt"), std::string::npos) << m;
    EXPECT_NE(m.find("3 samples"), std::string::npos) << m;
    EXPECT_NE(m.find("4"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace bw::data
