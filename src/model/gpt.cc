// GPT layers on plain ATen ops (no torch::nn submodules), so initialisation is fully ours and
// deterministic per (seed, layer index).
#include "model/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace bw::model {
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

torch::Tensor normal(at::Generator& gen, std::vector<int64_t> shape, double std) {
  auto t = torch::empty(shape, torch::kFloat32);
  t.normal_(0.0, std, gen);
  return t;
}

class EmbeddingLayer final : public Layer {
 public:
  EmbeddingLayer(const GptConfig& c, int index, at::Generator& gen) : Layer(index) {
    wte_ = add_parameter("wte.weight", normal(gen, {c.vocab_size, c.d_model}, kInitStd));
    wpe_ = add_parameter("wpe.weight", normal(gen, {c.seq_len, c.d_model}, kInitStd));
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    BW_CHECK(tokens.dim() == 2 && tokens.size(1) <= wpe_.size(0),
             "embedding input must be [mb, T<= {}], got {} dims", wpe_.size(0), tokens.dim());
    auto pos = torch::arange(tokens.size(1), torch::kInt64);
    return at::embedding(wte_, tokens) + at::embedding(wpe_, pos).unsqueeze(0);
  }

 private:
  torch::Tensor wte_, wpe_;
};

class BlockLayer final : public Layer {
 public:
  BlockLayer(const GptConfig& c, int index, at::Generator& gen)
      : Layer(index), n_heads_(c.n_heads) {
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
    auto h = at::layer_norm(x, {d}, ln1_w_, ln1_b_, kLayerNormEps);
    auto qkv = at::linear(h, qkv_w_, qkv_b_).view({b, t, 3, n_heads_, hd}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0], k = qkv[1], v = qkv[2];  // [b, heads, t, hd]
    // Fused causal attention: flash-style kernels on the CPU, flash or cuDNN on a GPU.
    auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true)
                 .transpose(1, 2)
                 .reshape({b, t, d});
    auto x1 = x + at::linear(y, proj_w_, proj_b_);
    auto h2 = at::layer_norm(x1, {d}, ln2_w_, ln2_b_, kLayerNormEps);
    auto m = at::linear(at::gelu(at::linear(h2, fc_w_, fc_b_)), fc2_w_, fc2_b_);
    return x1 + m;
  }

 private:
  int64_t n_heads_;
  torch::Tensor ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_;
  torch::Tensor ln2_w_, ln2_b_, fc_w_, fc_b_, fc2_w_, fc2_b_;
};

class HeadLayer final : public Layer {
 public:
  HeadLayer(const GptConfig& c, int index, at::Generator& gen, at::Generator& embedding_gen)
      : Layer(index) {
    ln_w_ = add_parameter("ln_f.weight", torch::ones({c.d_model}));
    ln_b_ = add_parameter("ln_f.bias", torch::zeros({c.d_model}));
    // Tied: the embedding layer draws "wte.weight" first from its generator, so the same first
    // draw from a generator in the same state gives the same bits.
    at::Generator& head_gen = c.tie_embeddings ? embedding_gen : gen;
    head_w_ =
        add_parameter("lm_head.weight", normal(head_gen, {c.vocab_size, c.d_model}, kInitStd));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h = at::layer_norm(x, {x.size(-1)}, ln_w_, ln_b_, kLayerNormEps);
    return at::linear(h, head_w_);
  }

 private:
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

GptConfig named_config(const std::string& name, int vocab_size) {
  if (vocab_size < 2) {
    throw ConfigError(fmt::format("model vocab_size must be >= 2, got {}", vocab_size));
  }
  // "<base>:<n_blocks>" keeps the base shapes with another block count (pipeline tests need more
  // layers than chunks).
  std::string base = name;
  int blocks_override = 0;
  if (auto colon = name.find(':'); colon != std::string::npos) {
    base = name.substr(0, colon);
    const std::string count = name.substr(colon + 1);
    if (count.empty() || count.size() > 4 ||
        count.find_first_not_of("0123456789") != std::string::npos || std::stoi(count) < 1) {
      throw ConfigError(fmt::format(
          "model '{}': the block count after ':' must be a positive integer, e.g. tiny:6", name));
    }
    blocks_override = std::stoi(count);
  }
  GptConfig c;
  c.name = name;
  c.vocab_size = vocab_size;
  if (base == "tiny") {
    c.d_model = 32, c.n_heads = 2, c.n_blocks = 2, c.seq_len = 16;
  } else if (base == "small") {
    c.d_model = 128, c.n_heads = 4, c.n_blocks = 6, c.seq_len = 64;
  } else if (base == "gpt2-124m") {
    c.d_model = 768, c.n_heads = 12, c.n_blocks = 12, c.seq_len = 1024;
  } else {
    throw ConfigError(
        fmt::format("unknown model '{}'; choose one of tiny, small, gpt2-124m, optionally with "
                    "':<blocks>' (model.name)",
                    name));
  }
  if (blocks_override > 0) c.n_blocks = blocks_override;
  return c;
}

int num_layers(const GptConfig& config) { return config.n_blocks + 2; }

shape::TransformerShape shape_of(const GptConfig& config) {
  auto s = shape::gpt2_shape(config.name, config.vocab_size, config.seq_len, config.d_model,
                             config.n_heads, config.n_blocks);
  s.tied_embeddings = config.tie_embeddings;
  s.validate();
  return s;
}

std::vector<TiedGroup> tied_groups(const GptConfig& config) {
  if (!config.tie_embeddings) return {};
  return {TiedGroup{"wte", {{0, "wte.weight"}, {num_layers(config) - 1, "lm_head.weight"}}}};
}

LayerKind layer_kind(const GptConfig& config, int layer_index) {
  BW_CHECK(layer_index >= 0 && layer_index < num_layers(config), "layer {} out of range [0, {})",
           layer_index, num_layers(config));
  if (layer_index == 0) return LayerKind::kEmbedding;
  if (layer_index == num_layers(config) - 1) return LayerKind::kHead;
  return LayerKind::kBlock;
}

std::shared_ptr<Layer> build_layer(const GptConfig& config, int layer_index, uint64_t seed) {
  BW_CHECK(config.d_model % config.n_heads == 0, "d_model {} not divisible by n_heads {}",
           config.d_model, config.n_heads);
  auto gen = at::detail::createCPUGenerator(mix_seed(seed, static_cast<uint64_t>(layer_index)));
  torch::NoGradGuard no_grad;
  switch (layer_kind(config, layer_index)) {
    case LayerKind::kEmbedding:
      return std::make_shared<EmbeddingLayer>(config, layer_index, gen);
    case LayerKind::kBlock:
      return std::make_shared<BlockLayer>(config, layer_index, gen);
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

std::vector<int64_t> output_shape(const GptConfig& config, int layer_index, int microbatch_size) {
  if (layer_kind(config, layer_index) == LayerKind::kHead) {
    return {microbatch_size, config.seq_len, config.vocab_size};
  }
  return {microbatch_size, config.seq_len, config.d_model};
}

int64_t num_parameters(const GptConfig& config, int layer_index) {
  const int64_t d = config.d_model, v = config.vocab_size;
  switch (layer_kind(config, layer_index)) {
    case LayerKind::kEmbedding:
      return v * d + int64_t{config.seq_len} * d;
    case LayerKind::kBlock:
      return 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) +
             (4 * d * d + d);
    case LayerKind::kHead:
      return 2 * d + v * d;
  }
  return 0;
}

}  // namespace bw::model
