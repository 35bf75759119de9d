// The store messages agents and workers send and the coordinator reads, and those the coordinator
// sends the workers (decision, start, next: each with its encoder), keys.h naming the keys,
// decoded in one place. Each decoder takes the raw value and the key it came from, checks every
// field's presence, type and range, and throws ConfigError naming the key and the field when the
// message is not one (a peer of another build, or not a peer at all): never a JSON library
// exception, an out-of-range conversion or a crash. Pure (no LibTorch, no store): the fuzz target
// feeds them arbitrary bytes (fuzz/store_messages_fuzz.cc).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/step_report.h"
#include "runtime/trace_events.h"

namespace bw::elastic {

// keys::node_exit (agent): which worker of the node exited, with what status.
struct ExitReport {
  int worker = 0;
  int status = 0;
  int incarnation = 0;
  bool operator==(const ExitReport&) const = default;
};
std::string encode_exit_report(const ExitReport& report);
ExitReport decode_exit_report(const std::string& text, const std::string& key);

// keys::worker_error (worker): the message of the error it stopped on; config_error when it was
// bad input (the run then exits 2).
struct WorkerError {
  bool config_error = false;
  std::string message;
  bool operator==(const WorkerError&) const = default;
};
std::string encode_worker_error(const WorkerError& error);
WorkerError decode_worker_error(const std::string& text, const std::string& key);

// keys::joined (worker): how long re-grouping and the state transfer took when it joined.
struct Joined {
  double regroup_ms = 0, transfer_ms = 0;
  int64_t transfer_bytes = 0;
  bool operator==(const Joined&) const = default;
};
std::string encode_joined(const Joined& joined);
Joined decode_joined(const std::string& text, const std::string& key);

// keys::stopped (worker): the steps it applied and the parameters it holds when it left a
// generation: per layer [begin, end) of its flat parameters ("ranges"), or, from an older worker,
// whole layers ("layers").
struct Stopped {
  int64_t steps_done = 0;
  std::map<int, std::pair<int64_t, int64_t>> ranges;
  std::optional<std::vector<int>> layers;  // set when the message has no "ranges"
  bool operator==(const Stopped&) const = default;
};
// Encodes the ranges (and the layers they are of, which older coordinators read).
std::string encode_stopped(const Stopped& stopped);
Stopped decode_stopped(const std::string& text, const std::string& key);

// keys::trace (worker): its record of a traced step (runtime/trace_events.h).
runtime::RankTrace decode_rank_trace(const std::string& text, const std::string& key);

// keys::done (worker): the checksums of every layer (key "{layer}") or segment
// ("{layer}/{begin}-{end}") it holds, compared across replicas as their JSON text.
struct DoneEntry {
  std::string part;          // "3" or "3/0-1024"
  std::string checksums;     // the JSON array as sent
  std::optional<int> layer;  // for a whole layer
  std::string first;         // its first checksum (the parameters')
};
std::vector<DoneEntry> decode_done(const std::string& text, const std::string& key);

// keys::ready (worker): its step report (runtime/step_report.h).
runtime::StepReport decode_step_report(const std::string& text, const std::string& key);

// keys::registration (a remote agent, before it is known): absent fields are empty (the
// coordinator refuses the agent, naming what is missing); wrong types are a ConfigError.
struct Registration {
  std::string name, host = "?", proof;
  int devices = 0;
  double launch_ms = 0;
  std::string data_path, data_digest, data_error;  // its corpus (agent.cc, corpus_report)
  // Its model.init_from folder (agent.cc, weights_report); absent when the run has none.
  std::string weights_path, weights_digest, weights_error;
  // Its checkpoint.dir (agent.cc, checkpoint_dir_report); absent when the run sets none: whether
  // this host sees the coordinator's probe file there (a filesystem they share), or why it
  // cannot write there.
  std::string checkpoint_path, checkpoint_error;
  bool checkpoint_shared = false;
  // An agent whose workers run on under a coordinator that took the run over (leadership.h):
  // the node and incarnation it had; -1 = a new registration.
  int node = -1, incarnation = 0;
  bool operator==(const Registration&) const = default;
};
// The registration's document: the corpus always, model.init_from and checkpoint.dir when any of
// their fields is set (decode_registration reads each back).
std::string encode_registration(const Registration& registration);
Registration decode_registration(const std::string& text, const std::string& key);

// keys::registration_reply (coordinator): accepted as node `node` (its incarnation and devices
// per node), or refused with a message.
struct RegistrationReply {
  bool ok = false;
  std::string message;  // when refused
  int node = 0, incarnation = 0, devices = 0;
  bool operator==(const RegistrationReply&) const = default;
};
std::string encode_registration_reply(const RegistrationReply& reply);
RegistrationReply decode_registration_reply(const std::string& text, const std::string& key);

// The control store's leader key (leadership.h), written by the coordinator that leads the run:
// where its store listens, on which host and process, and the SHA-256 of its config (another
// coordinator with another config is refused rather than sharing the run id).
struct LeaderRecord {
  std::string address;  // ADDR:PORT of its --listen
  std::string host;
  int64_t pid = 0;
  std::string config;  // hex SHA-256 of the run's config.toml
  bool operator==(const LeaderRecord&) const = default;
};
std::string encode_leader(const LeaderRecord& record);
LeaderRecord decode_leader(const std::string& text, const std::string& key);

// keys::instance (run level, leadership.h): the instance its leaders share, named by the epoch of
// its first leader, and whether the run is over (a standby then has nothing to take over).
struct InstanceRecord {
  int64_t epoch = 0;
  bool over = false;
  bool operator==(const InstanceRecord&) const = default;
};
std::string encode_instance(const InstanceRecord& record);
InstanceRecord decode_instance(const std::string& text, const std::string& key);

// keys::run_state (the leader, at each generation it publishes, before any worker can see it):
// what a coordinator that takes the run over needs besides the decisions: the generation, its
// first step and start message, the plan (plan::to_json), the non-finite skips so far, and every
// node's agent (name, incarnation, whether it is live and in the plan).
struct RunStateNode {
  int node = 0;
  std::string name;
  int incarnation = 0;
  bool live = false, in_plan = false;
  bool operator==(const RunStateNode&) const = default;
};
struct RunState {
  int generation = 0, first_step = 0;
  int skipped = 0, consecutive_skips = 0;
  std::string start;          // keys::start's text
  std::string plan;           // JSON text
  std::string checkpoint_io;  // keys::checkpoint_io's value
  std::vector<RunStateNode> nodes;
  bool operator==(const RunState&) const = default;
};
std::string encode_run_state(const RunState& state);
RunState decode_run_state(const std::string& text, const std::string& key);

// --- From the coordinator to the workers -------------------------------------------------------

// keys::decision (coordinator): what every worker does with step k of a generation; workers
// apply a step only on this message. Text: "commit" | "skip" (not finite: no update anywhere) |
// "last" (commit, then the generation ends) | "abort" (no update; the generation ends).
enum class Decision { kCommit, kSkip, kLast, kAbort };
// With `checkpoint` (not for abort) the text gains "+checkpoint": every rank saves its shard of
// the state after this step (the coordinator's time-based interval, checkpoint.every_s, or
// train.checkpoint_every).
std::string encode_decision(Decision decision, bool checkpoint = false);
Decision decode_decision(const std::string& text, const std::string& key,
                         bool* checkpoint = nullptr);

// A layer's state moving between workers when a generation forms: worker `from` sends the flat
// values [begin, end) of `layer` to worker `to`; no range = the whole layer.
struct LayerMove {
  int layer = 0, from = 0, to = 0;
  std::optional<std::pair<int64_t, int64_t>> range;
  bool operator==(const LayerMove&) const = default;
};

// keys::start (coordinator): how a generation starts.
struct Start {
  int first_step = 0;
  int skipped_steps = 0;  // so far in the run (train.nonfinite = "skip")
  std::string resume;     // the checkpoint the generation loads, "" = none
  std::vector<LayerMove> copies;
  bool operator==(const Start&) const = default;
};
std::string encode_start(const Start& start);
Start decode_start(const std::string& text, const std::string& key);

// keys::next (coordinator): what follows a generation that ended: the next generation, or the
// end of the run, with the stop save's shards (per writing worker: its shard and layers).
struct StopSave {
  std::string dir;
  std::map<int, std::pair<int, std::vector<int>>> shards;  // worker -> (shard, layers)
  bool operator==(const StopSave&) const = default;
};
struct Next {
  bool shutdown = false;
  int generation = 0;            // the next generation (when not shutdown)
  std::optional<StopSave> save;  // shutdown with a stop save
  bool operator==(const Next&) const = default;
};
std::string encode_next(const Next& next);
Next decode_next(const std::string& text, const std::string& key);

}  // namespace bw::elastic
