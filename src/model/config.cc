#include "model/config.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "model/hf_config.h"

namespace bw::model {

const char* family_name(Family family) {
  switch (family) {
    case Family::kGpt:
      return "gpt";
    case Family::kGpt2:
      return "gpt2";
    case Family::kLlama:
      return "llama";
  }
  return "?";
}

Family parse_family(const std::string& name) {
  if (name == "gpt") return Family::kGpt;
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  throw ConfigError(
      fmt::format("unknown model.family '{}'; choose gpt, gpt2 or llama (docs/models.md)", name));
}

int kv_heads(const GptConfig& c) { return c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads; }
int ffn_width(const GptConfig& c) { return c.ffn_hidden > 0 ? c.ffn_hidden : 4 * c.d_model; }
int position_rows(const GptConfig& c) {
  if (c.family == Family::kLlama) return 0;
  return c.max_positions > 0 ? c.max_positions : c.seq_len;
}

std::vector<TiedGroup> tied_groups(const GptConfig& config) {
  if (!config.tie_embeddings) return {};
  return {{"wte", {{0, "wte.weight"}, {num_layers(config) - 1, "lm_head.weight"}}}};
}

namespace {

// "<base>:<n_blocks>" keeps the base shapes with another block count (pipeline tests need more
// layers than chunks); returns the base and the count (0 = none).
std::pair<std::string, int> split_blocks(const std::string& name) {
  auto colon = name.find(':');
  if (colon == std::string::npos) return {name, 0};
  const std::string count = name.substr(colon + 1);
  if (count.empty() || count.size() > 4 ||
      count.find_first_not_of("0123456789") != std::string::npos || std::stoi(count) < 1) {
    throw ConfigError(fmt::format(
        "model '{}': the block count after ':' must be a positive integer, e.g. tiny:6", name));
  }
  return {name.substr(0, colon), std::stoi(count)};
}

void require_vocab(int vocab_size) {
  if (vocab_size < 2) {
    throw ConfigError(fmt::format("model vocab_size must be >= 2, got {}", vocab_size));
  }
}

// A published size's vocabulary must hold every token id of the data.
void set_vocab(GptConfig& c, int own_vocab, int data_vocab) {
  if (own_vocab < data_vocab) {
    throw ConfigError(fmt::format(
        "model '{}' has a vocabulary of {} but the data's is {}; tokenize the data for this "
        "model or choose a test size (tiny, small)",
        c.name, own_vocab, data_vocab));
  }
  c.vocab_size = own_vocab;
}

GptConfig gpt2_size(const std::string& base, const std::string& name, int vocab_size) {
  GptConfig c;
  c.name = name;
  c.family = Family::kGpt2;
  c.vocab_size = vocab_size;
  c.tie_embeddings = true;
  c.norm_eps = 1e-5;
  struct Size {
    const char* name;
    int d, heads, blocks;
  };
  constexpr Size kPublished[] = {
      {"124m", 768, 12, 12}, {"355m", 1024, 16, 24}, {"774m", 1280, 20, 36}, {"1.5b", 1600, 25, 48}};
  if (base == "tiny") {
    c.d_model = 32, c.n_heads = 2, c.n_blocks = 2, c.seq_len = 16;
    return c;
  }
  if (base == "small") {
    c.d_model = 128, c.n_heads = 4, c.n_blocks = 6, c.seq_len = 64;
    return c;
  }
  for (const auto& s : kPublished) {
    if (base == s.name) {
      c.d_model = s.d, c.n_heads = s.heads, c.n_blocks = s.blocks, c.seq_len = 1024;
      c.bos_token_id = c.eos_token_id = 50256;
      set_vocab(c, 50257, vocab_size);
      return c;
    }
  }
  throw ConfigError(fmt::format(
      "unknown gpt2 size '{}'; choose one of tiny, small, 124m, 355m, 774m, 1.5b, optionally "
      "with ':<blocks>' (model.name)",
      name));
}

GptConfig llama_size(const std::string& base, const std::string& name, int vocab_size) {
  GptConfig c;
  c.name = name;
  c.family = Family::kLlama;
  c.vocab_size = vocab_size;
  c.rope_theta = 500000.0;
  c.rope = {true, 32.0, 1.0, 4.0, 8192};  // Llama 3.2's
  c.norm_eps = 1e-5;
  if (base == "tiny" || base == "tiny-tied") {
    c.d_model = 32, c.n_heads = 4, c.n_kv_heads = 2, c.n_blocks = 2, c.ffn_hidden = 64;
    c.seq_len = 16;
    c.tie_embeddings = base == "tiny-tied";
    return c;
  }
  if (base == "small") {
    c.d_model = 128, c.n_heads = 4, c.n_kv_heads = 2, c.n_blocks = 4, c.ffn_hidden = 352;
    c.seq_len = 64;
    return c;
  }
  c.seq_len = 2048;
  c.n_kv_heads = 8;
  c.bos_token_id = 128000;
  c.eos_token_id = 128001;
  if (base == "3.2-1b") {
    c.d_model = 2048, c.n_heads = 32, c.n_blocks = 16, c.ffn_hidden = 8192;
    c.tie_embeddings = true, c.max_positions = 131072;
  } else if (base == "3.2-3b") {
    c.d_model = 3072, c.n_heads = 24, c.n_blocks = 28, c.ffn_hidden = 8192;
    c.tie_embeddings = true, c.max_positions = 131072;
  } else if (base == "3-8b") {
    c.d_model = 4096, c.n_heads = 32, c.n_blocks = 32, c.ffn_hidden = 14336;
    c.rope = {};  // Llama 3 (not 3.1) has no frequency scaling
    c.max_positions = 8192;
  } else {
    throw ConfigError(fmt::format(
        "unknown llama size '{}'; choose one of tiny, tiny-tied, small, 3.2-1b, 3.2-3b, 3-8b, "
        "optionally with ':<blocks>' (model.name)",
        name));
  }
  set_vocab(c, 128256, vocab_size);
  return c;
}

}  // namespace

GptConfig family_config(Family family, const std::string& name, int vocab_size) {
  require_vocab(vocab_size);
  if (family == Family::kGpt) return named_config(name, vocab_size);
  auto [base, blocks] = split_blocks(name);
  GptConfig c = family == Family::kGpt2 ? gpt2_size(base, name, vocab_size)
                                        : llama_size(base, name, vocab_size);
  if (blocks > 0) c.n_blocks = blocks;
  return c;
}

GptConfig resolve_config(const std::string& family, const std::string& name, int seq_len,
                         const std::string& init_from, int vocab_size) {
  require_vocab(vocab_size);
  GptConfig c;
  if (!init_from.empty()) {
    c = hf_config_from_dir(init_from);
    if (family != "gpt" && parse_family(family) != c.family) {
      throw ConfigError(fmt::format(
          "model.family = \"{}\" but {}/config.json is a {} model; leave model.family unset "
          "with model.init_from",
          family, init_from, family_name(c.family)));
    }
    if (c.vocab_size < vocab_size) {
      throw ConfigError(fmt::format(
          "{}/config.json: vocab_size {} is smaller than the data's vocabulary ({}); tokenize the "
          "data with this model's tokenizer",
          init_from, c.vocab_size, vocab_size));
    }
  } else {
    c = family_config(parse_family(family), name, vocab_size);
  }
  if (seq_len > 0) {
    const int limit = c.family == Family::kLlama ? (c.max_positions > 0 ? c.max_positions : seq_len)
                                                 : position_rows(c);
    if (seq_len > limit) {
      throw ConfigError(fmt::format(
          "model.seq_len = {} exceeds the model's {} positions; lower model.seq_len", seq_len,
          limit));
    }
    if (c.family != Family::kLlama && c.max_positions == 0) c.max_positions = c.seq_len;
    c.seq_len = seq_len;
  }
  return c;
}

GptConfig named_config(const std::string& name, int vocab_size) {
  require_vocab(vocab_size);
  auto [base, blocks_override] = split_blocks(name);
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
                    "':<blocks>' (model.name), or set model.family (docs/models.md)",
                    name));
  }
  if (blocks_override > 0) c.n_blocks = blocks_override;
  return c;
}

