// Safetensors reader/writer and checkpoint sidecars (see checkpoint.h).
#include "runtime/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <istream>
#include <streambuf>
#include <limits>
#include <set>
#include <torch/torch.h>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "runtime/fault_points.h"
#include "runtime/safetensors_map.h"

namespace bw::runtime {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts need byte swapping");

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  int64_t bytes;
};

const std::vector<DtypeInfo>& dtypes() {
  static const std::vector<DtypeInfo> d = {
      {"F64", torch::kFloat64, 8},   {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
      {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
      {"I16", torch::kInt16, 2},     {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
      {"BOOL", torch::kBool, 1}};
  return d;
}

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : dtypes()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  safetensors_corrupt(path, what);
}

// Writes through `path.tmp` renamed into place at the end; the .tmp is removed if anything
// fails. `body` writes through the FileWriter; the caller knows the file's digest.
template <class Fn>
void write_atomically(const std::string& path, bool sync, Fn&& body) {
  const std::string tmp = path + ".tmp";
  try {
    io::FileWriter out(tmp, "checkpoint file");
    fault_point("file:opened");
    body(out);
    fault_point("file:written");
    if (sync) out.sync();
    out.close();
    fault_point("file:synced");
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw ConfigError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
  }
  if (sync) io::sync_directory(fs::path(path).parent_path().string());
  fault_point("file:renamed");
}

}  // namespace

std::string checkpoint_tensor_name(int layer, const std::string& param) {
  return fmt::format("layers.{}.{}", layer, param);
}

std::string safetensors_dtype(torch::ScalarType type) {
  for (const auto& d : dtypes()) {
    if (d.type == type) return d.name;
  }
  throw ConfigError(fmt::format("dtype {} has no safetensors equivalent", c10::toString(type)));
}

torch::ScalarType safetensors_scalar_type(const std::string& dtype) {
  const DtypeInfo* d = find_dtype(dtype);
  BW_CHECK(d != nullptr, "safetensors dtype '{}' has no scalar type", dtype);
  return d->type;
}

namespace {

// A safetensors image ready to be written: the length prefix, the padded header and the tensors
// in file order (CPU, contiguous), with the data buffer's CRC-32C.
struct Image {
  struct Entry {
    std::string name;
    torch::Tensor data;
    int64_t elem_bytes;
  };
  std::vector<Entry> entries;
  unsigned char len[8];
  std::string text;
  int64_t data_bytes = 0;
  uint32_t data_crc = 0;
  FileDigest digest() const {
    // The whole file's CRC from its parts: no second pass over the data.
    const uint32_t head_crc = crc32c_extend(crc32c(len, 8), text.data(), text.size());
    return {static_cast<int64_t>(8 + text.size()) + data_bytes,
            crc32c_combine(head_crc, data_crc, static_cast<size_t>(data_bytes))};
  }
};

Image make_image(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  Image image;
  auto& entries = image.entries;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    BW_CHECK(!name.empty() && name != "__metadata__", "invalid tensor name '{}'", name);
    BW_CHECK(seen.insert(name).second, "duplicate tensor name '{}'", name);
    BW_CHECK(t.defined(), "tensor '{}' is undefined", name);
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    entries.push_back({name, c, static_cast<int64_t>(c.element_size())});
    safetensors_dtype(c.scalar_type());  // throws for an unsupported dtype
  }
  std::sort(entries.begin(), entries.end(), [](const Image::Entry& a, const Image::Entry& b) {
    return a.elem_bytes != b.elem_bytes ? a.elem_bytes > b.elem_bytes : a.name < b.name;
  });
  Json header = Json::object();
  int64_t offset = 0;
  uint32_t data_crc = 0;
  for (const auto& e : entries) {
    int64_t bytes = e.data.numel() * e.elem_bytes;
    header[e.name] = {{"dtype", safetensors_dtype(e.data.scalar_type())},
                      {"shape", e.data.sizes().vec()},
                      {"data_offsets", {offset, offset + bytes}}};
    data_crc = crc32c_extend(data_crc, e.data.data_ptr(), static_cast<size_t>(bytes));
    offset += bytes;
  }
  auto meta = metadata;
  meta[kDataCrcKey] = crc32c_hex(data_crc);
  header["__metadata__"] = meta;
  image.text = header.dump();
  image.text.append((8 - image.text.size() % 8) % 8, ' ');
  uint64_t n = image.text.size();
  for (int i = 0; i < 8; ++i) image.len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  image.data_bytes = offset;
  image.data_crc = data_crc;
  return image;
}

// A read-only std::streambuf over bytes in memory (decode_safetensors).
class MemoryBuffer : public std::streambuf {
 public:
  explicit MemoryBuffer(std::string_view bytes) {
    char* p = const_cast<char*>(bytes.data());
    setg(p, p, p + bytes.size());
  }
};

SafetensorsFile read_safetensors(std::istream& in, int64_t file_bytes, const std::string& path);

}  // namespace

