// A resume from a checkpoint whose shards are on each host's own disk (checkpoint.dir not
// shared, keys::checkpoint_io "hosts"; docs/checkpoints.md "Each host's own disk"). Every rank
// of the first generation reports which shards of the manifest its host holds whole; from those
// reports every rank computes the same plan: a rank loads each layer it runs from a shard on its
// own host when there is one, and otherwise receives one shard holding it, file by file, from a
// rank whose host holds it, over the generation's transport (Gloo or NCCL). No byte passes
// through the control store.
//
// Thread-safety: one thread, with the transport's own rules.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "runtime/checkpointing.h"
#include "runtime/comm.h"

namespace bw::elastic {

// Rank `to` receives the files of info.shards[shard] (its position in the manifest) from rank
// `from`.
struct ShardFetch {
  int shard = 0;
  int from = 0, to = 0;
  bool operator==(const ShardFetch&) const = default;
};

// have[r]: the positions in info.shards whose files rank r's host holds; needed[r]: the layers
// rank r loads (runtime::layers_to_load); hosts[r]: its host, for messages. A rank fetches a
// shard only for a layer no shard on its own host holds: the first shard in manifest order that
// holds it and some rank has, from the lowest such rank; each (shard, rank) at most once.
// ConfigError naming the layer and every copy the manifest lists (shard and host) when no rank
// has any; `where` names the checkpoint.
std::vector<ShardFetch> plan_shard_fetches(const runtime::CheckpointInfo& info,
                                           const std::vector<std::set<int>>& have,
                                           const std::vector<std::set<int>>& needed,
                                           const std::vector<std::string>& hosts,
                                           const std::string& where);

// The path of `file` of checkpoint `info` in `dir`, or in its staging directory (a host whose
// agent did not publish it yet), when it is there with the size the manifest records; "".
std::string find_shard_file(const runtime::CheckpointInfo& info, const std::string& dir,
                            const std::string& file);

// Runs this rank's part of `plan` over `world`: sends the files of the shards it serves (read
// from `local`), receives those it fetches into `into_dir` (created), each checked against the
// manifest's size and CRC-32C. Returns the bytes received. CommError when a peer is lost.
int64_t fetch_shards(const runtime::CheckpointInfo& info, const std::vector<ShardFetch>& plan,
                     int rank, runtime::Transport& world, const runtime::ShardFileLocator& local,
                     const std::string& into_dir);

}  // namespace bw::elastic
