#include "elastic/shard_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"

namespace bw::elastic {
namespace fs = std::filesystem;
namespace {

std::string chunk_key(const std::string& key, int64_t i) { return fmt::format("{}/{}", key, i); }

std::string shard_key(const std::string& prefix, int shard, const char* kind) {
  return fmt::format("{}/{}/{}", prefix, shard, kind);
}

std::string resume_key(int layer, const char* kind) {
  return fmt::format("resume/{}/{}", layer, kind);
}

constexpr const char* kKinds[] = {"model", "optimizer"};

}  // namespace

void put_blob(c10d::Store& store, const std::string& key, std::string_view bytes) {
  const int64_t n = static_cast<int64_t>(bytes.size());
  const int64_t chunks = (n + kBlobChunkBytes - 1) / kBlobChunkBytes;
  for (int64_t i = 0; i < chunks; ++i) {
    const auto part = bytes.substr(static_cast<size_t>(i * kBlobChunkBytes),
                                   static_cast<size_t>(kBlobChunkBytes));
    store.set(chunk_key(key, i), std::vector<uint8_t>(part.begin(), part.end()));
  }
  const auto record = nlohmann::json{{"bytes", n},
                                     {"chunks", chunks},
                                     {"crc32c", crc32c_hex(crc32c(bytes.data(), bytes.size()))}}
                          .dump();
  store.set(key, std::vector<uint8_t>(record.begin(), record.end()));
}

bool has_blob(c10d::Store& store, const std::string& key) { return store.check({key}); }

std::string get_blob(c10d::Store& store, const std::string& key, bool erase) {
  const auto raw = store.get(key);
  const auto record = nlohmann::json::parse(std::string(raw.begin(), raw.end()));
  const int64_t n = record.at("bytes"), chunks = record.at("chunks");
  std::string out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < chunks; ++i) {
    const auto part = store.get(chunk_key(key, i));
    out.append(part.begin(), part.end());
  }
  const std::string crc = crc32c_hex(crc32c(out.data(), out.size()));
  if (static_cast<int64_t>(out.size()) != n || crc != record.at("crc32c").get<std::string>()) {
    throw ConfigError(fmt::format(
        "'{}' arrived with {} bytes and CRC-32C {} but was sent with {} bytes and {}; it was "
        "damaged on the way",
        key, out.size(), crc, n, record.at("crc32c").get<std::string>()));
  }
  if (erase) erase_blob(store, key);
  return out;
}

void erase_blob(c10d::Store& store, const std::string& key) {
  int64_t chunks = -1;
  if (store.check({key})) {
    const auto raw = store.get(key);
    chunks = nlohmann::json::parse(std::string(raw.begin(), raw.end())).at("chunks");
    store.deleteKey(key);
  }
  // An incomplete upload has no record: its chunks run up to the first missing one.
  for (int64_t i = 0; chunks < 0 ? store.check({chunk_key(key, i)}) : i < chunks; ++i) {
    store.deleteKey(chunk_key(key, i));
  }
}

int64_t put_shard(c10d::Store& store, const std::string& prefix, int shard,
                  const runtime::NamedTensors& parameters,
                  const runtime::NamedTensors& optimizer_state) {
  int64_t bytes = 0;
  for (const char* kind : kKinds) {
    const auto image =
        runtime::encode_safetensors(std::string(kind) == "model" ? parameters : optimizer_state);
    put_blob(store, shard_key(prefix, shard, kind), image);
    bytes += static_cast<int64_t>(image.size());
  }
  return bytes;
}

bool shards_complete(c10d::Store& store, const std::string& prefix, int shards) {
  std::vector<std::string> names;
  for (int s = 0; s < shards; ++s) {
    for (const char* kind : kKinds) names.push_back(shard_key(prefix, s, kind));
  }
  return names.empty() || store.check(names);
}

int64_t receive_shards(c10d::Store& store, const std::string& prefix, int shards,
                       const std::string& dir) {
  const fs::path staging = runtime::staging_dir(dir);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create checkpoint directory '{}': {}; check train.out_dir",
                                  staging.string(), ec.message()));
  }
  int64_t bytes = 0;
  for (int s = 0; s < shards; ++s) {
    for (const char* kind : kKinds) {
      const auto key = shard_key(prefix, s, kind);
      // Every writer counted its shard before this runs: a missing one is a bug.
      BW_CHECK(store.check({key}), "checkpoint shard {} ({}) never arrived", s, key);
      const auto image = get_blob(store, key, /*erase=*/true);
      io::FileWriter out((staging / fmt::format("shard-{}.{}.safetensors", s, kind)).string(),
                         "checkpoint shard");
      out.write(image.data(), image.size());
      out.close();
      bytes += static_cast<int64_t>(image.size());
    }
  }
  return bytes;
}

void erase_shards(c10d::Store& store, const std::string& prefix, int shards) {
  for (int s = 0; s < shards; ++s) {
    for (const char* kind : kKinds) erase_blob(store, shard_key(prefix, s, kind));
  }
}

int64_t put_resume(c10d::Store& store, const runtime::LoadedCheckpoint& checkpoint,
                   int num_layers) {
  int64_t bytes = 0;
  for (int l = 0; l < num_layers; ++l) {
    const std::string prefix = fmt::format("layers.{}.", l);
    for (const char* kind : kKinds) {
      const auto& all = std::string(kind) == "model" ? checkpoint.weights : checkpoint.optimizer;
      runtime::NamedTensors mine;
      for (auto it = all.lower_bound(prefix); it != all.end() && it->first.rfind(prefix, 0) == 0;
           ++it) {
        mine.emplace_back(it->first, it->second);
      }
      const auto image = runtime::encode_safetensors(mine);
      put_blob(store, resume_key(l, kind), image);
      bytes += static_cast<int64_t>(image.size());
    }
  }
  return bytes;
}

void get_resume(c10d::Store& store, const std::vector<int>& layers,
                std::map<std::string, torch::Tensor>& weights,
                std::map<std::string, torch::Tensor>& optimizer) {
  for (int l : layers) {
    for (const char* kind : kKinds) {
      const auto key = resume_key(l, kind);
      auto file = runtime::decode_safetensors(get_blob(store, key, /*erase=*/false), key);
      auto& into = std::string(kind) == "model" ? weights : optimizer;
      for (auto& [name, t] : file.tensors) into[name] = std::move(t);
    }
  }
}

void erase_resume(c10d::Store& store, int num_layers) {
  for (int l = 0; l < num_layers; ++l) {
    for (const char* kind : kKinds) erase_blob(store, resume_key(l, kind));
  }
}

}  // namespace bw::elastic
