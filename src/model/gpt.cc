// GPT layers on plain ATen ops (no torch::nn submodules), so initialisation is fully ours and
// deterministic per (seed, layer index).
#include "model/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "model/init.h"
#include "model/ops.h"

namespace bw::model {

// RoPE's inverse frequencies as Hugging Face computes them (modeling_rope_utils.py, default and
// llama3), in fp32 with the same operations in the same order.
torch::Tensor rope_inverse_frequencies(const GptConfig& c) {
  const int64_t dim = c.d_model / c.n_heads;
  auto exponent =
      torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat) / static_cast<double>(dim);
  auto inv_freq = 1.0 / at::pow(c.rope_theta, exponent);
  if (!c.rope.llama3) return inv_freq;
  const double factor = c.rope.factor, low = c.rope.low_freq_factor, high = c.rope.high_freq_factor;
  const double old_len = static_cast<double>(c.rope.original_max_positions);
  const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  auto smooth = (old_len / wavelen - low) / (high - low);
  auto smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

// rotate_half: [x1, x2] -> [-x2, x1] over the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

namespace {

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;

// SplitMix64 finaliser: decorrelates the per-layer seeds drawn from one model seed.
uint64_t mix_seed(uint64_t seed, uint64_t layer_index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (layer_index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

thread_local bool t_skip_init = false;

// Under autocast, a tensor that several matmuls read cast once to the compute dtype: autocast
// would cast it again for each of them (the values are the same: the cast autocast makes).
torch::Tensor to_autocast_dtype(const torch::Tensor& x) {
  const auto type = x.device().type();
  if (!at::autocast::is_autocast_enabled(type)) return x;
  const auto dtype = at::autocast::get_autocast_dtype(type);
  return x.scalar_type() == torch::kFloat ? x.to(dtype) : x;
}

torch::Tensor normal(at::Generator& gen, std::vector<int64_t> shape, double std) {
  auto t = torch::empty(shape, torch::kFloat32);
  if (!t_skip_init) t.normal_(0.0, std, gen);
  return t;
}

class EmbeddingLayer final : public Layer {
 public:
  EmbeddingLayer(const GptConfig& c, int index, at::Generator& gen) : Layer(index) {
    wte_ = add_parameter("wte.weight", normal(gen, {c.vocab_size, c.d_model}, kInitStd));
    if (position_rows(c) > 0) {
      wpe_ = add_parameter("wpe.weight", normal(gen, {position_rows(c), c.d_model}, kInitStd));
    }
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    BW_CHECK(tokens.dim() == 2, "embedding input must be [mb, T], got {} dims", tokens.dim());
    auto x = at::embedding(wte_, tokens);
    if (!wpe_.defined()) return x;
    BW_CHECK(tokens.size(1) <= wpe_.size(0), "embedding input of {} tokens, {} positions",
             tokens.size(1), wpe_.size(0));
    auto pos =
        torch::arange(tokens.size(1), torch::TensorOptions(torch::kInt64).device(x.device()));
    return x + at::embedding(wpe_, pos).unsqueeze(0);
  }

 private:
  torch::Tensor wte_, wpe_;
};

// GPT and GPT-2 blocks: pre-LayerNorm, fused QKV with biases, GELU MLP of 4 d.
class GptBlock final : public Layer {
 public:
  GptBlock(const GptConfig& c, int index, at::Generator& gen)
      : Layer(index),
        n_heads_(c.n_heads),
        eps_(c.norm_eps),
        gelu_(c.family == Family::kGpt2 ? "tanh" : "none") {
    const int64_t d = c.d_model;
    const double proj_std = kInitStd / std::sqrt(2.0 * c.n_blocks);
    ln1_w_ = add_parameter("ln1.weight", torch::ones({d}));
    ln1_b_ = add_parameter("ln1.bias", torch::zeros({d}));
    qkv_w_ = add_parameter("attn.qkv.weight", normal(gen, {3 * d, d}, kInitStd));
    qkv_b_ = add_parameter("attn.qkv.bias", torch::zeros({3 * d}));
    proj_w_ = add_parameter("attn.proj.weight", normal(gen, {d, d}, proj_std));
    proj_b_ = add_parameter("attn.proj.bias", torch::zeros({d}));
    ln2_w_ = add_parameter("ln2.weight", torch::ones({d}));
    ln2_b_ = add_parameter("ln2.bias", torch::zeros({d}));
    fc_w_ = add_parameter("mlp.fc.weight", normal(gen, {4 * d, d}, kInitStd));
    fc_b_ = add_parameter("mlp.fc.bias", torch::zeros({4 * d}));
    fc2_w_ = add_parameter("mlp.proj.weight", normal(gen, {d, 4 * d}, proj_std));
    fc2_b_ = add_parameter("mlp.proj.bias", torch::zeros({d}));
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    const int64_t hd = d / n_heads_;
    auto h = at::layer_norm(x, {d}, ln1_w_, ln1_b_, eps_);
    auto qkv = at::linear(h, qkv_w_, qkv_b_).view({b, t, 3, n_heads_, hd}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0], k = qkv[1], v = qkv[2];  // [b, heads, t, hd]
    // Fused causal attention: flash-style kernels on the CPU, flash or cuDNN on a GPU.
    auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true)
                 .transpose(1, 2)
                 .reshape({b, t, d});
    auto x1 = x + at::linear(y, proj_w_, proj_b_);
    auto h2 = at::layer_norm(x1, {d}, ln2_w_, ln2_b_, eps_);
    auto m = at::linear(at::gelu(at::linear(h2, fc_w_, fc_b_), gelu_), fc2_w_, fc2_b_);
    return x1 + m;
  }

 private:
  int64_t n_heads_;
  double eps_;
  std::string gelu_;
  torch::Tensor ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_;
  torch::Tensor ln2_w_, ln2_b_, fc_w_, fc_b_, fc2_w_, fc2_b_;
};

// LlamaDecoderLayer: RMSNorm, attention with RoPE and GQA (no biases), RMSNorm, SwiGLU MLP.
class LlamaBlock final : public Layer {
 public:
  LlamaBlock(const GptConfig& c, int index, at::Generator& gen)
      : Layer(index), n_heads_(c.n_heads), n_kv_(kv_heads(c)), eps_(c.norm_eps) {
    const int64_t d = c.d_model, hd = d / c.n_heads, kv = n_kv_ * hd, f = ffn_width(c);
    ln1_w_ = add_parameter("ln1.weight", torch::ones({d}));
    q_w_ = add_parameter("attn.q.weight", normal(gen, {d, d}, kInitStd));
    k_w_ = add_parameter("attn.k.weight", normal(gen, {kv, d}, kInitStd));
    v_w_ = add_parameter("attn.v.weight", normal(gen, {kv, d}, kInitStd));
    o_w_ = add_parameter("attn.proj.weight", normal(gen, {d, d}, kInitStd));
    ln2_w_ = add_parameter("ln2.weight", torch::ones({d}));
    gate_w_ = add_parameter("mlp.gate.weight", normal(gen, {f, d}, kInitStd));
    up_w_ = add_parameter("mlp.up.weight", normal(gen, {f, d}, kInitStd));
    down_w_ = add_parameter("mlp.proj.weight", normal(gen, {d, f}, kInitStd));
    // cos and signed sin of every position (Hugging Face's LlamaRotaryEmbedding), kept in fp32.
    auto table = rope_table(c, c.seq_len);
    cos_ = table.cos;
    sin_ = table.sin_signed;
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    const int64_t hd = d / n_heads_;
    BW_CHECK(t <= cos_.size(0), "llama block input of {} tokens, RoPE table of {}", t,
             cos_.size(0));
    // One matmul for the three projections (their weights side by side), reading the norm's
    // output once; q, k and v are views of its output.
    auto h = to_autocast_dtype(rms_norm(x, ln1_w_, eps_));
    auto qkv = at::linear(h, at::cat({q_w_, k_w_, v_w_})).split({d, n_kv_ * hd, n_kv_ * hd}, -1);
    auto q = qkv[0].view({b, t, n_heads_, hd}).transpose(1, 2);
    auto k = qkv[1].view({b, t, n_kv_, hd}).transpose(1, 2);
    auto v = qkv[2].view({b, t, n_kv_, hd}).transpose(1, 2);
    if (!cos_cast_.defined() || cos_cast_.scalar_type() != q.scalar_type() ||
        cos_cast_.device() != q.device()) {
      cos_cast_ = cos_.to(q.device(), q.scalar_type());
      sin_cast_ = sin_.to(q.device(), q.scalar_type());
    }
    auto cos = cos_cast_.narrow(0, 0, t), sin = sin_cast_.narrow(0, 0, t);
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
    // Query head j reads key/value head j / (n_heads / n_kv), as Hugging Face's repeat_kv; SDPA
    // takes the grouped keys and values (enable_gqa) and repeats nothing in memory.
    auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true, /*scale=*/std::nullopt,
                                              /*enable_gqa=*/n_kv_ != n_heads_)
                 .transpose(1, 2)
                 .reshape({b, t, d});
    auto x1 = x + at::linear(y, o_w_);
    auto h2 = to_autocast_dtype(rms_norm(x1, ln2_w_, eps_));
    auto m = at::linear(swiglu(at::linear(h2, gate_w_), at::linear(h2, up_w_)), down_w_);
    return x1 + m;
  }

 private:
  int64_t n_heads_, n_kv_;
  double eps_;
  torch::Tensor ln1_w_, q_w_, k_w_, v_w_, o_w_, ln2_w_, gate_w_, up_w_, down_w_;
  torch::Tensor cos_, sin_;            // fp32 [seq_len, head_dim]: cos and signed sin
  torch::Tensor cos_cast_, sin_cast_;  // the same in the last device and dtype used
};

class HeadLayer final : public Layer {
 public:
  HeadLayer(const GptConfig& c, int index, at::Generator& gen, at::Generator& embedding_gen)
      : Layer(index), llama_(c.family == Family::kLlama), eps_(c.norm_eps) {
    ln_w_ = add_parameter("ln_f.weight", torch::ones({c.d_model}));
    if (!llama_) ln_b_ = add_parameter("ln_f.bias", torch::zeros({c.d_model}));
    // A tied head's copy is the embedding's first draw from layer 0's generator: bit-identical.
    auto& g = c.tie_embeddings ? embedding_gen : gen;
    head_w_ = add_parameter("lm_head.weight", normal(g, {c.vocab_size, c.d_model}, kInitStd));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h =
        llama_ ? rms_norm(x, ln_w_, eps_) : at::layer_norm(x, {x.size(-1)}, ln_w_, ln_b_, eps_);
    return at::linear(h, head_w_);
  }

