// Safetensors reader/writer and checkpoint sidecars (see checkpoint.h).
#include "runtime/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/json.h"

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

void write_all(std::ofstream& out, const void* data, int64_t bytes, const std::string& path) {
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw ConfigError(fmt::format("cannot write '{}' (disk full?)", path));
}

// Writes through a temporary file renamed into place at the end.
template <class Fn>
void write_atomically(const std::string& path, Fn&& body) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(fmt::format("cannot open '{}' for writing", tmp));
    body(out, tmp);
    out.flush();
    if (!out) throw ConfigError(fmt::format("cannot write '{}' (disk full?)", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw ConfigError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
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

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Entry {
    std::string name;
    torch::Tensor data;  // CPU, contiguous
    int64_t elem_bytes;
  };
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    BW_CHECK(!name.empty() && name != "__metadata__", "invalid tensor name '{}'", name);
    BW_CHECK(seen.insert(name).second, "duplicate tensor name '{}'", name);
    BW_CHECK(t.defined(), "tensor '{}' is undefined", name);
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    entries.push_back({name, c, static_cast<int64_t>(c.element_size())});
    safetensors_dtype(c.scalar_type());  // throws for an unsupported dtype
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.elem_bytes != b.elem_bytes ? a.elem_bytes > b.elem_bytes : a.name < b.name;
  });
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& e : entries) {
    int64_t bytes = e.data.numel() * e.elem_bytes;
    header[e.name] = {{"dtype", safetensors_dtype(e.data.scalar_type())},
                      {"shape", e.data.sizes().vec()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  write_atomically(path, [&](std::ofstream& out, const std::string& tmp) {
    write_all(out, len, 8, tmp);
    write_all(out, text.data(), static_cast<int64_t>(text.size()), tmp);
    for (const auto& e : entries) {
      write_all(out, e.data.data_ptr(), e.data.numel() * e.elem_bytes, tmp);
    }
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("cannot open checkpoint file '{}'", path));
  std::error_code ec;
  auto file_bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) throw ConfigError(fmt::format("cannot stat '{}': {}", path, ec.message()));
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
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::parse_error& e) {
    corrupt(path, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) corrupt(path, "header is not a JSON object");

  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = file_bytes - data_start;
  SafetensorsFile result;
  struct Span {
    int64_t begin, end;
    std::string name;
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
      shape.push_back(d.get<int64_t>());
      numel *= shape.back();
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      corrupt(path, where + " has non-integer data_offsets");
    }
    int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
    if (end < begin || end - begin != numel * dt->bytes) {
      corrupt(path, fmt::format("{} ({} x {}) needs {} bytes but data_offsets are [{}, {}]", where,
                                dt->name, entry["shape"].dump(), numel * dt->bytes, begin, end));
    }
    if (end > data_bytes) {
      corrupt(path, fmt::format("{} ends at data byte {} but the file holds only {} data bytes",
                                where, end, data_bytes));
    }
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dt->type));
    in.seekg(data_start + begin);
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(end - begin));
    if (!in) corrupt(path, where + " cannot be read");
    result.tensors[name] = t;
    spans.push_back({begin, end, name});
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
  return result;
}

void write_sidecar(const std::string& path, const CheckpointInfo& info) {
  Json doc = {{"format", "breakwater-checkpoint"},
              {"version", 1},
              {"step", info.step},
              {"next_sample", info.next_sample},
              {"weights", info.weights},
              {"optimizer", info.optimizer},
              {"config", info.config_toml},
              {"extra", info.extra}};
  std::string text = doc.dump(2) + "\n";
  write_atomically(path, [&](std::ofstream& out, const std::string& tmp) {
    write_all(out, text.data(), static_cast<int64_t>(text.size()), tmp);
  });
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
  if (version != 1) {
    throw ConfigError(fmt::format("{} has version {}; this build reads version 1", where, version));
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
  return info;
}

std::string beside(const std::string& sidecar_path, const std::string& file) {
  if (file.empty() || fs::path(file).is_absolute()) return file;
  return (fs::path(sidecar_path).parent_path() / file).string();
}

}  // namespace bw::runtime
