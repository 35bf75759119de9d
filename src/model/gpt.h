// A GPT decoder (GPT-2 shapes) built as a flat list of layers, so that any contiguous range of
// layers can be a chunk on any device (docs/design.md "Runtime"; the layer split follows the usual
// pipeline-parallel practice of GPipe and Megatron: embedding, blocks, head).
//
// Layers, for num_layers(c) = c.n_blocks + 2:
//   0            token + position embedding: int64 tokens [mb, T] -> float [mb, T, d]
//   1..n_blocks  pre-LayerNorm block (causal self-attention, GELU MLP): [mb, T, d] -> [mb, T, d]
//   n_blocks+1   final LayerNorm + LM head: [mb, T, d] -> logits [mb, T, vocab]
//
// Tied embeddings (tie_embeddings): the head's LM head weight is the token embedding matrix. The
// model then keeps two copies of it, layer 0's "wte.weight" and the head's "lm_head.weight", so
// that the embedding and the head can sit on different devices (Megatron-LM's embedding group);
// both are initialised bit for bit identically (the head's copy is drawn from layer 0's
// generator) and tied_groups() names them. The runtime sums the copies' gradients every step
// before the optimizer (runtime/grad_sync.h), which keeps them bitwise equal.
//
// Invariants: a layer's initial weights depend only on (seed, layer index), so every device that
// builds layer i builds it bit for bit identically; there is no dropout and no other randomness in
// forward, so a layer is a deterministic function of its input and parameters. Parameter names
// are stable ("ln1.weight", "attn.qkv.weight", ...) and a checkpoint stores layer i's parameter p
// as "layers.{i}.{p}".
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

struct GptConfig {
  std::string name;
  int vocab_size = 256;
  int seq_len = 16;
  int d_model = 32;
  int n_heads = 2;
  int n_blocks = 2;
  // The LM head uses the token embedding matrix (two copies, see above); false: its own matrix.
  bool tie_embeddings = false;
};

// Parameters that are one matrix of the model held as copies in several layers.
struct TiedParameter {
  int layer = 0;
  std::string name;  // as in Layer::parameter_list()
};
struct TiedGroup {
  std::string name;                    // e.g. "wte"
  std::vector<TiedParameter> members;  // in layer order; members[0] is the primary copy
};

// The tied groups of the model: none when untied, else {"wte", [(0, "wte.weight"),
// (n_blocks + 1, "lm_head.weight")]}. The runtime's only source of ties (gradient sum, norm,
// checkpoints).
std::vector<TiedGroup> tied_groups(const GptConfig& config);

// "tiny" (tests: d 32, 2 heads, 2 blocks, seq 16), "small" (demo: d 128, 4 heads, 4 blocks,
// seq 64), "gpt2-124m" (d 768, 12 heads, 12 blocks, seq 1024); "<name>:<n>" takes those shapes
// with n blocks (e.g. "tiny:6", for pipelines with more chunks than tiny has layers). ConfigError
// for any other name or a vocab_size < 2.
GptConfig named_config(const std::string& name, int vocab_size);

// n_blocks + 2.
int num_layers(const GptConfig& config);

// The model's shape (shape/shape.h): parameter counts, FLOPs, activation and state bytes come
// from it. Today's GPT is GPT-2-shaped; its head is tied when config.tie_embeddings.
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
// (GPT-2), biases 0, LayerNorm weight 1 and bias 0; a tied head's copy of the embedding matrix
// from layer 0's generator (equal to layer 0's "wte.weight"). Parameters are float32 on the CPU.
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
