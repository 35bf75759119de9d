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

#include "model/config.h"

namespace bw::model {

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


}  // namespace bw::model
