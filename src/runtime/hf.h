// Hugging Face model folders, the weights (docs/models.md, "Hugging Face"): reading
// model.safetensors (or the shards a model.safetensors.index.json names) into breakwater's
// layers, and writing a breakwater model as a folder transformers loads
// (AutoModelForCausalLM.from_pretrained). The config.json side and the name map are in
// model/hf_config.h.
//
// Reading checks the whole folder against config.json before any layer uses it: every tensor the
// model needs is present, no other tensor is (GPT-2's old non-persistent attention masks,
// "*.attn.bias" and "*.attn.masked_bias", are the one exception: transformers ignores them too),
// every shape is what config.json implies, every dtype is F32, BF16 or F16 (converted to fp32,
// breakwater's master precision), and every file the index names exists. Each failure is one
// ConfigError naming the file and the tensor or field. A tied model's stored matrix fills both
// copies (the embedding and the head's); a stored lm_head.weight of a tied model must equal it.
//
// Thread-safety: hf_weights caches one folder per process behind a mutex; the rest is pure I/O.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "model/gpt.h"
#include "runtime/checkpoint.h"

namespace bw::runtime {

// Every breakwater parameter of the model, by (layer, name), fp32 on the CPU.
using HfWeights = std::map<std::pair<int, std::string>, torch::Tensor>;

// Reads and checks config.init_from's weights (see the top comment).
HfWeights read_hf_weights(const model::GptConfig& config);
// The same, read once per process and folder (workers build their layers from it).
std::shared_ptr<const HfWeights> hf_weights(const model::GptConfig& config);

// model::build_layer, then the weights of config.init_from when it is set: the initial layer.
std::shared_ptr<model::Layer> initial_layer(const model::GptConfig& config, int layer,
                                            uint64_t seed);

struct HfExportOptions {
  torch::ScalarType dtype = torch::kFloat32;  // or kBFloat16
  int64_t shard_bytes = int64_t{5} << 30;     // above this, sharded files and an index
  std::string tokenizer_json;                 // copied to OUT/tokenizer.json when not empty
};
// Writes config.json, generation_config.json and model.safetensors (or model-0000i-of-0000n
// shards with model.safetensors.index.json) into `out_dir` (created) from `weights` (every
// parameter of the model, as read_hf_weights returns them). ConfigError for the gpt family.
void write_hf_folder(const std::string& out_dir, const model::GptConfig& config,
                     const HfWeights& weights, const HfExportOptions& options);

}  // namespace bw::runtime
