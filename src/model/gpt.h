// A decoder-only transformer of one of three families (gpt, gpt2, llama) built as a flat list of
// layers, so that any contiguous range of layers can be a chunk on any device (docs/design.md
// "Runtime", docs/models.md; the layer split follows the usual pipeline-parallel practice of
// GPipe and Megatron: embedding, blocks, head).
//
// Layers, for num_layers(c) = c.n_blocks + 2:
//   0            token embedding (+ learned positions for gpt, gpt2): int64 [mb, T] -> [mb, T, d]
//   1..n_blocks  pre-norm block: causal self-attention (RoPE and GQA for llama) and MLP (GELU;
//                SwiGLU for llama): [mb, T, d] -> [mb, T, d]
//   n_blocks+1   final norm + LM head (a copy of the embedding when tied): -> logits [mb, T, V]
//
// Invariants: a layer's initial weights depend only on (seed, layer index), so every device that
// builds layer i builds it bit for bit identically (a tied head's copy is drawn from layer 0's
// generator, so it equals the embedding); there is no dropout and no other randomness in forward,
// so a layer is a deterministic function of its input and parameters. Parameter names are stable
// ("ln1.weight", "attn.qkv.weight", ...; docs/models.md has the table and the Hugging Face names)
// and a checkpoint stores layer i's parameter p as "layers.{i}.{p}".
//
// Thread-safety: a Layer is a torch::nn::Module; use one from one thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

// One layer of the flat model. forward() takes and returns one tensor (see the table above).
class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  int index() const { return index_; }
  // Parameters in registration order with their dotted names.
  const std::vector<std::pair<std::string, torch::Tensor>>& parameter_list() const {
    return params_;
  }

 protected:
  explicit Layer(int index) : index_(index) {}
  // Registers `value` as parameter `name` (dots allowed) and returns the registered tensor.
  torch::Tensor add_parameter(const std::string& name, torch::Tensor value);

 private:
  int index_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
};

// Builds layer `layer_index` with weights drawn from a generator seeded by (seed, layer_index):
// linear and embedding weights N(0, 0.02), residual output projections N(0, 0.02/sqrt(2*n_blocks))
// (GPT-2; llama draws them N(0, 0.02) as Hugging Face does), biases 0, norm weights 1 and biases
// 0. Parameters are float32 on the CPU. config.init_from is not read here (runtime/hf.h loads a
// Hugging Face folder's weights over these).
std::shared_ptr<Layer> build_layer(const GptConfig& config, int layer_index, uint64_t seed);

// Mean cross-entropy over all tokens: logits [mb, T, V], targets int64 [mb, T].
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

// The layer's parameters in a fixed order with their names ("ln1.weight", ...).
std::vector<std::pair<std::string, torch::Tensor>> named_parameters(const Layer& layer);

// Shape of the activation that flows out of layer i (and into layer i+1) for a microbatch of
// `microbatch_size` samples: [mb, T, d] for all but the last layer, [mb, T, vocab] for the last.
std::vector<int64_t> output_shape(const GptConfig& config, int layer_index, int microbatch_size);

// Number of scalar parameters of layer i (without building it).
int64_t num_parameters(const GptConfig& config, int layer_index);

}  // namespace bw::model
