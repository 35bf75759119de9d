// Where a worker's checkpoint shard goes (docs/checkpoints.md "The sink"). At a step boundary the
// worker hands its shard (the parameters and optimizer state of the layers it owns, after step
// k's update) to a CheckpointSink and goes on training; the sink owns the snapshot, the encoding,
// the write, the fsync and the report that the shard is durable. The worker's loop does not know
// where the bytes go. Committing a checkpoint (its manifest) is the coordinator's
// (checkpointing.h, commit_checkpoint), once every shard is durable.
//
// The directory sink writes the shard's two files into the staging directory of the checkpoint
// under a root every writer and the coordinator see (a local run, or a shared filesystem):
//   save()   waits for the previous save of this sink to be durable (at most one in flight),
//            copies every tensor into host buffers it reuses from save to save (a device-to-host
//            copy on a GPU, a clone on the CPU), and returns; the snapshot holds exactly the
//            state at the call, whatever the training thread does next.
//   then     a background thread encodes each file as safetensors with its data CRC-32C,
//            writes it to `file.tmp`, fsyncs it, renames it into place and fsyncs the directory
//            (checkpoint.h, save_safetensors), and records the shard as durable with each
//            file's size and CRC-32C.
//   take_durable() hands over the records of shards that became durable; drain() waits for
//            the one in flight.
// A write that fails (a full disk, an unwritable directory) is rethrown as a ConfigError naming
// the file by the next save(), or by the next take_durable() or drain() that has no durable
// record left to hand over: the shards that became durable before it are never lost to it
// (drain_all() hands them over, then throws); its `.tmp` file is removed. With
// async = false the write happens inside save() (the old, blocking cost, for comparison).
//
// Thread-safety: one thread (the worker's) calls save, take_durable and drain; the background
// thread touches only the job it was handed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint.h"

namespace bw::runtime {

// A shard that is durable: what the coordinator needs to commit the checkpoint.
struct DurableShard {
  int64_t steps_done = 0;
  ShardFiles files;                         // names relative to the checkpoint directory
  std::map<std::string, FileDigest> digests;  // by file name
  int64_t bytes = 0;                        // both files
  double write_ms = 0.0;                    // encode + write + fsync, in the background
};
nlohmann::json to_json(const DurableShard& shard);
// ConfigError naming `where` when `doc` is not such a record.
DurableShard durable_shard_from_json(const nlohmann::json& doc, const std::string& where);

struct SinkStats {
  int saves = 0;
  double blocked_ms = 0.0;   // inside save(): waiting for the previous write plus the snapshot
  double waited_ms = 0.0;    // of which waiting for the previous write (it was still in flight)
  double snapshot_ms = 0.0;  // of which copying the tensors
  double write_ms = 0.0;     // background writes
  int64_t bytes = 0;
};

class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // Hands over shard `shard` of the checkpoint `dir` (checkpointing.h, checkpoint_dir) after
  // `steps_done` steps; `layers` are the layers whose tensors it holds. Returns the ms the caller
  // was blocked.
  virtual double save(const std::string& dir, int64_t steps_done, int shard,
                      const std::vector<int>& layers, const NamedTensors& parameters,
                      const NamedTensors& optimizer_state) = 0;
  // Shards that became durable since the last call, oldest first.
  virtual std::vector<DurableShard> take_durable() = 0;
  // Waits until every shard handed over is durable (or its write failed), then returns
  // take_durable(); CommError (a lost peer would look the same) if that takes longer than
  // `deadline`.
  virtual std::vector<DurableShard> drain(std::chrono::milliseconds deadline) = 0;
  virtual SinkStats stats() const = 0;
};

// Drains `sink`, handing every durable record to `handle` (oldest first), then throws the
// failure of a write when one failed.
template <typename Handle>
void drain_all(CheckpointSink& sink, std::chrono::milliseconds deadline, Handle&& handle) {
  for (auto durable = sink.drain(deadline); !durable.empty(); durable = sink.drain(deadline)) {
    handle(std::move(durable));
  }
}

struct DirectorySinkOptions {
  bool async = true;
  std::string host;  // recorded in the manifest: who holds the files
  // Test hook: the background write sleeps this long first, so that steps run during it
  // (BW_CHECKPOINT_WRITE_DELAY_MS in the worker's environment sets it).
  std::chrono::milliseconds write_delay{0};
};

std::unique_ptr<CheckpointSink> make_directory_sink(DirectorySinkOptions options);

// This host's name (gethostname), as manifests record it.
std::string host_name();

// The delay of BW_CHECKPOINT_WRITE_DELAY_MS (0 when unset); ConfigError when it is not a count.
std::chrono::milliseconds write_delay_from_env();

}  // namespace bw::runtime
