// Seeded global sample order (see sampler.h).
#include "data/sampler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/check.h"
#include "core/error.h"

namespace bw::data {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  BW_CHECK(bound > 0, "uniform_below(0)");
  // Lemire, "Fast random integer generation in an interval" (2019): unbiased, one multiply.
  unsigned __int128 m = static_cast<unsigned __int128>(splitmix64(state)) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(splitmix64(state)) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  BW_CHECK(n >= 0 && epoch >= 0, "n {} epoch {}", n, epoch);
  // Two rounds of splitmix64 decorrelate neighbouring (seed, epoch) pairs.
  uint64_t state = seed;
  uint64_t a = splitmix64(state);
  state = a ^ static_cast<uint64_t>(epoch);
  splitmix64(state);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

Sampler::Sampler(const TokenDataset& data, int seq_len, uint64_t seed, Order order)
    : data_(data),
      seq_len_(seq_len),
      seed_(seed),
      order_(order),
      num_samples_(0),
      cache_(std::make_shared<Cache>()) {
  if (seq_len < 1) throw ConfigError(fmt::format("seq_len must be >= 1, got {}", seq_len));
  if (data.num_tokens() < seq_len + 1) {
    throw ConfigError(
        fmt::format("data '{}' has {} tokens, fewer than one sample of seq_len + 1 "
                    "= {} tokens; use a longer corpus or a smaller model",
                    data.path(), data.num_tokens(), seq_len + 1));
  }
  num_samples_ = (data.num_tokens() - 1) / seq_len;
}

void Sampler::require_global_batch(int64_t global_batch) const {
  if (global_batch > num_samples_) {
    throw ConfigError(fmt::format(
        "data '{}' has {} tokens = {} samples of seq_len {}, fewer than one global batch of {} "
        "samples (microbatches x microbatch_size); use a longer corpus or a smaller batch",
        data_.path(), data_.num_tokens(), num_samples_, seq_len_, global_batch));
  }
}

std::shared_ptr<const std::vector<int64_t>> Sampler::permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& cache = cache_->by_epoch;
  auto it = cache.find(epoch);
  if (it != cache.end()) return it->second;
  auto perm =
      std::make_shared<const std::vector<int64_t>>(seeded_permutation(num_samples_, seed_, epoch));
  // A step touches at most two epochs; keep a few so concurrent readers rarely recompute.
  while (cache.size() >= 4) cache.erase(cache.begin());
  cache.emplace(epoch, perm);
  return perm;
}

int64_t Sampler::window_of(int64_t i) const {
  BW_CHECK(i >= 0, "global sample index {} < 0", i);
  if (order_ == Order::kSequential) return i % num_samples_;
  return (*permutation(i / num_samples_))[static_cast<size_t>(i % num_samples_)];
}

std::pair<torch::Tensor, torch::Tensor> Sampler::sample(int64_t i) const {
  auto [x, y] = batch(i, 1);
  return {x[0], y[0]};
}

std::pair<torch::Tensor, torch::Tensor> Sampler::batch(int64_t first, int count) const {
  BW_CHECK(first >= 0 && count >= 0, "batch({}, {})", first, count);
  auto opts = torch::TensorOptions().dtype(torch::kInt64);
  torch::Tensor window = torch::empty({count, seq_len_ + 1}, opts);
  int64_t* w = window.data_ptr<int64_t>();
  for (int r = 0; r < count; ++r) {
    int64_t start = window_of(first + r) * seq_len_;
    data_.copy_tokens(start, seq_len_ + 1, w + static_cast<int64_t>(r) * (seq_len_ + 1));
  }
  torch::Tensor inputs = window.narrow(1, 0, seq_len_).contiguous();
  torch::Tensor targets = window.narrow(1, 1, seq_len_).contiguous();
  return {inputs, targets};
}

}  // namespace bw::data
