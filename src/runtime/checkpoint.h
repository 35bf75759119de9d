// Checkpoint files: safetensors (https://github.com/huggingface/safetensors, format section)
// for tensors, and a JSON sidecar for everything else a resume needs (step, data position,
// config, which files hold the weights and the optimizer state). The runtime decides what to
// save (weights as "layers.{i}.{param}", optimizer state as "layers.{i}.{param}.exp_avg", ...)
// and drives resume; this file only reads and writes the formats.
//
// Safetensors layout, byte-exact so PyTorch users can load the weights:
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    UTF-8 JSON: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//              "data_offsets": [begin, end]}, ...}, padded with spaces so 8 + N is a multiple
//              of 8 (every tensor's data then starts 8-byte aligned in the file)
//   the rest   raw little-endian C-order tensor data; offsets are relative to the start of this
//              buffer and tile it exactly (no holes, no overlaps), largest dtype first, then by
//              name, as the reference implementation writes them
// The reader checks all of this and reports a truncated or corrupt file as a ConfigError naming
// the file and the numbers. Writes go to a temporary file renamed into place, so a crash never
// leaves a half-written checkpoint under the final name.
//
// Thread-safety: the functions are independent; concurrent writes to one path are not supported.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace bw::runtime {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// "layers.{layer}.{param}": the checkpoint name of a layer's parameter.
std::string checkpoint_tensor_name(int layer, const std::string& param);

// "F32", "I64", ... for the dtypes safetensors defines; ConfigError for others.
std::string safetensors_dtype(torch::ScalarType type);

// Writes `tensors` (any device, any strides; names unique and non-empty) with string metadata.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, torch::Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;
};
SafetensorsFile load_safetensors(const std::string& path);

struct CheckpointInfo {
  int64_t step = 0;         // steps completed: the run resumes at this step
  int64_t next_sample = 0;  // first global sample of the next step (the data position)
  std::string weights;      // safetensors file of the parameters, relative to the sidecar
  std::string optimizer;    // safetensors file of the optimizer state, relative to the sidecar
  std::string config_toml;  // the resolved run config (to_toml)
  nlohmann::json extra = nlohmann::json::object();  // anything else (generation, plan, ...)
  bool operator==(const CheckpointInfo&) const = default;
};

// The sidecar is {"format": "breakwater-checkpoint", "version": 1, "step", "next_sample",
// "weights", "optimizer", "config", "extra"}; reading checks format and version.
void write_sidecar(const std::string& path, const CheckpointInfo& info);
CheckpointInfo read_sidecar(const std::string& path);
// Path of `file` (as stored in a sidecar) relative to the sidecar's directory.
std::string beside(const std::string& sidecar_path, const std::string& file);

}  // namespace bw::runtime
