#include "runtime/checkpointing.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace bw::runtime {
namespace fs = std::filesystem;
namespace {

std::string shard_path(const std::string& dir, int rank, const char* kind) {
  return (fs::path(dir) / fmt::format("shard-{}.{}.safetensors", rank, kind)).string();
}

}  // namespace

std::string checkpoint_dir(const std::string& out_dir, int steps_done) {
  return (fs::path(out_dir) / fmt::format("checkpoint-{:06d}", steps_done)).string();
}

void write_shard(const Worker& worker, const std::string& dir) {
  write_shard(dir, worker.rank(), worker.owned_parameters(), worker.owned_optimizer_state());
}

void write_shard(const std::string& dir, int shard, const NamedTensors& params,
                 const NamedTensors& optimizer_state) {
  fs::create_directories(dir);
  save_safetensors(shard_path(dir, shard, "model"), params);
  save_safetensors(shard_path(dir, shard, "optimizer"), optimizer_state);
}

std::string merge_shards(const std::string& dir, int world_size, CheckpointInfo info) {
  for (const char* kind : {"model", "optimizer"}) {
    NamedTensors merged;
    std::map<std::string, int> seen;
    for (int r = 0; r < world_size; ++r) {
      const auto path = shard_path(dir, r, kind);
      if (!fs::exists(path)) {
        throw ConfigError(fmt::format("checkpoint shard {} is missing", path));
      }
      auto file = load_safetensors(path);
      for (auto& [name, t] : file.tensors) {
        if (auto [it, fresh] = seen.emplace(name, r); !fresh) {
          throw ConfigError(fmt::format("tensor '{}' written by ranks {} and {} in {}", name,
                                        it->second, r, dir));
        }
        merged.emplace_back(name, t);
      }
    }
    const std::string file = fmt::format("{}.safetensors", kind);
    save_safetensors((fs::path(dir) / file).string(), merged,
                     {{"format", "breakwater"}, {"step", std::to_string(info.step)}});
    for (int r = 0; r < world_size; ++r) fs::remove(shard_path(dir, r, kind));
    if (std::string(kind) == "model") {
      info.weights = file;
    } else {
      info.optimizer = file;
    }
  }
  const auto sidecar = (fs::path(dir) / "checkpoint.json").string();
  write_sidecar(sidecar, info);
  return sidecar;
}

LoadedCheckpoint load_checkpoint(const std::string& sidecar_or_dir) {
  std::string sidecar = sidecar_or_dir;
  if (fs::is_directory(sidecar)) sidecar = (fs::path(sidecar) / "checkpoint.json").string();
  if (!fs::exists(sidecar)) {
    throw ConfigError(fmt::format(
        "no checkpoint at '{}' (train.resume takes a checkpoint directory or its checkpoint.json)",
        sidecar_or_dir));
  }
  LoadedCheckpoint out;
  out.info = read_sidecar(sidecar);
  out.weights = load_safetensors(beside(sidecar, out.info.weights)).tensors;
  out.optimizer = load_safetensors(beside(sidecar, out.info.optimizer)).tensors;
  return out;
}

}  // namespace bw::runtime
