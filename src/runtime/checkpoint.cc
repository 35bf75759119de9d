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

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "runtime/fault_points.h"

namespace bw::runtime {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts need byte swapping");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

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
  throw ConfigError(fmt::format("safetensors file '{}' is truncated or corrupt: {}", path, what));
}

// Checked a * b for non-negative int64 values; false on overflow.
bool mul_ok(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

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
  if (file_bytes < 8)
    corrupt(path, fmt::format("{} bytes, fewer than the 8-byte header length", file_bytes));
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxHeaderBytes || static_cast<int64_t>(n) > file_bytes - 8) {
    corrupt(path, fmt::format("header length {} but the file has {} bytes", n, file_bytes));
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) corrupt(path, "cannot read the header");
  uint32_t head_crc = crc32c_extend(crc32c(len, 8), text.data(), text.size());  // length + header
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::exception& e) {
    corrupt(path, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) corrupt(path, "header is not a JSON object");

  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = file_bytes - data_start;
  SafetensorsFile result;
  struct Span {
    int64_t begin, end;
    std::string name;
    const DtypeInfo* dtype;
    std::vector<int64_t> shape;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt(path, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) corrupt(path, fmt::format("metadata '{}' is not a string", k));
        result.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto where = fmt::format("tensor '{}'", name);
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      corrupt(path, where + " needs dtype, shape and data_offsets [begin, end]");
    }
    const DtypeInfo* dt = find_dtype(entry["dtype"].get<std::string>());
    if (!dt) corrupt(path, fmt::format("{} has unknown dtype '{}'", where, entry["dtype"].dump()));
    std::vector<int64_t> shape;
    int64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) corrupt(path, where + " has a non-integer dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          !mul_ok(numel, static_cast<int64_t>(dim), numel)) {
        corrupt(path, fmt::format("{} has shape {} whose size overflows", where,
                                  entry["shape"].dump()));
      }
      shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[0].get<uint64_t>() > static_cast<uint64_t>(data_bytes) ||
        off[1].get<uint64_t>() > static_cast<uint64_t>(data_bytes)) {
      corrupt(path, fmt::format("{} has data_offsets {} outside the {} data bytes of the file",
                                where, off.dump(), data_bytes));
    }
    int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
    int64_t need = 0;
    if (!mul_ok(numel, dt->bytes, need) || end < begin || end - begin != need) {
      corrupt(path, fmt::format("{} ({} x {}) needs {} bytes but data_offsets are [{}, {}]", where,
                                dt->name, entry["shape"].dump(), need, begin, end));
    }
    spans.push_back({begin, end, name, dt, std::move(shape)});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  for (const auto& s : spans) {
    if (s.begin != covered) {
      corrupt(path, fmt::format("tensor '{}' starts at data byte {} where {} was expected (a "
                                "hole or an overlap)",
                                s.name, s.begin, covered));
    }
    covered = s.end;
  }
  if (covered != data_bytes) {
    corrupt(path,
            fmt::format("tensors cover {} data bytes but the file holds {}", covered, data_bytes));
  }
  // The layout is sound and fits the file: now allocate and read, in file order.
  uint32_t data_crc = 0;
  for (const auto& s : spans) {
    torch::Tensor t = torch::empty(s.shape, torch::TensorOptions().dtype(s.dtype->type));
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

void write_sidecar(const std::string& path, const CheckpointInfo& info) {
  Json files = Json::object();
  for (const auto& [name, d] : info.files) {
    files[name] = {{"bytes", d.bytes}, {"crc32c", crc32c_hex(d.crc32c)}};
  }
  Json doc = {{"format", "breakwater-checkpoint"},
              {"version", 2},
              {"step", info.step},
              {"next_sample", info.next_sample},
              {"weights", info.weights},
              {"optimizer", info.optimizer},
              {"config", info.config_toml},
              {"extra", info.extra},
              {"files", files}};
  std::string text = doc.dump(2) + "\n";
  write_atomically(path, /*sync=*/true,
                   [&](io::FileWriter& out) { out.write(text.data(), text.size()); });
}

CheckpointInfo read_sidecar(const std::string& path) {
  Json doc = json::read_file(path);
  std::string where = fmt::format("checkpoint sidecar '{}'", path);
  if (!doc.is_object() || doc.value("format", "") != "breakwater-checkpoint") {
    throw ConfigError(
        fmt::format("{} is not a breakwater checkpoint (no \"format\": "
                    "\"breakwater-checkpoint\")",
                    where));
  }
  long long version = json::get_int(doc, "version", where);
  if (version != 1 && version != 2) {
    throw ConfigError(
        fmt::format("{} has version {}; this build reads versions 1 and 2", where, version));
  }
  CheckpointInfo info;
  info.step = json::get_int(doc, "step", where);
  info.next_sample = json::get_int(doc, "next_sample", where);
  if (info.step < 0 || info.next_sample < 0) {
    throw ConfigError(fmt::format("{}: step ({}) and next_sample ({}) must be >= 0", where,
                                  info.step, info.next_sample));
  }
  info.weights = json::get_string(doc, "weights", where);
  info.optimizer = json::get_string(doc, "optimizer", where);
  info.config_toml = json::get_string(doc, "config", where);
  if (doc.contains("extra")) info.extra = doc["extra"];
  if (version >= 2) {
    if (!doc.contains("files") || !doc["files"].is_object()) {
      throw ConfigError(fmt::format("{}: version 2 needs a \"files\" object", where));
    }
    for (const auto& [name, d] : doc["files"].items()) {
      const std::string w = fmt::format("{}: files.{}", where, name);
      FileDigest digest;
      digest.bytes = json::get_int_in(d, "bytes", w, 0, std::numeric_limits<int64_t>::max());
      const std::string hex = json::get_string(d, "crc32c", w);
      char* end = nullptr;
      const unsigned long v = std::strtoul(hex.c_str(), &end, 16);
      if (hex.size() != 8 || end != hex.c_str() + hex.size()) {
        throw ConfigError(fmt::format("{}: crc32c '{}' is not 8 hex digits", w, hex));
      }
      digest.crc32c = static_cast<uint32_t>(v);
      info.files[name] = digest;
    }
    for (const auto& f : {info.weights, info.optimizer}) {
      if (info.files.count(f) == 0) {
        throw ConfigError(fmt::format("{}: \"files\" has no digest for '{}'", where, f));
      }
    }
  }
  return info;
}

std::string beside(const std::string& sidecar_path, const std::string& file) {
  if (file.empty() || fs::path(file).is_absolute()) return file;
  return (fs::path(sidecar_path).parent_path() / file).string();
}

}  // namespace bw::runtime
