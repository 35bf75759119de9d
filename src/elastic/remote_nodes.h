// Nodes of a multi-host run (docs/multihost.md): agents started by someone else (by hand, by
// `breakwater launch` over ssh, by `srun`) register themselves through the store; the coordinator
// cannot start or kill them. A registration is accepted only with a valid proof of the run token
// (token.h), and only for a node the run has room for; the reply gives the agent its node id and
// incarnation. "Killing" a node fences it: a key its agent polls, after which the agent stops its
// workers and registers again when it can (a host whose link came back re-joins this way). A
// node that is lost is found by the supervisor through heartbeats and exit reports, as for local
// nodes; a lost node's agent that registers again is reported by arrived() and joins at a step
// boundary through the supervisor's join path.
//
// Nodes are slots 0..N-1, given in the order of the agents' names once N have registered; a name
// keeps its slot, and a new name may take the slot of a lost node.
//
// Thread-safety: one thread (the supervisor's) uses a RemoteNodes.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/messages.h"
#include "elastic/supervisor.h"

namespace c10d {
class Store;
}

namespace bw::elastic {

class RemoteNodes final : public Nodes {
 public:
  RemoteNodes(c10::intrusive_ptr<c10d::Store> store, std::string token, int nodes,
              int devices_per_node);
  // A run left without end_run() (an exception) tells its agents that it is over.
  ~RemoteNodes() override;

  // Waits up to `timeout_s` until every node has an agent; CommError naming the registered
  // agents and the missing ones (by name when `expected` names them) after that.
  // `cancelled` is asked between polls (Ctrl-C): Interrupted when it says yes.
  void wait_for_agents(double timeout_s, const std::vector<std::string>& expected,
                       const std::function<bool()>& cancelled = {});

  // A coordinator that took the run over (Supervisor::adopt): the nodes as its predecessor had
  // them (names, incarnations). Their agents register again as that node and incarnation
  // (Registration::node) and are taken back at once, their workers running on.
  void adopt(const std::vector<RunStateNode>& nodes);
  // After adopt(): waits up to `timeout_s` until the agents of `expected` are back; returns the
  // nodes that are (the others are lost).
  std::set<int> wait_for_returns(const std::set<int>& expected, double timeout_s,
                                 const std::function<bool()>& cancelled = {});

  void start(int node, int incarnation) override;  // accepts the node's waiting registration
  void kill(int node) override;                    // fences the node's current incarnation
  std::vector<std::pair<int, int>> poll() override;
  std::vector<int> arrived() override;
  double launch_ms(int node) const override { return slots_.at(node).launch_ms; }

  // Publishes that the run is over (`how`: "finished" or why it stopped) and waits up to
  // `timeout_ms` for the agents still in the run to acknowledge.
  void end_run(const std::string& how, double timeout_ms);
  // This coordinator lost its leadership of the run (leadership.h): it tells its agents nothing,
  // since another coordinator may lead them now.
  void abandon() { ended_ = true; }

  // Every agent must report a corpus at data.path with this content (TokenDataset::
  // content_digest of the coordinator's copy at `path`); an agent whose copy differs, is missing
  // or reports none is refused. Unset: no check.
  void require_data(std::string path, std::string digest) {
    data_path_ = std::move(path);
    data_digest_ = std::move(digest);
  }
  // Every agent must report a Hugging Face folder at model.init_from with this content
  // (runtime::HfFolder::content_digest of the coordinator's copy at `path`): the workers build
  // their layers from their own host's copy. Refused as for the corpus. Unset: no check.
  void require_weights(std::string path, std::string digest) {
    weights_path_ = std::move(path);
    weights_digest_ = std::move(digest);
  }

  // checkpoint.dir: every agent must be able to write there (refused otherwise, naming its host),
  // and reports whether it sees the coordinator's probe file there (keys::checkpoint_probe).
  // Unset: no check.
  void require_checkpoint_dir(std::string path) { checkpoint_dir_ = std::move(path); }
  // After wait_for_agents: whether every agent shares the coordinator's checkpoint.dir.
  bool all_share_checkpoint_dir() const;
  // The run writes checkpoints to one shared checkpoint.dir: an agent that does not see it is
  // refused from now on (its shards would be where no other host looks).
  void require_shared_checkpoint_dir() { shared_required_ = true; }

  const std::string& name(int node) const { return slots_.at(node).name; }
  int refused() const { return refused_; }  // registrations refused so far

 private:
  struct Slot {
    std::string name, host;
    int incarnation = 0;
    bool running = false;        // accepted and not fenced
    std::optional<int> waiting;  // a registration waiting for start()
    double launch_ms = 0;        // the agent's start-up as it reported it
    bool shares_checkpoint_dir = false;
  };
  struct Registration {
    int index = 0;
    std::string name, host;
    double launch_ms = 0;
    bool shares_checkpoint_dir = false;
  };
  void scan();
  void handle(int index, const std::string& json);
  void reply(int index, const std::string& json);
  void refuse(int index, const std::string& who, const std::string& why);

  c10::intrusive_ptr<c10d::Store> store_;
  std::string token_, nonce_;
  int nodes_;
  int devices_;
  int scanned_ = 0;
  double scan_blocked_since_ms_ = 0;
  bool assigned_ = false;
  std::vector<Registration> early_;  // before slots are assigned
  std::vector<Slot> slots_;
  std::vector<std::pair<int, int>> replaced_;  // (node, status) for poll()
  int refused_ = 0;
  bool ended_ = false;
  std::string data_path_, data_digest_;
  std::string weights_path_, weights_digest_;
  std::string checkpoint_dir_;
  bool shared_required_ = false;
};

}  // namespace bw::elastic
