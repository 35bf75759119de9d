// Hugging Face model folders, the weights (docs/models.md, "Hugging Face"): reading
// model.safetensors (or the shards a model.safetensors.index.json names) into breakwater's
// layers, and writing a breakwater model as a folder transformers loads
// (AutoModelForCausalLM.from_pretrained). The config.json side and the name map are in
// model/hf_config.h.
//
// Opening a folder (HfFolder) maps its files (runtime/safetensors_map.h) and checks the whole
// folder against config.json before any layer uses it, from the headers: every tensor the model
// needs is present, no other tensor is (GPT-2's old non-persistent attention masks,
// "*.attn.bias" and "*.attn.masked_bias", are the one exception: transformers ignores them too),
// every shape is what config.json implies, every dtype is F32, BF16 or F16 (converted to fp32,
// breakwater's master precision), and every file the index names exists; a file that records its
// data's CRC-32C (breakwater's exports do) is read once to check it. Each failure is one
// ConfigError naming the file and the tensor or field. A tied model's stored matrix fills both
// copies (the embedding and the head's); a stored lm_head.weight of a tied model must equal it.
//
// Memory: a layer's parameters are copied once, straight from the mapped file (converted and
// transposed on the way), and the file's pages are dropped from the process after each tensor,
// so building every layer of a model peaks at about the model's fp32 bytes, not twice that.
//
// Thread-safety: an HfFolder is immutable once opened (copy_into may run on several threads);
// hf_folder caches one folder per process behind a mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "model/gpt.h"
#include "runtime/checkpoint.h"

namespace bw::runtime {

// Every breakwater parameter of the model, by (layer, name), fp32 on the CPU.
using HfWeights = std::map<std::pair<int, std::string>, at::Tensor>;

class MappedSafetensors;
struct SafetensorsSpan;

// config.init_from, opened and checked (see the top comment); no weight is read yet.
class HfFolder {
 public:
  explicit HfFolder(const model::GptConfig& config);
  ~HfFolder();
  HfFolder(const HfFolder&) = delete;
  HfFolder& operator=(const HfFolder&) = delete;

  // Copies the weight of breakwater parameter `name` of layer `layer` into `dst` (its shape,
  // any floating dtype and device), then drops the file's pages of it from the process.
  void copy_into(int layer, const std::string& name, at::Tensor dst) const;
  // What the folder holds, for comparing copies on different hosts: config.json's and every
  // weight file's size and CRC-32C (reads every file once, as above; ConfigError when a file's
  // recorded CRC-32C does not match).
  std::string content_digest() const;

 private:
  struct Entry {
    const MappedSafetensors* file;
    const SafetensorsSpan* span;
    bool transposed;
  };
  std::string dir_;
  std::vector<std::unique_ptr<MappedSafetensors>> files_;
  std::map<std::pair<int, std::string>, Entry> entries_;
};

// config.init_from, opened once per process and folder (workers build their layers from it; the
// coordinator opens it to check it before any worker starts).
std::shared_ptr<const HfFolder> hf_folder(const model::GptConfig& config);

// Every weight of config.init_from, checked and read into fresh fp32 tensors (export, tests).
HfWeights read_hf_weights(const model::GptConfig& config);

// model::build_layer, then the weights of config.init_from when it is set: the initial layer.
std::shared_ptr<model::Layer> initial_layer(const model::GptConfig& config, int layer,
                                            uint64_t seed);

struct HfExportOptions {
  at::ScalarType dtype = at::kFloat;  // or kBFloat16
  int64_t shard_bytes = int64_t{5} << 30;     // above this, sharded files and an index
  std::string tokenizer_json;                 // copied to OUT/tokenizer.json when not empty
};
// Writes config.json, generation_config.json and model.safetensors (or model-0000i-of-0000n
// shards with model.safetensors.index.json) into `out_dir` (created) from `weights` (every
// parameter of the model, as read_hf_weights returns them). ConfigError for the gpt family.
void write_hf_folder(const std::string& out_dir, const model::GptConfig& config,
                     const HfWeights& weights, const HfExportOptions& options);

}  // namespace bw::runtime
