// Store keys of the elastic control plane, shared by the coordinator, agents and workers
// (docs/elastic.md "Protocol" lists who writes and who waits on each). Everything a generation
// publishes lives under "g{generation}/", so a new generation never reads stale keys; run-level
// keys (config, heartbeats, exit reports) outlive generations. Counters ("n..." and heartbeats)
// are c10d add() keys, so the coordinator polls one key instead of one per rank.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace bw::elastic::keys {

// --- control store (leadership.h; etcd runs): the leader key at the run's root; the rest under
// the run instance's prefix (Leadership::instance_prefix), each written fenced by its leader.
inline std::string leader() { return "leader"; }
// At the run's root too: the instance its leaders share (messages.h InstanceRecord).
inline std::string instance() { return "instance"; }
// The leader's TCPStore, "ADDR:PORT", published once it listens (each leader writes it again:
// agents and workers of a run taken over reconnect to the address written after the new epoch).
inline std::string leader_store() { return "store"; }
// The generation the leader published last (messages.h RunState), before any worker sees it.
inline std::string run_state() { return "state"; }
// elastic.inject's kill_coordinator entry `index` fired: the wall-clock ms of the kill, written
// (fenced, once) by the coordinator just before it kills itself; its successor measures from it.
inline std::string coordinator_fault(int index) { return fmt::format("fault/{}", index); }
// A checkpoint the leader commits, before its manifest is written: {"steps_done", "dir"}.
inline std::string checkpoint_commit(int steps_done) {
  return fmt::format("ckpt/commit/{}", steps_done);
}

// --- run level
inline std::string config() { return "run/config"; }  // TOML of the resolved config
// "files": every process sees the coordinator's filesystem (local runs): workers write their
// checkpoint shards into train.out_dir and read train.resume themselves; "store": they do not
// (multi-host runs), and both pass through the store (shard_store.h).
// "hosts": multi-host, checkpoint.dir on each host's own disk: workers write their shards there,
// agents publish them when the coordinator commits (committed_checkpoint), and a resume loads
// what a host holds and fetches the rest from a peer over the transport (docs/checkpoints.md).
inline std::string checkpoint_io() { return "run/checkpoint_io"; }
// The name of the file the coordinator writes into its checkpoint.dir: an agent that sees it
// there shares that filesystem.
inline std::string checkpoint_probe() { return "run/checkpoint_probe"; }
// "hosts" mode: the manifest (sidecar JSON) of the n-th committed checkpoint (n from 1), and a
// counter bumped after each commit, which agents poll; the coordinator keeps the newest
// kCommittedKept manifests.
inline std::string committed_checkpoint(int64_t n) { return fmt::format("ckpt/committed/{}", n); }
inline constexpr int64_t kCommittedKept = 64;
inline std::string num_committed() { return "ckpt/ncommitted"; }
// "hosts" mode: the manifest of train.resume, read from the coordinator's disk.
inline std::string resume_manifest() { return "run/resume_manifest"; }
// How many workers share one host's cores (a local run: all of them), for train.spin_wait_us.
inline std::string workers_per_host() { return "run/workers_per_host"; }
inline std::string exits() { return "run/exits"; }  // counter: agent exit reports so far
// Multi-host runs (remote_nodes.h): agents register themselves, proving the run token.
inline std::string nonce() { return "run/nonce"; }      // random per run, for the token proofs
inline std::string registrations() { return "reg/n"; }  // counter: registrations so far
// JSON {"name", "devices", "host", "proof"} of registration k (k = counter value - 1).
inline std::string registration(int k) { return fmt::format("reg/{}", k); }
// JSON {"ok": true, "node", "incarnation", "devices"} | {"ok": false, "message"}.
inline std::string registration_reply(int k) { return fmt::format("reg/{}/reply", k); }
// The coordinator took this incarnation of the node out: its agent stops its workers.
inline std::string node_fence(int node, int incarnation) {
  return fmt::format("node/{}/{}/fence", node, incarnation);
}
// "finished" | the reason the run stopped: set once, when the run is over.
inline std::string run_over() { return "run/over"; }
inline std::string agents_gone() { return "run/bye"; }  // counter: agents that saw run_over
// JSON {"worker", "status", "incarnation"}: an agent saw one of its workers exit.
inline std::string node_exit(int node, int incarnation) {
  return fmt::format("node/{}/{}/exit", node, incarnation);
}
inline std::string node_heartbeat(int node) { return fmt::format("node/{}/hb", node); }
inline std::string worker_heartbeat(int worker) { return fmt::format("w/{}/hb", worker); }
// Set by a worker process once it is connected and loaded: it can join a generation.
inline std::string worker_up(int worker, int incarnation) {
  return fmt::format("w/{}/{}/up", worker, incarnation);
}
// The first generation a worker process takes part in (set by the coordinator).
inline std::string worker_generation(int worker, int incarnation) {
  return fmt::format("w/{}/{}/gen", worker, incarnation);
}
// JSON {"kind": "config" | "other", "message"} of the exception that ended a worker process.
inline std::string worker_error(int worker) { return fmt::format("w/{}/error", worker); }
inline constexpr const char* kConfigError = "config";
// Fault injection: counter (fires once) and the wall-clock ms of the fault.
inline std::string inject_fired(int index) { return fmt::format("inject/{}", index); }
inline std::string inject_time(int index) { return fmt::format("inject/{}/at", index); }

