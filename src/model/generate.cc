#include "model/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace bw::model {
namespace {

constexpr double kLayerNormEps = 1e-5;  // as the training layers (gpt.cc)

torch::Tensor param(const Layer& layer, const std::string& name) {
  for (const auto& [n, p] : layer.parameter_list()) {
    if (n == name) return p.detach();
  }
  BW_CHECK(false, "layer {} has no parameter '{}'", layer.index(), name);
  return {};
}

}  // namespace

KvCacheModel::KvCacheModel(GptConfig config, std::vector<std::shared_ptr<Layer>> layers)
    : config_(std::move(config)), layers_(std::move(layers)) {
  BW_CHECK(static_cast<int>(layers_.size()) == num_layers(config_),
           "{} layers for a {}-layer model", layers_.size(), num_layers(config_));
  wte_ = param(*layers_.front(), "wte.weight");
  wpe_ = param(*layers_.front(), "wpe.weight");
  ln_f_w_ = param(*layers_.back(), "ln_f.weight");
  ln_f_b_ = param(*layers_.back(), "ln_f.bias");
  head_w_ = param(*layers_.back(), "lm_head.weight");
  const int64_t hd = config_.d_model / config_.n_heads;
  for (int b = 1; b <= config_.n_blocks; ++b) {
    const Layer& l = *layers_[b];
    Block blk{param(l, "ln1.weight"),
              param(l, "ln1.bias"),
              param(l, "attn.qkv.weight"),
              param(l, "attn.qkv.bias"),
              param(l, "attn.proj.weight"),
              param(l, "attn.proj.bias"),
              param(l, "ln2.weight"),
              param(l, "ln2.bias"),
              param(l, "mlp.fc.weight"),
              param(l, "mlp.fc.bias"),
              param(l, "mlp.proj.weight"),
              param(l, "mlp.proj.bias"),
              torch::zeros({config_.n_heads, config_.seq_len, hd}),
              torch::zeros({config_.n_heads, config_.seq_len, hd})};
    blocks_.push_back(std::move(blk));
  }
}

void KvCacheModel::clear() { length_ = 0; }

torch::Tensor KvCacheModel::append(const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(tokens.size());
  BW_CHECK(n >= 1 && length_ + n <= config_.seq_len, "{} + {} positions exceed seq_len {}", length_,
           n, config_.seq_len);
  const int64_t d = config_.d_model, h = config_.n_heads, hd = d / h;
  const int64_t end = length_ + n;
  auto ids = torch::tensor(tokens, torch::kInt64);
  auto pos = torch::arange(length_, end, torch::kInt64);
  torch::Tensor x = at::embedding(wte_, ids) + at::embedding(wpe_, pos);  // [n, d]
  for (auto& b : blocks_) {
    auto a = at::layer_norm(x, {d}, b.ln1_w, b.ln1_b, kLayerNormEps);
    auto qkv = at::linear(a, b.qkv_w, b.qkv_b).view({n, 3, h, hd}).permute({1, 2, 0, 3});
    b.k.narrow(1, length_, n).copy_(qkv[1]);
    b.v.narrow(1, length_, n).copy_(qkv[2]);
    auto k = b.k.narrow(1, 0, end), v = b.v.narrow(1, 0, end);  // [h, end, hd]
    // New query i (position length_ + i) sees positions [0, length_ + i]: a causal mask over the
    // cached positions and the new ones.
    torch::Tensor y;
    if (n > 1) {
      auto qpos = torch::arange(length_, end, torch::kInt64).unsqueeze(1);
      auto kpos = torch::arange(0, end, torch::kInt64).unsqueeze(0);
      y = at::scaled_dot_product_attention(qkv[0], k, v, /*attn_mask=*/kpos <= qpos, 0.0, false);
    } else {  // one new position sees every cached one
      y = at::scaled_dot_product_attention(qkv[0], k, v, /*attn_mask=*/{}, 0.0, false);
    }  // [h, n, hd]
    y = y.transpose(0, 1).reshape({n, d});
    auto x1 = x + at::linear(y, b.proj_w, b.proj_b);
    auto m = at::layer_norm(x1, {d}, b.ln2_w, b.ln2_b, kLayerNormEps);
    x = x1 + at::linear(at::gelu(at::linear(m, b.fc_w, b.fc_b)), b.fc2_w, b.fc2_b);
  }
  length_ = end;
  return at::linear(at::layer_norm(x, {d}, ln_f_w_, ln_f_b_, kLayerNormEps), head_w_);
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
    if (i + 1 == options.max_tokens) break;
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
