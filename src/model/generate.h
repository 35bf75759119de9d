// Text generation with a KV cache, for one process (`breakwater generate`, docs/cli.md).
//
// KvCacheModel runs a model of any family (model/gpt.h: gpt, gpt2, llama) token by token from
// its layers' parameters, keeping each block's keys and values (after RoPE, for llama; one per
// key/value head under GQA), so a new token costs one position's work instead of the whole
// prefix's. It reads the parameters by their checkpoint names ("wte.weight", "attn.qkv.weight",
// "attn.q.weight", ...; docs/models.md "Name map") and computes each family's block as its
// training layer does (LayerNorm and exact or tanh GELU; RMSNorm, RoPE and SwiGLU), so the
// cached logits equal the layers' forward within float rounding.
//
// Context: the window is config.seq_len positions (a caller that wants the model's whole
// context sets seq_len to it; the learned positions of gpt and gpt2 end at max_positions, and
// llama's RoPE table is built for seq_len). When the context is full, the cache is rebuilt from
// the last seq_len / 2 tokens (one prefill), and generation goes on from there; the reference
// without a cache (use_cache = false: the training layers on the whole window) uses the same
// windows, so both give the same tokens.
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
  int64_t stop_token = -1;  // >= 0: generation ends after this token (end of sequence)
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
  // A block's parameters; the ones a family does not have stay undefined (llama: no biases,
  // separate q, k, v and the SwiGLU gate; gpt, gpt2: fused qkv).
  struct Block {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, q_w, k_w, v_w, proj_w, proj_b, ln2_w, ln2_b;
    torch::Tensor gate_w, fc_w, fc_b, fc2_w, fc2_b;
    torch::Tensor k, v;  // [kv_heads, seq_len, head_dim], the first length_ positions filled
  };
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;
  // Queries [heads, n, hd]; stores the keys and values of positions [length_, length_ + n).
  torch::Tensor project_and_cache(Block& b, const torch::Tensor& a, int64_t n);

  GptConfig config_;
  std::vector<std::shared_ptr<Layer>> layers_;
  bool llama_;
  const char* gelu_;  // "none" (gpt: exact erf) or "tanh" (gpt2's gelu_new)
  torch::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, head_w_;
  torch::Tensor cos_, sin_;  // llama: RoPE of every position, [seq_len, head_dim], fp32
  std::vector<Block> blocks_;
  int64_t length_ = 0;
};

// Continues `prompt` (at least one token; its last seq_len tokens are the first window) by up to
// max_tokens tokens (fewer when stop_token comes), calling on_token(id) as each is chosen
// (streaming), and returns the new tokens. Sampling: temperature
// and top-k over the last position's logits, seeded; temperature 0 is greedy.
std::vector<int64_t> generate(KvCacheModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace bw::model