FileDigest save_safetensors(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata, bool sync) {
  const Image image = make_image(tensors, metadata);
  const auto& entries = image.entries;
  write_atomically(path, sync, [&](io::FileWriter& out) {
    out.write(image.len, 8);
    out.write(image.text.data(), image.text.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      out.write(e.data.data_ptr(), static_cast<size_t>(e.data.numel() * e.elem_bytes));
      if (i == entries.size() / 2) fault_point("file:half");
    }
  });
  return image.digest();
}

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata,
                               FileDigest* digest) {
  const Image image = make_image(tensors, metadata);
  std::string out;
  out.reserve(8 + image.text.size() + static_cast<size_t>(image.data_bytes));
  out.append(reinterpret_cast<const char*>(image.len), 8);
  out.append(image.text);
  for (const auto& e : image.entries) {
    out.append(static_cast<const char*>(e.data.data_ptr()),
               static_cast<size_t>(e.data.numel() * e.elem_bytes));
  }
  if (digest) *digest = image.digest();
  return out;
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name) {
  MemoryBuffer buffer(bytes);
  std::istream in(&buffer);
  return read_safetensors(in, static_cast<int64_t>(bytes.size()), name);
}

SafetensorsFile load_safetensors(const std::string& path) {
  const int64_t file_bytes =
      io::require_regular_file(path, std::numeric_limits<int64_t>::max(), "checkpoint file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("cannot open checkpoint file '{}'", path));
  return read_safetensors(in, file_bytes, path);
}

namespace {

SafetensorsFile read_safetensors(std::istream& in, int64_t file_bytes, const std::string& path) {
  unsigned char len[8] = {};
  in.read(reinterpret_cast<char*>(len), std::min<int64_t>(8, std::max<int64_t>(file_bytes, 0)));
  const uint64_t n = safetensors_header_length(len, file_bytes, path);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) corrupt(path, "cannot read the header");
  uint32_t head_crc = crc32c_extend(crc32c(len, 8), text.data(), text.size());  // length + header
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = file_bytes - data_start;
  auto layout = parse_safetensors_header(text, data_bytes, path);
  SafetensorsFile result;
  result.metadata = std::move(layout.metadata);
  // The layout is sound and fits the file: now allocate and read, in file order.
  uint32_t data_crc = 0;
  for (const auto& s : layout.spans) {
    const DtypeInfo* dtype = find_dtype(s.dtype);
    BW_CHECK(dtype != nullptr && dtype->bytes == s.elem_bytes, "dtype {} of {} bytes", s.dtype,
             s.elem_bytes);
    torch::Tensor t = torch::empty(s.shape, torch::TensorOptions().dtype(dtype->type));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(s.end - s.begin));
    if (!in) corrupt(path, fmt::format("tensor '{}' cannot be read", s.name));
    const auto bytes = static_cast<size_t>(s.end - s.begin);
    data_crc = crc32c_extend(data_crc, t.data_ptr(), bytes);
    result.tensors[s.name] = t;
  }
  if (auto it = result.metadata.find(kDataCrcKey); it != result.metadata.end()) {
    if (it->second != crc32c_hex(data_crc)) {
      corrupt(path, fmt::format("the data's CRC-32C is {} but the header records {} (the file "
                                "was damaged after it was written)",
                                crc32c_hex(data_crc), it->second));
    }
  }
  result.digest = {file_bytes,
                   crc32c_combine(head_crc, data_crc, static_cast<size_t>(data_bytes))};
  return result;
}

}  // namespace

Json sidecar_json(const CheckpointInfo& info) {
  Json files = Json::object();
  for (const auto& [name, d] : info.files) {
    files[name] = {{"bytes", d.bytes}, {"crc32c", crc32c_hex(d.crc32c)}};
  }
  Json doc = {{"format", "breakwater-checkpoint"},
              {"version", info.shards.empty() ? 2 : 3},
              {"step", info.step},
              {"next_sample", info.next_sample}};
  if (info.shards.empty()) {
    doc["weights"] = info.weights;
    doc["optimizer"] = info.optimizer;
  } else {
    Json shards = Json::array();
    for (const auto& sh : info.shards) {
      shards.push_back({{"shard", sh.shard},
                        {"host", sh.host},
                        {"layers", sh.layers},
                        {"model", sh.model},
                        {"optimizer", sh.optimizer}});
    }
    doc["shards"] = shards;
  }
  doc["config"] = info.config_toml;
  doc["extra"] = info.extra;
  doc["files"] = files;
  return doc;
}

void write_sidecar(const std::string& path, const CheckpointInfo& info) {
  std::string text = sidecar_json(info).dump(2) + "\n";
  write_atomically(path, /*sync=*/true,
                   [&](io::FileWriter& out) { out.write(text.data(), text.size()); });
}

CheckpointInfo read_sidecar(const std::string& path) {
  return parse_sidecar(json::read_file(path), fmt::format("checkpoint sidecar '{}'", path));
}

std::string beside(const std::string& sidecar_path, const std::string& file) {
  if (file.empty() || fs::path(file).is_absolute()) return file;
  return (fs::path(sidecar_path).parent_path() / file).string();
}

}  // namespace bw::runtime
