// A plan: the pipelines in use (a template each, on concrete nodes), the microbatches each gets,
// and the predicted step time. What the runtime executes and the forecast simulates.
//
// Invariants (checked by validate_plan): pipelines use disjoint nodes; each pipeline has exactly
// tmpl.num_nodes nodes and >= 1 microbatch; microbatches add up to global_microbatches; every
// template covers every layer once. Device (node, local) holds the layers of the chunks of the
// stage placed on it (Template::layers_of_stage); schedule_aware.h turns a template's schedule
// into a schedule::ScheduleSpec whose devices are the template's stages. Plain data: copy freely,
// no thread-safety concerns.
#pragma once

#include <optional>
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

// Where a device sits in a plan.
struct Placement {
  int pipeline = 0;
  int stage = 0;
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
  // The pipeline and stage a device runs; nullopt for a device not in the plan.
  std::optional<Placement> locate(const DeviceRef& device) const;
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

// Parameter bytes held by the template's busiest node (sum over its stages).
double max_node_param_bytes(const Template& t);
// Ring all-reduce over `pipelines` replicas: each node moves 2 (P - 1) / P of the parameter
// bytes it holds over its network link; 0 for one pipeline.
double allreduce_ms(int pipelines, double node_param_bytes, const Cluster& cluster);

// Recomputes pipeline_ms, allreduce_ms, step_ms, samples_per_s from pipelines.
void update_predictions(Plan& plan, const Cluster& cluster);

// JSON for programs (`breakwater plan --json`, plan publication by the coordinator). from_json
// reads what to_json writes (every field), throwing ConfigError naming a missing or bad field.
json::Json to_json(const Plan& plan);
json::Json to_json(const Template& t);
Plan plan_from_json(const json::Json& doc);
Template template_from_json(const json::Json& doc);

}  // namespace bw::plan