int num_layers(const GptConfig& config) { return config.n_blocks + 2; }

shape::TransformerShape shape_of(const GptConfig& config) {
  // The shape counts learned positions at seq_len rows; a gpt2 model trained on fewer tokens
  // than its table holds (model.seq_len) holds (max_positions - seq_len) d more.
  if (config.family == Family::kLlama) {
    return shape::llama_shape(config.name, config.vocab_size, config.seq_len, config.d_model,
                              config.n_heads, kv_heads(config), config.n_blocks, ffn_width(config),
                              config.tie_embeddings);
  }
  auto s = shape::gpt2_shape(config.name, config.vocab_size, config.seq_len, config.d_model,
                             config.n_heads, config.n_blocks);
  s.tied_embeddings = config.tie_embeddings;
  s.validate();
  return s;
}

LayerKind layer_kind(const GptConfig& config, int layer_index) {
  BW_CHECK(layer_index >= 0 && layer_index < num_layers(config), "layer {} out of range [0, {})",
           layer_index, num_layers(config));
  if (layer_index == 0) return LayerKind::kEmbedding;
  if (layer_index == num_layers(config) - 1) return LayerKind::kHead;
  return LayerKind::kBlock;
}

std::vector<int64_t> output_shape(const GptConfig& config, int layer_index, int microbatch_size) {
  if (layer_kind(config, layer_index) == LayerKind::kHead) {
    return {microbatch_size, config.seq_len, config.vocab_size};
  }
  return {microbatch_size, config.seq_len, config.d_model};
}

int64_t num_parameters(const GptConfig& config, int layer_index) {
  const int64_t d = config.d_model, v = config.vocab_size;
  const bool llama = config.family == Family::kLlama;
  switch (layer_kind(config, layer_index)) {
    case LayerKind::kEmbedding:
      return v * d + int64_t{position_rows(config)} * d;
    case LayerKind::kBlock:
      if (llama) {
        const int64_t kv = int64_t{kv_heads(config)} * (d / config.n_heads), f = ffn_width(config);
        return 2 * d + 2 * d * d + 2 * kv * d + 3 * f * d;
      }
      return 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) +
             (4 * d * d + d);
    case LayerKind::kHead:
      return (llama ? d : 2 * d) + v * d;
  }
  return 0;
}

}  // namespace bw::model
