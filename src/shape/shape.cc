#include "shape/shape.h"

#include <fmt/format.h>

#include <utility>

#include "core/check.h"
#include "core/error.h"

namespace bw::shape {

const char* family_name(Family family) { return family == Family::kGpt2 ? "gpt2" : "llama"; }

Family parse_family(const std::string& name) {
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  throw ConfigError(fmt::format("unknown model family '{}'; choose gpt2 or llama", name));
}

const char* precision_name(Precision precision) {
  return precision == Precision::kFp32 ? "fp32" : "bf16";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw ConfigError(fmt::format("unknown precision '{}'; choose fp32 or bf16", name));
}

void TransformerShape::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab", vocab},          {"seq_len", seq_len},       {"d_model", d_model},
      {"n_heads", n_heads},      {"n_kv_heads", n_kv_heads}, {"n_blocks", n_blocks},
      {"ffn_hidden", ffn_hidden}};
  for (const auto& [field, value] : sizes) {
    if (value < 1)
      throw ConfigError(fmt::format("model {}: {} must be >= 1, got {}", name, field, value));
  }
  if (d_model % n_heads != 0) {
    throw ConfigError(
        fmt::format("model {}: n_heads ({}) must divide d_model ({})", name, n_heads, d_model));
  }
  if (n_heads % n_kv_heads != 0) {
    throw ConfigError(fmt::format("model {}: n_kv_heads ({}) must divide n_heads ({})", name,
                                  n_kv_heads, n_heads));
  }
  if (family == Family::kGpt2 && norm != Norm::kLayerNorm)
    throw ConfigError(fmt::format("model {}: the gpt2 family uses LayerNorm", name));
  if (family == Family::kLlama && learned_positions) {
    throw ConfigError(
        fmt::format("model {}: the llama family uses RoPE, not learned positions", name));
  }
}

LayerKind TransformerShape::layer_kind(int layer) const {
  BW_CHECK(layer >= 0 && layer < num_layers(), "layer {} outside [0, {})", layer, num_layers());
  if (layer == 0) return LayerKind::kEmbedding;
  return layer <= n_blocks ? LayerKind::kBlock : LayerKind::kHead;
}

namespace {

int64_t norm_parameters(const TransformerShape& s) {
  return s.norm == Norm::kLayerNorm ? 2 * s.d_model : s.d_model;
}

// A linear map from `in` to `out` features, with its bias when the shape has biases.
int64_t linear(const TransformerShape& s, int64_t in, int64_t out) {
  return in * out + (s.biases ? out : 0);
}

int64_t block_parameters(const TransformerShape& s) {
  const int64_t d = s.d_model, f = s.ffn_hidden;
  const int64_t attention = linear(s, d, d + 2 * s.kv_dim()) + linear(s, d, d);
  const int64_t mlp = s.family == Family::kLlama ? 2 * linear(s, d, f) + linear(s, f, d)
                                                 : linear(s, d, f) + linear(s, f, d);
  return 2 * norm_parameters(s) + attention + mlp;
}

}  // namespace

int64_t TransformerShape::layer_parameters(int layer) const {
  switch (layer_kind(layer)) {
    case LayerKind::kEmbedding:
      return vocab * d_model + (learned_positions ? seq_len * d_model : 0);
    case LayerKind::kBlock:
      return block_parameters(*this);
    case LayerKind::kHead:
      return norm_parameters(*this) + vocab * d_model;  // the LM head has no bias in either family
  }
  return 0;
}

int64_t TransformerShape::held_parameters() const {
  int64_t total = 0;
  for (int l = 0; l < num_layers(); ++l) total += layer_parameters(l);
  return total;
}

int64_t TransformerShape::unique_parameters() const {
  return held_parameters() - (tied_embeddings ? vocab * d_model : 0);
}

int64_t TransformerShape::flop_parameters() const {
  // Sum over the layers of what each multiplies per token: the embedding's tables are lookups,
  // the head multiplies by its V x d matrix (the tied one or its own).
  return held_parameters() - layer_parameters(0);
}

double TransformerShape::layer_flops_per_token(int layer) const {
  switch (layer_kind(layer)) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:
      // 6 per parameter, and the score and value products Q K^T and P V: 2 x 2 H Q T forward,
      // twice that backward.
      return 6.0 * static_cast<double>(layer_parameters(layer)) +
             12.0 * static_cast<double>(n_heads * head_dim() * seq_len);
    case LayerKind::kHead:
      return 6.0 * static_cast<double>(layer_parameters(layer));
  }
  return 0;
}

double TransformerShape::flops_per_token() const {
  double total = 0;
  for (int l = 0; l < num_layers(); ++l) total += layer_flops_per_token(l);
  return total;
}

double TransformerShape::activation_bytes_per_sample(int layer, const ActivationOptions& o) const {
  const double e = activation_element_bytes(o.precision);
  const double s = static_cast<double>(seq_len), h = static_cast<double>(d_model);
  const double token_ids = 8 * s;
  const LayerKind kind = layer_kind(layer);
  if (o.recompute == Recompute::kFull) {
    if (kind == LayerKind::kEmbedding) return token_ids;
    return e * s * h + (kind == LayerKind::kHead ? token_ids : 0);
  }
  switch (kind) {
    case LayerKind::kEmbedding:
      return token_ids;
    case LayerKind::kHead:
      return e * s * 2 * h + 4 * s * static_cast<double>(vocab) + token_ids;
    case LayerKind::kBlock: {
      const double mlp_tensors = family == Family::kLlama ? 4 : 2;
      double bytes = e * s *
                     (6 * h + 2 * static_cast<double>(kv_dim()) +
                      mlp_tensors * static_cast<double>(ffn_hidden));
      const double scores = static_cast<double>(n_heads) * s * s;
      if (o.attention == Attention::kWrittenOut) bytes += e * scores;
      if (o.dropout) {
        bytes += 2 * s * h;  // one-byte masks of the two residual dropouts
        if (o.attention == Attention::kWrittenOut) bytes += (1 + e) * scores;
      }
      return bytes;
    }
  }
  return 0;
}

double TransformerShape::output_bytes_per_sample(int layer, Precision precision) const {
  if (layer_kind(layer) == LayerKind::kHead) return 0;
  return activation_element_bytes(precision) * static_cast<double>(seq_len * d_model);
}

TransformerShape gpt2_shape(std::string name, int64_t vocab, int64_t seq_len, int64_t d_model,
                            int64_t n_heads, int64_t n_blocks) {
  TransformerShape s;
  s.name = std::move(name);
  s.family = Family::kGpt2;
  s.vocab = vocab;
  s.seq_len = seq_len;
  s.d_model = d_model;
  s.n_heads = n_heads;
  s.n_kv_heads = n_heads;
  s.n_blocks = n_blocks;
  s.ffn_hidden = 4 * d_model;
  s.validate();
  return s;
}

TransformerShape llama_shape(std::string name, int64_t vocab, int64_t seq_len, int64_t d_model,
                             int64_t n_heads, int64_t n_kv_heads, int64_t n_blocks,
                             int64_t ffn_hidden, bool tied_embeddings) {
  TransformerShape s;
  s.name = std::move(name);
  s.family = Family::kLlama;
  s.vocab = vocab;
  s.seq_len = seq_len;
  s.d_model = d_model;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.n_blocks = n_blocks;
  s.ffn_hidden = ffn_hidden;
  s.tied_embeddings = tied_embeddings;
  s.learned_positions = false;
  s.biases = false;
  s.norm = Norm::kRmsNorm;
  s.validate();
  return s;
}

}  // namespace bw::shape
