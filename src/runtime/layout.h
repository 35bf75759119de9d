// The run layout: what one generation's plan means to the workers. It names every rank's
// pipeline, device, chunks and layers, the microbatches each pipeline computes per step, and each
// pipeline's lowered schedule. The coordinator builds it from a plan and publishes it as JSON in
// the store (keyed by generation); every worker parses the same JSON and derives the same
// replica sets and gradient buckets from it (docs/design.md "Runtime": per-layer gradient sync).
//
// Invariants (checked by validate_layout): ranks are numbered pipeline by pipeline, so pipeline p
// holds ranks [first_rank, first_rank + num_devices); each pipeline's chunks cover layers
// [0, num_layers) contiguously, in order, each chunk at least one layer; the pipelines'
// microbatch ranges tile [0, total_microbatches).
//
// Thread-safety: plain values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "schedule/schedule.h"

namespace bw::runtime {

struct PipelineLayout {
  int first_rank = 0;
  int num_devices = 0;
  std::vector<std::pair<int, int>> chunk_layers;  // chunk -> layers [begin, end)
  int first_microbatch = 0;                       // global microbatch index of local microbatch 0
  int num_microbatches = 0;
  schedule::Schedule schedule;  // lowered (with SEND/RECV), over this pipeline's devices
};

struct RunLayout {
  int generation = 0;
  int num_layers = 0;
  int vocab_size = 0;  // of the dataset, so ranks without data build the same shapes
  int microbatch_size = 1;
  int total_microbatches = 0;  // per step, over all pipelines
  std::vector<PipelineLayout> pipelines;

  int world_size() const;
  // The pipeline and the device within it of a global rank.
  std::pair<int, int> locate(int rank) const;
  // Layers held by `rank`, ascending.
  std::vector<int> layers_of(int rank) const;
  // The rank holding `layer` in pipeline p.
  int rank_of_layer(int pipeline, int layer) const;
  // The replicas of `layer`: one rank per pipeline, ascending.
  std::vector<int> replicas(int layer) const;
};

// A gradient bucket: consecutive layers [first_layer, end_layer) with the same replica set.
struct Bucket {
  int first_layer = 0;
  int end_layer = 0;
  std::vector<int> ranks;  // ascending
};

// All buckets of the model, in layer order; every rank derives the same list, so the collectives
// on each sub-group happen in one global order (no deadlock between overlapping groups).
std::vector<Bucket> gradient_buckets(const RunLayout& layout);

// Splits `num_layers` into `num_chunks` contiguous ranges as evenly as possible (earlier chunks
// get the extra layers). ConfigError when num_chunks > num_layers, with the fix.
std::vector<std::pair<int, int>> split_layers(int num_layers, int num_chunks);

// Splits `total` microbatches over pipelines in proportion to `weights` (largest remainder), each
// pipeline at least one. ConfigError if total < number of pipelines.
std::vector<int> split_microbatches(int total, const std::vector<double>& weights);

// Throws InternalError naming the first broken invariant.
void validate_layout(const RunLayout& layout);

nlohmann::json to_json(const RunLayout& layout);
RunLayout layout_from_json(const nlohmann::json& doc);

}  // namespace bw::runtime
