// The node agent (`breakwater agent`, docs/elastic.md "Agent"): one process per node, started by
// the coordinator for local runs. It starts the node's workers (our own binary's `worker`
// subcommand), bumps the node's heartbeat counter, and watches the workers: the moment one exits
// it writes an exit report (which worker, its status) to the store, kills the node's other
// workers and exits with status 3; a worker's death takes its node out (Oobleck's unit of
// failure). When every worker exits 0 (shutdown), the agent exits 0. Workers die with their agent
// (PR_SET_PDEATHSIG), and the agent with the coordinator, so no process outlives the run.
#pragma once

#include <string>

namespace bw::elastic {

struct AgentArgs {
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int node = 0;
  int devices = 1;      // workers on this node
  int incarnation = 0;  // how many times this node has been started before
  std::string executable;  // binary with the `worker` subcommand; empty = this one
};

// Returns the process exit status.
int run_agent(const AgentArgs& args);

}  // namespace bw::elastic