 private:
  bool llama_;
  double eps_;
  torch::Tensor ln_w_, ln_b_, head_w_;
};

}  // namespace

torch::Tensor Layer::add_parameter(const std::string& name, torch::Tensor value) {
  // torch::nn::Module rejects dots in parameter names; the dotted name is ours.
  std::string flat = name;
  for (char& ch : flat) {
    if (ch == '.') ch = '_';
  }
  auto registered = register_parameter(flat, std::move(value));
  params_.emplace_back(name, registered);
  return registered;
}

SkipInit::SkipInit() : previous_(t_skip_init) { t_skip_init = true; }
SkipInit::~SkipInit() { t_skip_init = previous_; }
bool SkipInit::active() { return t_skip_init; }

std::shared_ptr<Layer> build_layer(const GptConfig& config, int layer_index, uint64_t seed) {
  BW_CHECK(config.d_model % config.n_heads == 0, "d_model {} not divisible by n_heads {}",
           config.d_model, config.n_heads);
  BW_CHECK(config.n_heads % kv_heads(config) == 0, "n_heads {} not divisible by n_kv_heads {}",
           config.n_heads, kv_heads(config));
  auto gen = at::detail::createCPUGenerator(mix_seed(seed, static_cast<uint64_t>(layer_index)));
  torch::NoGradGuard no_grad;
  switch (layer_kind(config, layer_index)) {
    case LayerKind::kEmbedding:
      return std::make_shared<EmbeddingLayer>(config, layer_index, gen);
    case LayerKind::kBlock:
      if (config.family == Family::kLlama) {
        return std::make_shared<LlamaBlock>(config, layer_index, gen);
      }
      return std::make_shared<GptBlock>(config, layer_index, gen);
    case LayerKind::kHead: {
      auto embedding_gen = at::detail::createCPUGenerator(mix_seed(seed, 0));
      return std::make_shared<HeadLayer>(config, layer_index, gen, embedding_gen);
    }
  }
  BW_CHECK(false, "unreachable layer kind");
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t vocab = logits.size(-1);
  // In float32 (or wider) whatever the logits' dtype (bf16 under autocast): softmax over a large
  // vocabulary and the mean over tokens need its mantissa.
  auto flat = logits.reshape({-1, vocab});
  if (c10::elementSize(flat.scalar_type()) < 4) flat = flat.to(torch::kFloat);
  return at::cross_entropy_loss(flat, targets.reshape({-1}));
}

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(const Layer& layer) {
  return layer.parameter_list();
}

}  // namespace bw::model
