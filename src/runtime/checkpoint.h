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
// The reader checks all of this before allocating any tensor (a file must be a regular file;
// shapes and offsets are checked with overflow-safe arithmetic against the file size) and
// reports a truncated or corrupt file as a ConfigError naming the file and the numbers.
//
// Integrity: save_safetensors stores the CRC-32C of the data buffer in the header metadata
// ("crc32c", 8 hex digits) and returns the CRC-32C and size of the whole file; the reader checks
// the data CRC when the key is present (files from other writers load unchecked) and returns the
// whole-file CRC, which checkpoint sidecars record per file (version 2) and load_checkpoint
// compares. Writes go to `path.tmp`, are fsynced (unless sync = false) and renamed into place, so
// a crash never leaves a half-written file under the final name; a failed write removes the .tmp.
//
// Thread-safety: the functions are independent; concurrent writes to one path are not supported.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/checkpoint_format.h"

namespace bw::runtime {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// "layers.{layer}.{param}": the checkpoint name of a layer's parameter.
std::string checkpoint_tensor_name(int layer, const std::string& param);

// "F32", "I64", ... for the dtypes safetensors defines; ConfigError for others.
std::string safetensors_dtype(at::ScalarType type);

// Writes `tensors` (any device, any strides; names unique and non-empty) with string metadata;
// with `sync`, fsyncs the file and its directory before returning. Returns the file's digest.
FileDigest save_safetensors(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata = {},
                            bool sync = true);

struct SafetensorsFile {
  std::map<std::string, at::Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;
  FileDigest digest;  // of the whole file as read
};
SafetensorsFile load_safetensors(const std::string& path);

// The same format in memory, for shards and resume state that travel over the network instead
// of a shared filesystem: encode returns exactly the bytes save_safetensors would write (and
// their digest in `*digest`); decode runs every check of load_safetensors on `bytes`, with
// `name` standing for the path in messages.
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {},
                               FileDigest* digest = nullptr);
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name);

// The sidecar is {"format": "breakwater-checkpoint", "version": 2, "step", "next_sample",
// "weights", "optimizer", "config", "extra", "files": {name: {"bytes", "crc32c"}}}; reading
// checks format and version (1 and 2 are read; version 1 has no "files"). Written durably
// (tmp, fsync, rename, fsync of the directory).
void write_sidecar(const std::string& path, const CheckpointInfo& info);
// The sidecar's document, as write_sidecar writes it (parse_sidecar reads it back).
nlohmann::json sidecar_json(const CheckpointInfo& info);
CheckpointInfo read_sidecar(const std::string& path);
// Path of `file` (as stored in a sidecar) relative to the sidecar's directory.
std::string beside(const std::string& sidecar_path, const std::string& file);

}  // namespace bw::runtime
