// Fault injection for tests and demos (`--elastic.inject`, docs/elastic.md "Fault injection").
//
// A spec list, comma-separated: `ACTION:node=N:step=S[:phase=P][:device=D]`, e.g.
// `kill:node=2:step=5:phase=grad_sync,hang:node=1:step=9`, and `slow:node=N:factor=F[:step=S]
// [:device=D]` (from step S on, default 0, every forward and backward computation of that worker
// takes F >= 1 times as long, as on a slower device; it does not fire once but lasts, through
// recoveries too). Actions: `kill` (SIGKILL of the node's
// worker), `hang` (SIGSTOP of it), `agent` (SIGKILL of the node's agent, whose workers die with
// it), `nan` (one gradient entry of the worker set to NaN before the gradient sync, so the step's
// gradient norm is not finite; phase grad_sync only), `kill_coordinator:step=S` (SIGKILL of the
// leading coordinator right after the commit of step S is durable in the control store, before
// any worker can read it; `kill_coordinator:phase=end`: once every worker reported the end of the
// run, before the end is published; `kill_coordinator:step=S:phase=state_transfer[:node=N]
// [:device=D]`: while that worker is in the middle of the state transfer of the generation
// starting at step S, which it marks in the store, waiting until a new leader's store serves it;
// for runs whose control store is etcd, with a standby to take over; the coordinator kills itself
// once per run, after a fenced create of the fault's key). Phases: agent_startup (the node's agent
// itself is killed or stopped before its first heartbeat, before it starts its workers; kill and
// hang only, `step` and `device` ignored; fired by the agent through its own Injector with
// device 0), startup (before the worker's first
// heartbeat; kill and hang only, `step` ignored), forward, backward, p2p, grad_sync (default
// forward), commit (after the step is committed, before the update), optimizer (after the
// update), and, in a generation after a reconfiguration, reconfigure (while the groups are built)
// and state_transfer (while layers move); for those two, `step` is the step the new generation
// starts at; eval (before a forward of the validation loss due after `step` updates; `step` =
// train.steps for the one after the last step). Each spec fires once
// (a store counter decides), in the worker `device` (default 0) of node `node`, which records the
// wall-clock time of the fault so recovery is measured from it.
//
// Thread-safety: an Injector is used by its worker's main thread.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace bw::model {
class Layer;
}

namespace bw::elastic {

struct FaultSpec {
  std::string action;   // kill | hang | agent | nan | slow | kill_coordinator
  int node = 0;         // -1: kill_coordinator (no node's)
  double factor = 1.0;  // slow only
  int device = 0;
  int step = 0;
  std::string phase = "forward";
};

// ConfigError naming the bad entry and the expected form.
std::vector<FaultSpec> parse_faults(const std::string& text);

// Wall-clock milliseconds since the epoch (for times compared across processes).
double wall_ms();

class Injector {
 public:
  Injector(std::vector<FaultSpec> specs, int node, int device,
           c10::intrusive_ptr<c10d::Store> store);
  // Fires every spec of this worker for (step, phase) that has not fired yet; true when one of
  // them is `nan` (the caller then poisons its gradients with poison_gradients()).
  bool at(int step, const std::string& phase);
  bool empty() const { return mine_.empty(); }
  // The slowdown of this worker at `step` (the largest factor of its `slow` specs from a step
  // <= `step`; 1 = none).
  double slowdown(int step) const;

 private:
  std::vector<std::pair<int, FaultSpec>> mine_;  // (index in the list, spec)
  std::set<int> fired_here_;                     // kill_coordinator specs this process fired
  c10::intrusive_ptr<c10d::Store> store_;
};

// Sets the first gradient entry of the first layer that has one to NaN (fault injection `nan`).
void poison_gradients(const std::map<int, std::shared_ptr<model::Layer>>& layers);

}  // namespace bw::elastic
