// What the runtime saves and how it resumes (docs/design.md "Runtime": checkpoints). A checkpoint is a
// directory `{out_dir}/checkpoint-{step}` with model.safetensors (tensors "layers.{i}.{param}"),
// optimizer.safetensors ("layers.{i}.{param}.exp_avg" / ".exp_avg_sq" / ".step") and the sidecar
// checkpoint.json (support's checkpoint.h formats). Each rank writes a shard of the layers it owns
// (the lowest rank of each replica set, so every layer is written once); the coordinator merges
// the shards into the two files and writes the sidecar last, so a directory with a sidecar is
// complete. Names do not depend on the plan: a checkpoint written under one plan loads under any
// other.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "runtime/checkpoint.h"
#include "runtime/config.h"
#include "runtime/worker.h"

namespace bw::runtime {

// Whether a checkpoint is written after 0-based step `step`: every checkpoint_every steps, and
// after the last step.
inline bool checkpoint_due(const TrainConfig& train, int step) {
  return (train.checkpoint_every > 0 && (step + 1) % train.checkpoint_every == 0) ||
         step + 1 == train.steps;
}

// "{out_dir}/checkpoint-{step:06d}" where step = steps completed.
std::string checkpoint_dir(const std::string& out_dir, int steps_done);

// Writes this rank's shard files into `dir` (created if needed).
void write_shard(const Worker& worker, const std::string& dir);
// Writes shard `shard` (of the shards merge_shards reads) from the given tensors.
void write_shard(const std::string& dir, int shard, const NamedTensors& params,
                 const NamedTensors& optimizer_state);

// Merges the shards of ranks [0, world_size) in `dir` into model.safetensors and
// optimizer.safetensors, deletes them and writes checkpoint.json with `info` (its weights and
// optimizer fields are set here). Returns the sidecar path. ConfigError if a shard is missing or
// a tensor appears twice.
std::string merge_shards(const std::string& dir, int world_size, CheckpointInfo info);

struct LoadedCheckpoint {
  CheckpointInfo info;
  std::map<std::string, torch::Tensor> weights;
  std::map<std::string, torch::Tensor> optimizer;
};
// Reads a checkpoint from its sidecar path or its directory.
LoadedCheckpoint load_checkpoint(const std::string& sidecar_or_dir);

}  // namespace bw::runtime
