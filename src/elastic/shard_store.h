// Checkpoint state over the store instead of a shared filesystem (docs/checkpoints.md "Across
// hosts"). Workers never write under train.out_dir: each writer encodes its shard as the
// safetensors bytes merge_shards reads and uploads them to the coordinator's TCPStore; the
// coordinator writes them into its own staging directory and merges, verifies, fsyncs and
// publishes as for local shards. Resuming goes the same way round: the coordinator reads
// train.resume from its disk, checks it, and publishes each layer's tensors for the workers.
//
// A blob under key K is chunks "K/0", "K/1", ... of at most kBlobChunkBytes, then "K" itself,
// JSON {"bytes", "chunks", "crc32c"}, written last: a blob is complete exactly when "K" exists,
// and its CRC-32C is checked when it is read back. Chunks are small because the TCPStore server
// handles one request at a time: a 256 KiB value holds up other clients (heartbeats) for one
// chunk's transfer time, ~2 ms at 1 Gbit/s, not for a whole shard's.
//
// Keys (keys.h): shards of a periodic checkpoint under "g{g}/ckpt/{steps}/{shard}/{model|
// optimizer}", of the stop save under "g{g}/final/{shard}/..."; resume state "resume/{layer}/
// {model|optimizer}". Readers erase what they read; erase_* removes what a failed save left.
//
// Thread-safety: the functions are independent; each call uses its store from one thread.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"

namespace c10d {
class Store;
}

namespace bw::elastic {

inline constexpr int64_t kBlobChunkBytes = int64_t{256} << 10;

// Uploads `bytes` as blob `key` (chunks first, the record last).
void put_blob(c10d::Store& store, const std::string& key, std::string_view bytes);
// Whether blob `key` is complete.
bool has_blob(c10d::Store& store, const std::string& key);
// Reads blob `key` back (it must be complete), checking its size and CRC-32C (ConfigError when
// they differ); erases it when `erase`.
std::string get_blob(c10d::Store& store, const std::string& key, bool erase);
// Removes blob `key` and any chunks of an incomplete upload.
void erase_blob(c10d::Store& store, const std::string& key);

// Uploads one checkpoint shard (both files) under `prefix`; returns the bytes uploaded.
int64_t put_shard(c10d::Store& store, const std::string& prefix, int shard,
                  const runtime::NamedTensors& parameters,
                  const runtime::NamedTensors& optimizer_state);
// Whether every file of shards [0, shards) is uploaded.
bool shards_complete(c10d::Store& store, const std::string& prefix, int shards);
// Writes shards [0, shards) into staging_dir(dir) as the files merge_shards reads (unsynced, as
// a local worker writes them), erasing them from the store. ConfigError naming the shard when
// one is missing or damaged. Returns the bytes received.
int64_t receive_shards(c10d::Store& store, const std::string& prefix, int shards,
                       const std::string& dir);
// Erases whatever shards [0, shards) left under `prefix` (a save that did not complete).
void erase_shards(c10d::Store& store, const std::string& prefix, int shards);

// Publishes a loaded checkpoint's tensors per layer (layers [0, num_layers)); returns the bytes.
int64_t put_resume(c10d::Store& store, const runtime::LoadedCheckpoint& checkpoint, int num_layers);
// The resume tensors of `layers` (names as in the checkpoint), into `weights` and `optimizer`.
void get_resume(c10d::Store& store, const std::vector<int>& layers,
                std::map<std::string, torch::Tensor>& weights,
                std::map<std::string, torch::Tensor>& optimizer);
void erase_resume(c10d::Store& store, int num_layers);

}  // namespace bw::elastic