// --- per generation
inline std::string layout(int g) { return fmt::format("g{}/layout", g); }  // JSON
// "hosts" mode: {"host", "shards": [...]}, the shards of the resume manifest rank r's host holds
// whole on its own disk, and the count of ranks that said so.
inline std::string resume_have(int g, int rank) { return fmt::format("g{}/rhave/{}", g, rank); }
inline std::string num_resume_have(int g) { return fmt::format("g{}/nrhave", g); }
inline std::string start(int g) { return fmt::format("g{}/start", g); }  // JSON
inline std::string abort(int g) { return fmt::format("g{}/abort", g); }
// JSON {"regroup_ms", "transfer_ms", "transfer_bytes"} once a rank has its groups and state
// (transfer_bytes: what it received).
inline std::string joined(int g, int rank) { return fmt::format("g{}/joined/{}", g, rank); }
inline std::string ready(int g, int step, int rank) {
  return fmt::format("g{}/ready/{}/{}", g, step, rank);  // StepReport JSON
}
// JSON runtime::RankTrace: a rank's record of traced step `step` (train.trace_steps), set once
// the step is applied, before the rank's next report.
inline std::string trace(int g, int step, int rank) {
  return fmt::format("g{}/trace/{}/{}", g, step, rank);
}
inline std::string num_ready(int g, int step) { return fmt::format("g{}/nready/{}", g, step); }
// "commit" | "last" (commit, then the generation ends) | "abort".
inline std::string decisions_of(int g) { return fmt::format("g{}/decision/", g); }  // a prefix
inline std::string decision(int g, int step) { return fmt::format("{}{}", decisions_of(g), step); }
inline std::string num_saved(int g, int step) { return fmt::format("g{}/nsaved/{}", g, step); }
inline std::string done(int g, int rank) { return fmt::format("g{}/done/{}", g, rank); }
// JSON {"val_loss", "eval_ms"} of the evaluation after the last step (rank 0, before its done).
inline std::string final_eval(int g) { return fmt::format("g{}/final_eval", g); }
inline std::string num_done(int g) { return fmt::format("g{}/ndone", g); }
// A rank left the generation on its own (a CommError): the message, and a counter.
inline std::string left(int g, int rank) { return fmt::format("g{}/left/{}", g, rank); }
inline std::string num_left(int g) { return fmt::format("g{}/nleft", g); }
// JSON {"steps_done", "layers"}: a worker left generation g with this state.
inline std::string stopped(int g, int worker) { return fmt::format("g{}/stopped/{}", g, worker); }
inline std::string num_stopped(int g) { return fmt::format("g{}/nstopped", g); }
// JSON {"kind": "generation", "generation"} | {"kind": "shutdown", "save": ...}.
inline std::string next(int g) { return fmt::format("g{}/next", g); }
inline std::string num_final(int g) { return fmt::format("g{}/nfinal", g); }
// Where the shards of a checkpoint travel (shard_store.h): a periodic one with `steps` steps
// done, and the stop save of generation g.
inline std::string checkpoint_shards(int g, int steps) {
  return fmt::format("g{}/ckpt/{}", g, steps);
}
inline std::string final_shards(int g) { return fmt::format("g{}/final", g); }
// A shard of the checkpoint under `prefix` (one of the two above) is durable where the workers
// write (runtime/checkpoint_sink.h): JSON DurableShard, set before the counter is bumped.
inline std::string checkpoint_ack(const std::string& prefix, int shard) {
  return fmt::format("{}/ack/{}", prefix, shard);
}

}  // namespace bw::elastic::keys
