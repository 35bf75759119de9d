// The checkpoint formats' parsers, without LibTorch (checkpoint.h has the layouts): the
// safetensors header, checked against the file's size before any tensor is allocated, and the
// JSON sidecar. checkpoint.cc reads and writes the files with them; the fuzz targets (fuzz/,
// docs/fuzzing.md) feed them arbitrary bytes. Every problem is a ConfigError naming the file.
//
// Thread-safety: plain values; the functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bw::runtime {

// Size and CRC-32C of a whole file.
struct FileDigest {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const FileDigest&) const = default;
};

// The metadata key holding the CRC-32C of the data buffer (reserved: save_safetensors sets it).
inline constexpr const char* kDataCrcKey = "crc32c";
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;  // the reference's limit

// One tensor of a safetensors file: its dtype ("F32"), element size, shape and data bytes
// [begin, end) relative to the data buffer.
struct SafetensorsSpan {
  std::string name;
  std::string dtype;
  int64_t elem_bytes = 0;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
};

struct SafetensorsLayout {
  std::vector<SafetensorsSpan> spans;  // in file order, tiling the data buffer exactly
  std::map<std::string, std::string> metadata;
};

// Bytes of one element of a safetensors dtype ("F32" -> 4); 0 for a dtype this build does not
// read.
int64_t safetensors_dtype_bytes(const std::string& dtype);

// The header length N from the file's first 8 bytes (little-endian); ConfigError unless
// N <= kMaxSafetensorsHeaderBytes and 8 + N <= file_bytes.
uint64_t safetensors_header_length(const unsigned char len[8], int64_t file_bytes,
                                   const std::string& path);

// The tensors of a header (the N bytes after the length) whose data buffer holds `data_bytes`:
// every entry has a known dtype, a shape whose size does not overflow and data_offsets of
// exactly its size; the spans tile the buffer with no hole or overlap; metadata values are
// strings.
SafetensorsLayout parse_safetensors_header(std::string_view text, int64_t data_bytes,
                                           const std::string& path);

[[noreturn]] void safetensors_corrupt(const std::string& path, const std::string& what);

// One shard of a sharded checkpoint (version 3): the two files one worker wrote, relative to the
// sidecar, the layers whose tensors they hold, and the host that wrote them.
struct ShardFiles {
  int shard = 0;
  std::vector<int> layers;
  std::string host;
  std::string model;      // safetensors of its parameters
  std::string optimizer;  // safetensors of its optimizer state
  bool operator==(const ShardFiles&) const = default;
};

struct CheckpointInfo {
  int64_t step = 0;         // steps completed: the run resumes at this step
  int64_t next_sample = 0;  // first global sample of the next step (the data position)
  std::string weights;      // safetensors file of the parameters, relative to the sidecar
  std::string optimizer;    // safetensors file of the optimizer state, relative to the sidecar
  std::string config_toml;  // the resolved run config (to_toml)
  nlohmann::json extra = nlohmann::json::object();  // anything else (generation, plan, ...)
  // Digest of each tensor file, by its name as stored in `weights` / `optimizer` (version 2;
  // empty when read from a version-1 sidecar, whose files load unverified).
  std::map<std::string, FileDigest> files;
  // Version 3, the manifest of a sharded checkpoint: every shard's files (each with its digest
  // in `files`); `weights` and `optimizer` are then empty. Empty for versions 1 and 2.
  std::vector<ShardFiles> shards;
  bool operator==(const CheckpointInfo&) const = default;
};

// A sidecar document (checkpoint.h, write_sidecar); `where` names it in messages.
CheckpointInfo parse_sidecar(const nlohmann::json& doc, const std::string& where);

}  // namespace bw::runtime
