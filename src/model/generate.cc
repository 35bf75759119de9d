#include "model/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/check.h"
#include "core/error.h"
#include "model/ops.h"

namespace bw::model {
namespace {

torch::Tensor param(const Layer& layer, const std::string& name) {
  for (const auto& [n, p] : layer.parameter_list()) {
    if (n == name) return p.detach();
  }
  BW_CHECK(false, "layer {} has no parameter '{}'", layer.index(), name);
  return {};
}

}  // namespace

KvCacheModel::KvCacheModel(GptConfig config, std::vector<std::shared_ptr<Layer>> layers)
    : config_(std::move(config)),
      layers_(std::move(layers)),
      llama_(config_.family == Family::kLlama),
      gelu_(config_.family == Family::kGpt2 ? "tanh" : "none") {
  BW_CHECK(static_cast<int>(layers_.size()) == num_layers(config_),
           "{} layers for a {}-layer model", layers_.size(), num_layers(config_));
  BW_CHECK(config_.seq_len >= 1, "a context of {} positions", config_.seq_len);
  wte_ = param(*layers_.front(), "wte.weight");
  ln_f_w_ = param(*layers_.back(), "ln_f.weight");
  head_w_ = param(*layers_.back(), "lm_head.weight");
  const int64_t hd = config_.d_model / config_.n_heads, kv = kv_heads(config_);
  if (llama_) {
    // The table LlamaBlock builds (gpt.cc), so cached and recomputed logits agree.
    auto freqs = torch::arange(config_.seq_len, torch::kInt64).to(torch::kFloat).unsqueeze(1) *
                 rope_inverse_frequencies(config_).unsqueeze(0);
    auto emb = torch::cat({freqs, freqs}, -1);
    cos_ = emb.cos();
    sin_ = emb.sin();
  } else {
    wpe_ = param(*layers_.front(), "wpe.weight");
    BW_CHECK(wpe_.size(0) >= config_.seq_len, "a context of {} positions, {} learned",
             config_.seq_len, wpe_.size(0));
    ln_f_b_ = param(*layers_.back(), "ln_f.bias");
  }
  for (int i = 1; i <= config_.n_blocks; ++i) {
    const Layer& l = *layers_[i];
    Block b;
    b.ln1_w = param(l, "ln1.weight");
    b.ln2_w = param(l, "ln2.weight");
    b.proj_w = param(l, "attn.proj.weight");
    b.fc2_w = param(l, "mlp.proj.weight");
    if (llama_) {
      b.q_w = param(l, "attn.q.weight");
      b.k_w = param(l, "attn.k.weight");
      b.v_w = param(l, "attn.v.weight");
      b.gate_w = param(l, "mlp.gate.weight");
      b.fc_w = param(l, "mlp.up.weight");
    } else {
      b.ln1_b = param(l, "ln1.bias");
      b.ln2_b = param(l, "ln2.bias");
      b.qkv_w = param(l, "attn.qkv.weight");
      b.qkv_b = param(l, "attn.qkv.bias");
      b.proj_b = param(l, "attn.proj.bias");
      b.fc_w = param(l, "mlp.fc.weight");
      b.fc_b = param(l, "mlp.fc.bias");
      b.fc2_b = param(l, "mlp.proj.bias");
    }
    b.k = torch::zeros({kv, config_.seq_len, hd});
    b.v = torch::zeros({kv, config_.seq_len, hd});
    blocks_.push_back(std::move(b));
  }
}

void KvCacheModel::clear() { length_ = 0; }

torch::Tensor KvCacheModel::norm(const torch::Tensor& x, const torch::Tensor& w,
                                 const torch::Tensor& b) const {
  if (llama_) return rms_norm(x, w, config_.norm_eps);
  return at::layer_norm(x, {config_.d_model}, w, b, config_.norm_eps);
}

torch::Tensor KvCacheModel::project_and_cache(Block& b, const torch::Tensor& a, int64_t n) {
  const int64_t h = config_.n_heads, kv = kv_heads(config_), hd = config_.d_model / h;
  torch::Tensor q, k, v;  // [heads or kv_heads, n, hd]
  if (llama_) {
    q = at::linear(a, b.q_w).view({n, h, hd}).transpose(0, 1);
    k = at::linear(a, b.k_w).view({n, kv, hd}).transpose(0, 1);
    v = at::linear(a, b.v_w).view({n, kv, hd}).transpose(0, 1);
    auto cos = cos_.narrow(0, length_, n), sin = sin_.narrow(0, length_, n);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
  } else {
    auto qkv = at::linear(a, b.qkv_w, b.qkv_b).view({n, 3, h, hd}).permute({1, 2, 0, 3});
    q = qkv[0], k = qkv[1], v = qkv[2];
  }
  b.k.narrow(1, length_, n).copy_(k);
  b.v.narrow(1, length_, n).copy_(v);
  return q;
}

torch::Tensor KvCacheModel::append(const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(tokens.size());
  BW_CHECK(n >= 1 && length_ + n <= config_.seq_len, "{} + {} positions exceed seq_len {}", length_,
           n, config_.seq_len);
  const int64_t d = config_.d_model, end = length_ + n;
  const bool gqa = kv_heads(config_) != config_.n_heads;
  torch::Tensor x = at::embedding(wte_, torch::tensor(tokens, torch::kInt64));  // [n, d]
  if (!llama_) x = x + at::embedding(wpe_, torch::arange(length_, end, torch::kInt64));
  for (auto& b : blocks_) {
    auto q = project_and_cache(b, norm(x, b.ln1_w, b.ln1_b), n);
    auto k = b.k.narrow(1, 0, end), v = b.v.narrow(1, 0, end);  // [kv_heads, end, hd]
    // New query i (position length_ + i) sees positions [0, length_ + i]: a causal mask over the
    // cached positions and the new ones; one new position sees every cached one.
    std::optional<torch::Tensor> mask;
    if (n > 1) {
      mask = torch::arange(0, end, torch::kInt64).unsqueeze(0) <=
             torch::arange(length_, end, torch::kInt64).unsqueeze(1);
    }
    // Query head j reads key/value head j / (heads / kv_heads), as the training layer.
    auto y = at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, gqa)
                 .transpose(0, 1)
                 .reshape({n, d});
    auto x1 = x + at::linear(y, b.proj_w, b.proj_b);
    auto m = norm(x1, b.ln2_w, b.ln2_b);
    auto hidden = llama_ ? at::silu(at::linear(m, b.gate_w)) * at::linear(m, b.fc_w)
                         : at::gelu(at::linear(m, b.fc_w, b.fc_b), gelu_);
    x = x1 + at::linear(hidden, b.fc2_w, b.fc2_b);
  }
  length_ = end;
  return at::linear(norm(x, ln_f_w_, ln_f_b_), head_w_);
}

