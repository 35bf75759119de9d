// The node agent (`breakwater agent`, docs/elastic.md "Agent", docs/multihost.md): one process per
// node. It starts the node's workers (our own binary's `worker` subcommand), bumps the node's
// heartbeat counter, and watches the workers: the moment one exits it writes an exit report
// (which worker, its status) to the store, kills the node's other workers and ends; a worker's
// death takes its node out (Oobleck's unit of failure). When every worker exits 0 (shutdown), the
// agent exits 0. Workers die with their agent (PR_SET_PDEATHSIG).
//
// Two ways to start one:
//  - run_agent: local runs. The coordinator spawns it with its node id and incarnation; it dies
//    with the coordinator.
//  - run_remote_agent: multi-host runs. Started on its own host with the coordinator's address, it
//    registers itself (name, devices, proof of the run token, token.h) and waits for the node id
//    the coordinator gives it. A refused registration ends it with exit status 2 and the
//    coordinator's reason. When the coordinator fences its node (its heartbeats stopped arriving,
//    say a cut link) or the store stops answering, it stops its workers and registers again as
//    soon as the coordinator can be reached, so the node re-joins; it gives up (exit 3) when the
//    coordinator stays unreachable for `wait_s`. It exits 0 when the run finishes. With
//    `control` set, a lost store is a coordinator to follow, not a reason to stop (see below).
//
// Thread-safety: runs on the calling thread.
#pragma once

#include <string>

namespace bw::elastic {

struct AgentArgs {
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int node = 0;            // local runs: set by the coordinator
  int devices = 1;         // workers on this node (remote: 0 = as many as the run's nodes have)
  int incarnation = 0;     // how many times this node has been started before
  std::string executable;  // binary with the `worker` subcommand; empty = this one
  // Multi-host runs.
  std::string node_name;  // name the coordinator knows the node by (default: the host name)
  std::string gloo_host;  // address Gloo binds to; "" = GLOO_SOCKET_IFNAME's, else the route's
  std::string token;      // run token (BW_RUN_TOKEN)
  double wait_s = 600;    // longest wait for the coordinator: to come up, accept, or come back
  // Started by `breakwater launch`: the token is the first line of standard input, and the
  // agent (with its workers) ends when that input closes (the launcher has gone).
  bool token_stdin = false;
  // A run whose control store is etcd (`--control`, leadership.h): the coordinator is whoever
  // leads `run_id` (its store's address read from the control store). When its store goes, the
  // agent keeps its workers (their store clients follow the leadership too), waits up to
  // `leaderless_timeout_s` for a coordinator that takes the run over, and registers again with
  // it as the same node and incarnation.
  std::string control, run_id;
  double leaderless_timeout_s = 30;
};

// Returns the process exit status.
int run_agent(const AgentArgs& args);
int run_remote_agent(AgentArgs args);

}  // namespace bw::elastic
