// Text generation from a trained model: autoregressive sampling with temperature and top-k over
// the full layer list (the coordinator loads every layer from the final checkpoint). Seeded, so a
// run's sample is reproducible.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/gpt.h"

namespace bw::model {

struct SampleOptions {
  int num_tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 0;
};

// Continues `prompt` (at least one token) by num_tokens tokens; the context is the last seq_len
// tokens. Returns only the new tokens.
std::vector<int64_t> sample_tokens(const std::vector<std::shared_ptr<Layer>>& layers,
                                   const GptConfig& config, const std::vector<int64_t>& prompt,
                                   const SampleOptions& options);

}  // namespace bw::model
