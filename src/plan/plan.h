// A plan: the pipelines in use (a template each, on concrete nodes), the microbatches each gets,
// and the predicted step time. What the runtime executes and the forecast simulates.
//
// Invariants (checked by validate_plan): pipelines use disjoint nodes; each pipeline has exactly
// tmpl.num_nodes nodes and >= 1 microbatch; microbatches add up to global_microbatches; every
// template covers every layer once. Device (node, local) holds the layers of the stage placed on
// it. Plain data: copy freely, no thread-safety concerns.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "core/ids.h"
#include "plan/templates.h"

namespace bw::plan {

struct Pipeline {
  Template tmpl;
  std::vector<NodeId> nodes;  // tmpl.num_nodes entries; stage s runs on nodes[stages[s].node]
  int microbatches = 0;
  double iteration_ms = 0;  // tmpl.iteration_ms(microbatches)

  NodeId node_of_stage(int stage) const { return nodes[tmpl.stages[stage].node]; }
};

// One device: a node and a local device index on it.
struct DeviceRef {
  NodeId node;
  int device = 0;
  auto operator<=>(const DeviceRef&) const = default;
};

struct Plan {
  int generation = 0;
  int num_layers = 0;
  int devices_per_node = 0;
  int microbatch_size = 1;
  int global_microbatches = 0;
  std::vector<Pipeline> pipelines;
  double pipeline_ms = 0;   // slowest pipeline's iteration time
  double allreduce_ms = 0;  // cross-pipeline gradient all-reduce estimate
  double step_ms = 0;       // pipeline_ms + allreduce_ms
  double samples_per_s = 0;

  int num_nodes() const;
  std::vector<NodeId> nodes() const;  // ascending
  // Devices holding `layer` across all pipelines (one replica per pipeline, on each of the
  // stage's devices).
  std::vector<DeviceRef> replicas(int layer) const;
};

// A device of the new plan that needs `layer` and did not hold it before, and the surviving
// device of the old plan to copy parameters and optimizer state from.
struct LayerCopy {
  LayerId layer;
  DeviceRef to;
  DeviceRef from;
};

// Throws InternalError naming the broken invariant.
void validate_plan(const Plan& plan);

// Recomputes pipeline_ms, allreduce_ms, step_ms, samples_per_s from pipelines.
void update_predictions(Plan& plan, const Cluster& cluster);

json::Json to_json(const Plan& plan);
json::Json to_json(const Template& t);

}  // namespace bw::plan
