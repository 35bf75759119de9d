// What the runtime saves and how it resumes (docs/design.md "Runtime": checkpoints). A checkpoint
// is a directory `{out_dir}/checkpoint-{step}` with model.safetensors (tensors
// "layers.{i}.{param}"), optimizer.safetensors ("layers.{i}.{param}.exp_avg" / ".exp_avg_sq" /
// ".step") and the sidecar checkpoint.json (checkpoint.h formats). Each rank writes a shard of the
// layers it owns (the lowest rank of each replica set, so every layer is written once); the
// coordinator merges the shards into the two files and writes the sidecar. Names do not depend on
// the plan: a checkpoint written under one plan loads under any other.
//
// Crash safety: everything is written into the staging directory `{dir}.tmp` (shards, then the
// merged files, each with its CRC-32C, the shards removed, the merged files fsynced, then the
// sidecar with the files' digests, fsynced), and
// only then is the staging directory renamed to `{dir}` in one step: renamed when `{dir}` does not
// exist, atomically exchanged with it (renameat2 RENAME_EXCHANGE) when it does, so a process
// killed at any point leaves `{dir}` holding either the old checkpoint or the new one, complete,
// never a mix (tests/runtime/checkpoint_fault_test.cc). On file systems without the exchange the
// old directory is first renamed to `{dir}.old`, and load_checkpoint falls back to it while
// `{dir}` is missing. `.tmp` and `.old` directories are never loaded; merge_shards removes those
// of earlier steps, remove_partial_checkpoints all of them.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/gpt.h"
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

// Where a run's checkpoint-NNNNNN directories go: checkpoint.dir, or train.out_dir when that is
// empty.
inline std::string checkpoint_root(const RunConfig& config) {
  return config.checkpoint.dir.empty() ? config.train.out_dir : config.checkpoint.dir;
}

// "{dir}.tmp": where the shards and the merged files of checkpoint `dir` are staged.
std::string staging_dir(const std::string& dir);

// Writes this rank's shard files for checkpoint `dir` into staging_dir(dir) (created if needed).
void write_shard(Worker& worker, const std::string& dir);
// Writes shard `shard` (of the shards merge_shards reads) from the given tensors, into
// staging_dir(dir).
void write_shard(const std::string& dir, int shard, const NamedTensors& parameters,
                 const NamedTensors& optimizer_state);

// Merges the shards of ranks [0, world_size) staged for `dir` (each verified by its CRC) into
// model.safetensors and optimizer.safetensors, deletes them, writes checkpoint.json with `info`
// (its weights, optimizer and files fields are set here), fsyncs, and publishes the staging
// directory as `dir` (see above). Returns the sidecar path, `{dir}/checkpoint.json`. ConfigError
// if a shard is missing or damaged or a tensor appears twice; the staging directory is then
// removed (the previous checkpoint stays as it was).
std::string merge_shards(const std::string& dir, int world_size, CheckpointInfo info);

// "shard-{shard}.{kind}.safetensors" (kind "model" or "optimizer"): a shard's files.
std::string shard_file(int shard, const char* kind);

// Commits a sharded checkpoint (version 3): its shards are already durable in staging_dir(dir),
// each listed in info.shards with its digests in info.files. Checks every listed file is there
// with its recorded size (its bytes are not read), writes the manifest (the sidecar) durably and
// publishes the staging directory as `dir` (see above), then removes the staging leftovers of
// earlier steps. Returns the sidecar path. ConfigError, publishing nothing, when a shard file is
// missing or has another size. With files_here, on a full disk the staging directories of later
// steps (the next checkpoint's shards, written meanwhile) are removed, with a warning, to make
// room for the manifest: a checkpoint whose shards are all durable is not lost to a later one's
// (whose commit then finds its files missing).
// With files_here = false (shards on each host's own disk, checkpoint.dir not shared) the files are
// not looked for: the workers' acknowledgements, sent after their fsyncs, are the evidence, and
// only the manifest is written and published here.
std::string commit_checkpoint(const std::string& dir, CheckpointInfo info, bool files_here = true);

