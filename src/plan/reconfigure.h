// Reconfiguration after failures and joins (Oobleck, SOSP'23, section 4.3).
//
// Failures: each pipeline drops its failed nodes. One that keeps >= n0 nodes takes the template
// for its new size; a shorter one borrows nodes from the largest pipeline that can spare them
// (stays >= n0 after lending); if none can, short pipelines merge (and a merged group still short
// joins the smallest healthy pipeline). Every result comes from templates only; the batch is
// re-split and, for every device that newly needs a layer, a surviving replica to copy it from is
// named (spread round-robin over the replicas).
//
// With at most f failures on a plan of >= f + 1 pipelines a pipeline survives intact, so every
// layer keeps a live replica; beyond that, if some layer lost every replica, RecoveryUnavailable
// names those layers.
#pragma once

#include <string>
#include <vector>

#include "plan/instantiate.h"

namespace bw::plan {

class RecoveryUnavailable : public ConfigError {
 public:
  RecoveryUnavailable(const std::string& what, std::vector<int> lost_layers)
      : ConfigError(what), lost_layers_(std::move(lost_layers)) {}
  const std::vector<int>& lost_layers() const { return lost_layers_; }

 private:
  std::vector<int> lost_layers_;
};

struct Reconfiguration {
  Plan plan;                      // generation = old generation + 1
  std::vector<LayerCopy> copies;  // sorted by (to, layer)
};

// Throws RecoveryUnavailable when a layer lost all replicas or the survivors are fewer than
// n0 nodes; ConfigError when a failed node is not in the plan.
Reconfiguration reconfigure(const Plan& plan, const TemplateSet& templates,
                            const std::vector<NodeId>& failed, const Cluster& cluster);

// Adds `new_nodes` (not in the plan): new pipelines of them, each as large as a template allows
// while the rest is none or >= n0; fewer than n0 left over grow the smallest pipelines one node
// at a time.
Reconfiguration join(const Plan& plan, const TemplateSet& templates,
                     const std::vector<NodeId>& new_nodes, const Cluster& cluster);

// The copy list between two plans: every (device, layer) of `next` not held by that device in
// `prev`, with a source among prev's devices on nodes not in `dead`. Throws RecoveryUnavailable
// when a needed layer has no live source.
std::vector<LayerCopy> layer_copies(const Plan& prev, const Plan& next,
                                    const std::vector<NodeId>& dead);

}  // namespace bw::plan
