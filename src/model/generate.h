// Text generation with a KV cache, for one process (`breakwater generate`, docs/cli.md).
//
// KvCacheModel runs today's GPT (model/gpt.h: embedding, pre-LayerNorm blocks, head) token by
// token from the layers' parameters, keeping each block's keys and values, so a new token costs
// one position's work instead of the whole prefix's. It reads the parameters by their checkpoint
// names ("wte.weight", "attn.qkv.weight", ...), so a model family with other layers adds its
// own step here without touching the training layers.
//
// Context: learned positions end at seq_len. When the context is full, the cache is rebuilt from
// the last seq_len / 2 tokens (one prefill), and generation goes on from there; the reference
// without a cache (Recompute) uses the same windows, so both give the same tokens.
//
// Thread-safety: one thread per KvCacheModel.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace bw::model {

struct GenerateOptions {
  int max_tokens = 100;
  double temperature = 0.8;  // 0 = greedy (argmax)
  int top_k = 40;            // 0 = the whole vocabulary
  uint64_t seed = 0;
  bool use_cache = true;  // false: recompute the whole window for every token (the reference)
};

class KvCacheModel {
 public:
  // `layers`: every layer of the model, in order (num_layers(config)).
  KvCacheModel(GptConfig config, std::vector<std::shared_ptr<Layer>> layers);

  // Appends `tokens` after the cached positions (at most seq_len in all) and returns the logits
  // of each appended position, float [n, vocab].
  torch::Tensor append(const std::vector<int64_t>& tokens);
  // Logits of every position of `tokens` from scratch, without the cache: [n, vocab].
  torch::Tensor full_forward(const std::vector<int64_t>& tokens);
  void clear();
  int64_t cached() const { return length_; }
  const GptConfig& config() const { return config_; }

 private:
  struct Block {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w,
        fc2_b;
    torch::Tensor k, v;  // [heads, seq_len, head_dim], the first length_ positions filled
  };
  GptConfig config_;
  std::vector<std::shared_ptr<Layer>> layers_;
  torch::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, head_w_;
  std::vector<Block> blocks_;
  int64_t length_ = 0;
};

// Continues `prompt` (at least one token, at most seq_len) by up to max_tokens tokens, calling
// on_token(id) as each is chosen (streaming), and returns the new tokens. Sampling: temperature
// and top-k over the last position's logits, seeded; temperature 0 is greedy.
std::vector<int64_t> generate(KvCacheModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace bw::model
