// Nodes of a local run: each node's agent is a child process of the coordinator (`breakwater
// agent`), killed with SIGKILL to take the node out (its workers die with it).
//
// Thread-safety: one thread uses a LocalNodes.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "elastic/process.h"
#include "elastic/supervisor.h"

namespace bw::elastic {

class LocalNodes final : public Nodes {
 public:
  LocalNodes(std::string executable, std::string store_host, int store_port, int devices_per_node)
      : exe_(std::move(executable)),
        host_(std::move(store_host)),
        port_(store_port),
        devices_(devices_per_node) {}
  ~LocalNodes() override { kill_all(); }

  void start(int node, int incarnation) override;
  void kill(int node) override;
  std::vector<std::pair<int, int>> poll() override;
  void kill_all();
  // Waits up to `timeout_ms` for every agent to exit on its own, then kills the rest; returns
  // the nodes whose agents had to be killed or exited non-zero.
  std::vector<int> wait_all(double timeout_ms);
  int pid(int node) const;

 private:
  std::string exe_, host_;
  int port_;
  int devices_;
  std::map<int, ChildProcess> agents_;
  std::map<int, bool> reported_;
};

}  // namespace bw::elastic
