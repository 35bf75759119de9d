// The seeded global sample order. Sample windows are seq_len + 1 consecutive tokens starting at
// multiples of seq_len (window w covers tokens [w*T, w*T + T]; neighbouring windows share one
// token, the last target of one being the first input of the next), so every token is a target
// exactly once per epoch. Global sample i is window perm_e[i mod S] of epoch e = i div S, where
// S = num_samples() and perm_e is a Fisher-Yates shuffle driven by splitmix64 seeded from
// (seed, e). Everything is integer arithmetic on our own PRNG, so the order is identical across
// processes, compilers, standard libraries and machines.
//
// Step k consumes global samples [k*G, (k+1)*G) whatever the plan (G = microbatches *
// microbatch_size); microbatch j of step k is [k*G + j*mbs, k*G + (j+1)*mbs).
//
// The validation stream (data.val_path) is read in order instead (Order::kSequential): its
// sample i is window i, so every evaluation sees the same first samples of the file whatever
// the plan, as llm.c's validation loader reads them from the start each time.
//
// Thread-safety: all methods are const and safe to call concurrently (the per-epoch permutation
// cache is guarded by a mutex). Copies share the cache.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace bw::data {

// splitmix64 (Steele, Lea, Flood 2014): advances state and returns the next output.
uint64_t splitmix64(uint64_t& state);
// A uniform integer in [0, bound) from splitmix64 (Lemire's multiply-shift with rejection).
uint64_t uniform_below(uint64_t& state, uint64_t bound);
// The permutation of [0, n) that Sampler uses for one epoch.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  enum class Order { kShuffled, kSequential };  // sequential: sample i is window i mod S

  // ConfigError if the dataset has fewer than seq_len + 1 tokens or seq_len < 1.
  Sampler(const TokenDataset& data, int seq_len, uint64_t seed, Order order = Order::kShuffled);

  int64_t num_samples() const { return num_samples_; }
  int seq_len() const { return seq_len_; }
  const TokenDataset& dataset() const { return data_; }

  // ConfigError naming the file and numbers if one global batch does not fit in one epoch.
  void require_global_batch(int64_t global_batch) const;

  // The window index (see above) of global sample i >= 0.
  int64_t window_of(int64_t i) const;
  // Global sample i: inputs and targets, int64 [seq_len].
  std::pair<at::Tensor, at::Tensor> sample(int64_t i) const;
  // Samples [first, first + count) stacked to int64 [count, seq_len].
  std::pair<at::Tensor, at::Tensor> batch(int64_t first, int count) const;

 private:
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

  TokenDataset data_;
  int seq_len_;
  uint64_t seed_;
  Order order_;
  int64_t num_samples_;
  struct Cache {
    std::mutex mu;
    std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> by_epoch;
  };
  std::shared_ptr<Cache> cache_;  // shared by copies, so a Sampler is cheap to copy and move
};

}  // namespace bw::data