// On a host whose own disk holds shards of committed checkpoint `info` (under `root`, which is
// not shared with the coordinator): publishes `{root}/checkpoint-{step}` with the manifest and
// the shard files this host wrote (those the manifest names with host `host`; anything else in
// the staging directory, left by an interrupted earlier run, is removed), creating it when the
// host wrote none. Nothing when it is published already. Crash safe as commit_checkpoint.
void publish_on_host(const std::string& root, const CheckpointInfo& info, const std::string& host);
// Removes the staging (`.tmp`) and `.old` directories under `root` of steps before its oldest
// published checkpoint; returns how many. On a host's own disk, where a staging directory of a
// later step may hold a committed checkpoint whose publication was missed (a resume still finds
// its shards there), only those older than everything kept go.
int remove_partials_before_oldest(const std::string& root);

// Removes the committed checkpoints under `root` beyond the newest `keep` (none when keep <= 0),
// each sidecar first; returns how many were removed.
int retain_checkpoints(const std::string& root, int keep);

// Writes checkpoint `source` (any version) in the single-file form, model.safetensors and
// optimizer.safetensors with a version-2 sidecar, as the directory `out_dir` (staged and
// published as above). Returns the new sidecar path.
std::string merge_checkpoint(const std::string& source, const std::string& out_dir);

// Removes every `checkpoint-*.tmp` and `checkpoint-*.old` directory in `out_dir` (leftovers of
// interrupted writes); call it at the start of a run, when no checkpoint is being written.
// Returns how many were removed.
int remove_partial_checkpoints(const std::string& out_dir);

// The newest complete checkpoint in `out_dir`: the sidecar path of the published
// `checkpoint-NNNNNN` directory with the most steps (staging `.tmp` and `.old` directories never
// count), and its step in `*steps_done` if given; "" (and -1) if there is none.
std::string latest_checkpoint(const std::string& out_dir, int* steps_done = nullptr);

struct LoadedCheckpoint {
  CheckpointInfo info;
  std::map<std::string, torch::Tensor> weights;
  std::map<std::string, torch::Tensor> optimizer;
};

// Where a host finds a file of a shard (its name as the manifest records it): a path, or "" when
// this host holds no copy of it.
using ShardFileLocator =
    std::function<std::string(const ShardFiles& shard, const std::string& file)>;
// `layers` and the layers holding the primary of a tied copy among them: what loading `layers`
// reads (the copies are filled in from their primary).
std::set<int> layers_to_load(const CheckpointInfo& info, const std::vector<int>& layers);
// Loads only `layers` (with layers_to_load's primaries) of the sharded checkpoint whose manifest
// is `info` (`where` names it in messages), with every check of load_checkpoint; a shard the
// locator does not find counts as a missing copy. For a worker whose host holds only some of the
// shards (checkpoint.dir on each host's own disk).
LoadedCheckpoint load_checkpoint_layers(CheckpointInfo info, const std::string& where,
                                        const ShardFileLocator& locate,
                                        const std::vector<int>& layers);
// Tied matrices are stored once (ModelState::parameters_of): the sidecar's extra["tied"] lists
// each tied group's checkpoint names, [[primary, copy, ...], ...]; absent when the model has
// no ties. tied_record(model) is that list, or null for an untied model.
nlohmann::json tied_record(const model::GptConfig& model);

// Reads a checkpoint from its sidecar path or its directory and verifies it: the sidecar's step
// fits its data position and config (resume_check.h), each tensor file's size and CRC-32C match
// the sidecar's record (version 2), each file's data CRC matches its header, and the step the
// files were written at matches the sidecar's. A staging (`.tmp`) or `.old` directory is
// refused. The copies of tied matrices (extra["tied"]) are filled in from their primary, with
// its optimizer state, so `weights` names every parameter of every layer. Every failure is a
// ConfigError naming the file and what to do.
LoadedCheckpoint load_checkpoint(const std::string& sidecar_or_dir);
// Only the sidecar of the checkpoint (same resolution and sidecar checks, no tensor files).
CheckpointInfo read_checkpoint_info(const std::string& sidecar_or_dir);

}  // namespace bw::runtime