torch::Tensor KvCacheModel::full_forward(const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::tensor(tokens, torch::kInt64).unsqueeze(0);
  for (const auto& layer : layers_) x = layer->forward(x);
  return x[0];
}

std::vector<int64_t> generate(KvCacheModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token) {
  const auto& c = model.config();
  if (prompt.empty()) throw ConfigError("the prompt encodes to no tokens; give a longer prompt");
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(options.seed);
  // `window`: the tokens the model sees now (the cache holds exactly these when use_cache).
  std::vector<int64_t> window(prompt.end() - std::min<size_t>(prompt.size(), c.seq_len),
                              prompt.end());
  std::vector<int64_t> out;
  model.clear();
  torch::Tensor logits;  // of the window's last position
  auto refill = [&] {
    model.clear();
    logits = options.use_cache ? model.append(window)[-1] : model.full_forward(window)[-1];
  };
  refill();
  for (int i = 0; i < options.max_tokens; ++i) {
    int64_t pick = 0;
    if (options.temperature <= 0) {
      pick = logits.argmax().item<int64_t>();
    } else {
      auto scaled = logits / options.temperature;
      const int k = options.top_k <= 0 ? c.vocab_size : std::min(options.top_k, c.vocab_size);
      auto [values, indices] = scaled.topk(k);
      auto probs = at::softmax(values, -1);
      pick = indices[probs.multinomial(1, false, gen).item<int64_t>()].item<int64_t>();
    }
    out.push_back(pick);
    if (on_token) on_token(pick);
    if (i + 1 == options.max_tokens || pick == options.stop_token) break;
    if (static_cast<int>(window.size()) == c.seq_len) {
      // Full: keep the last seq_len / 2 tokens (and the new one) and start the cache again.
      window.erase(window.begin(), window.end() - c.seq_len / 2);
      window.push_back(pick);
      refill();
    } else {
      window.push_back(pick);
      logits = options.use_cache ? model.append({pick})[0] : model.full_forward(window)[-1];
    }
  }
  return out;
}

}  // namespace bw::model
