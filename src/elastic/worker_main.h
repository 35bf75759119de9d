// The worker process (docs/elastic.md "Worker"): one device of one node, started by the node's
// agent. It keeps its model state (runtime/model_state.h) for its whole life and loops over
// generations: read generation g's layout and copy list, build its groups under "g{g}/", send and
// receive the layers that move, then run steps: prepare (forward, backward, gradient sync),
// report ready, wait for the coordinator's decision, and apply the update only on "commit".
// A lost peer (CommError) or the generation's abort key ends the generation cleanly: the worker
// reports the steps it applied and the layers it holds, and waits for g+1 or shutdown.
//
// A worker's bad input (ConfigError) or bug is published under its error key and ends the
// process (exit 2 or 1), which the coordinator reports as such, never as a lost peer.
#pragma once

#include <string>

namespace bw::elastic {

struct WorkerArgs {
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int worker = 0;  // stable id: node * devices_per_node + local device
  int node = 0;
  int device = 0;                       // local device on the node
  int incarnation = 0;                  // of the node's agent (a re-joined node counts up)
  std::string gloo_host = "127.0.0.1";  // this host's address for Gloo's connections
  std::string node_name;  // its agent's --node-name (multi-host); "" = the host's name
  double connect_timeout_s = 60.0;
  // A run whose control store is etcd (leadership.h): the worker's store clients follow the
  // leadership (failover_store.h) from the leader of `leader_epoch`, waiting at most
  // `leaderless_timeout_s` for a new one.
  std::string control, run_id;
  int64_t leader_epoch = 0;
  double leaderless_timeout_s = 30;
};

// Returns the process exit status (0 after shutdown).
int run_worker_process(const WorkerArgs& args);

}  // namespace bw::elastic
