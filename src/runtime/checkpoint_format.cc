// The checkpoint formats' parsers (see checkpoint_format.h).
#include "runtime/checkpoint_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/json.h"

namespace bw::runtime {
using Json = nlohmann::json;

namespace {

bool mul_ok(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

}  // namespace

void safetensors_corrupt(const std::string& path, const std::string& what) {
  throw ConfigError(fmt::format("safetensors file '{}' is truncated or corrupt: {}", path, what));
}

int64_t safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> bytes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  const auto it = bytes.find(dtype);
  return it == bytes.end() ? 0 : it->second;
}

uint64_t safetensors_header_length(const unsigned char len[8], int64_t file_bytes,
                                   const std::string& path) {
  if (file_bytes < 8) {
    safetensors_corrupt(path,
                        fmt::format("{} bytes, fewer than the 8-byte header length", file_bytes));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxSafetensorsHeaderBytes || static_cast<int64_t>(n) > file_bytes - 8) {
    safetensors_corrupt(path,
                        fmt::format("header length {} but the file has {} bytes", n, file_bytes));
  }
  return n;
}

SafetensorsLayout parse_safetensors_header(std::string_view text, int64_t data_bytes,
                                           const std::string& path) {
  const auto corrupt = [&](const std::string& what) { safetensors_corrupt(path, what); };
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::exception& e) {
    corrupt(fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) corrupt("header is not a JSON object");
  SafetensorsLayout layout;
  auto& spans = layout.spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) corrupt(fmt::format("metadata '{}' is not a string", k));
        layout.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto where = fmt::format("tensor '{}'", name);
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      corrupt(where + " needs dtype, shape and data_offsets [begin, end]");
    }
    SafetensorsSpan span;
    span.name = name;
    span.dtype = entry["dtype"].get<std::string>();
    span.elem_bytes = safetensors_dtype_bytes(span.dtype);
    if (span.elem_bytes == 0) {
      corrupt(fmt::format("{} has unknown dtype '{}'", where, entry["dtype"].dump()));
    }
    int64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) corrupt(where + " has a non-integer dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          !mul_ok(numel, static_cast<int64_t>(dim), numel)) {
        corrupt(fmt::format("{} has shape {} whose size overflows", where, entry["shape"].dump()));
      }
      span.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[0].get<uint64_t>() > static_cast<uint64_t>(data_bytes) ||
        off[1].get<uint64_t>() > static_cast<uint64_t>(data_bytes)) {
      corrupt(fmt::format("{} has data_offsets {} outside the {} data bytes of the file", where,
                          off.dump(), data_bytes));
    }
    span.begin = off[0].get<int64_t>();
    span.end = off[1].get<int64_t>();
    int64_t need = 0;
    if (!mul_ok(numel, span.elem_bytes, need) || span.end < span.begin ||
        span.end - span.begin != need) {
      corrupt(fmt::format("{} ({} x {}) needs {} bytes but data_offsets are [{}, {}]", where,
                          span.dtype, entry["shape"].dump(), need, span.begin, span.end));
    }
    spans.push_back(std::move(span));
  }
  std::sort(spans.begin(), spans.end(), [](const SafetensorsSpan& a, const SafetensorsSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  for (const auto& s : spans) {
    if (s.begin != covered) {
      corrupt(fmt::format("tensor '{}' starts at data byte {} where {} was expected (a hole or "
                          "an overlap)",
                          s.name, s.begin, covered));
    }
    covered = s.end;
  }
  if (covered != data_bytes) {
    corrupt(fmt::format("tensors cover {} data bytes but the file holds {}", covered, data_bytes));
  }
  return layout;
}

CheckpointInfo parse_sidecar(const Json& doc, const std::string& where) {
  const auto format = doc.is_object() ? doc.find("format") : doc.end();
  if (!doc.is_object() || format == doc.end() || *format != "breakwater-checkpoint") {
    throw ConfigError(
        fmt::format("{} is not a breakwater checkpoint (no \"format\": "
                    "\"breakwater-checkpoint\")",
                    where));
  }
  long long version = json::get_int(doc, "version", where);
  if (version < 1 || version > 3) {
    throw ConfigError(
        fmt::format("{} has version {}; this build reads versions 1 to 3", where, version));
  }
  CheckpointInfo info;
  info.step = json::get_int(doc, "step", where);
  info.next_sample = json::get_int(doc, "next_sample", where);
  if (info.step < 0 || info.next_sample < 0) {
    throw ConfigError(fmt::format("{}: step ({}) and next_sample ({}) must be >= 0", where,
                                  info.step, info.next_sample));
  }
  if (version <= 2) {
    info.weights = json::get_string(doc, "weights", where);
    info.optimizer = json::get_string(doc, "optimizer", where);
  }
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
    std::vector<std::string> named;
    if (version == 2) named = {info.weights, info.optimizer};
    if (version == 3) {
      if (!doc.contains("shards") || !doc["shards"].is_array() || doc["shards"].empty()) {
        throw ConfigError(fmt::format("{}: version 3 needs a non-empty \"shards\" list", where));
      }
      std::set<int> seen;
      for (const auto& d : doc["shards"]) {
        const std::string w = fmt::format("{}: shards[{}]", where, info.shards.size());
        ShardFiles sh;
        sh.shard = static_cast<int>(json::get_int_in(d, "shard", w, 0, 1 << 20));
        if (!seen.insert(sh.shard).second) {
          throw ConfigError(fmt::format("{}: shard {} is listed twice", w, sh.shard));
        }
        sh.host = json::get_string(d, "host", w);
        sh.model = json::get_string(d, "model", w);
        sh.optimizer = json::get_string(d, "optimizer", w);
        if (!d.contains("layers") || !d["layers"].is_array()) {
          throw ConfigError(fmt::format("{}: \"layers\" must be a list of layer indices", w));
        }
        for (const auto& l : d["layers"]) {
          if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() > (1 << 20)) {
            throw ConfigError(fmt::format("{}: \"layers\" must be a list of layer indices", w));
          }
          sh.layers.push_back(l.get<int>());
        }
        for (const auto& f : {sh.model, sh.optimizer}) {
          if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
            throw ConfigError(
                fmt::format("{}: file '{}' must be a plain name inside the checkpoint", w, f));
          }
          named.push_back(f);
        }
        info.shards.push_back(std::move(sh));
      }
    }
    for (const auto& f : named) {
      if (info.files.count(f) == 0) {
        throw ConfigError(fmt::format("{}: \"files\" has no digest for '{}'", where, f));
      }
    }
  }
  return info;
}

}  // namespace bw::runtime
