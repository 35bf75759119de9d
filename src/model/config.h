// A model's description, the pure part of model/ (no LibTorch): families, named sizes, the
// resolved fields, the flat layer list's shape (layer kinds, parameter counts, activation shapes)
// and the tied matrices. model/gpt.h builds the layers; model/hf_config.h reads and writes
// Hugging Face config.json. Parsers built without LibTorch (the fuzz targets) compile this file.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shape/shape.h"

namespace bw::model {

// Families (docs/models.md): "gpt" is breakwater's own GPT (GPT-2 layout, exact-erf GELU, untied
// head unless tie_embeddings); "gpt2" is exactly Hugging Face's GPT2LMHeadModel (tanh GELU, tied
// head, learned positions, LayerNorm eps 1e-5); "llama" is exactly LlamaForCausalLM (RMSNorm,
// RoPE with Llama 3 frequency scaling, SwiGLU, grouped-query attention, no biases, tied or not).
enum class Family { kGpt, kGpt2, kLlama };
const char* family_name(Family family);
// "gpt" | "gpt2" | "llama"; ConfigError naming model.family and the choices otherwise.
Family parse_family(const std::string& name);

// Llama 3's RoPE frequency scaling (Hugging Face rope_type "llama3"); off = plain RoPE.
struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
  bool operator==(const RopeScaling&) const = default;
};

struct GptConfig {
  std::string name;
  Family family = Family::kGpt;
  int vocab_size = 256;
  int seq_len = 16;  // tokens per sample in training
  int d_model = 32;
  int n_heads = 2;
  int n_blocks = 2;
  int n_kv_heads = 0;     // llama: key/value heads (GQA); 0 = n_heads
  int ffn_hidden = 0;     // llama: SwiGLU width; 0 = 4 d_model (gpt, gpt2)
  int max_positions = 0;  // gpt/gpt2: rows of the position table (>= seq_len); llama: the
                          // max_position_embeddings written on export; 0 = seq_len
  bool tie_embeddings = false;  // head and embedding share one matrix (two copies, see tied_groups)
  double norm_eps = 1e-5;       // LayerNorm (gpt, gpt2) or RMSNorm (llama) epsilon
  double rope_theta = 500000.0;  // llama
  RopeScaling rope;              // llama
  int64_t bos_token_id = -1;     // written to config.json on export; -1 = null
  int64_t eos_token_id = -1;
  std::string init_from;  // a Hugging Face model folder the initial weights come from; "" = seeded
};

// Resolved fields that default to others: n_kv_heads or n_heads, ffn_hidden or 4 d, max_positions
// or seq_len.
int kv_heads(const GptConfig& config);
int ffn_width(const GptConfig& config);
int position_rows(const GptConfig& config);  // learned position rows (0 for llama)

// A model that ties its embedding to its head keeps two copies of the matrix, one in layer 0 and
// one in the head layer, initialised bit-identically; the runtime sums their gradients every
// step so they stay equal. Each group names the copies of one matrix.
struct TiedParameter {
  int layer;
  std::string name;
};
struct TiedGroup {
  std::string name;
  std::vector<TiedParameter> members;
};
// {"wte", {{0, "wte.weight"}, {L-1, "lm_head.weight"}}} when config.tie_embeddings; else empty.
std::vector<TiedGroup> tied_groups(const GptConfig& config);

// Family "gpt": "tiny" (tests: d 32, 2 heads, 2 blocks, seq 16), "small" (demo: d 128, 4 heads,
// 4 blocks, seq 64), "gpt2-124m" (d 768, 12 heads, 12 blocks, seq 1024), all with the data's
// vocabulary. Other families: family_config. "<name>:<n>" takes those shapes with n blocks (e.g.
// "tiny:6", for pipelines with more chunks than tiny has layers). ConfigError for any other name
// or a vocab_size < 2.
GptConfig named_config(const std::string& name, int vocab_size);

// A named size of `family` (docs/models.md, "Sizes"): gpt2 tiny, small, 124m, 355m, 774m, 1.5b;
// llama tiny, tiny-tied, small, 3.2-1b, 3.2-3b, 3-8b; the gpt family as named_config. The test
// shapes (tiny, small) take `vocab_size` (the data's); the published sizes have their own
// vocabulary, which must be >= vocab_size. "<name>:<n>" as above.
GptConfig family_config(Family family, const std::string& name, int vocab_size);

// The model of a run: from `init_from`'s config.json when it is set (family and name must then be
// left at their defaults), else family_config(family, name, vocab_size); seq_len > 0 overrides
// the training sequence length (<= the model's positions). `vocab_size` is the data's: a model
// with a smaller vocabulary is a ConfigError.
GptConfig resolve_config(const std::string& family, const std::string& name, int seq_len,
                         const std::string& init_from, int vocab_size);

int num_layers(const GptConfig& config);

// The model's shape (shape/shape.h): parameter counts, FLOPs, activation and state bytes come
// from it (gpt is GPT-2-shaped).
shape::TransformerShape shape_of(const GptConfig& config);

enum class LayerKind { kEmbedding, kBlock, kHead };
LayerKind layer_kind(const GptConfig& config, int layer_index);

// Shape of the activation that flows out of layer i (and into layer i+1) for a microbatch of
// `microbatch_size` samples: [mb, T, d] for all but the last layer, [mb, T, vocab] for the last.
std::vector<int64_t> output_shape(const GptConfig& config, int layer_index, int microbatch_size);

// Number of scalar parameters of layer i (without building it).
int64_t num_parameters(const GptConfig& config, int layer_index);

}  // namespace bw::model
