// The run layout: what one generation's plan means to the workers. It names every rank's
// pipeline, device, chunks and layers, the microbatches each pipeline computes per step, and each
// pipeline's lowered schedule. The coordinator builds it from a plan and publishes it as JSON in
// the store (keyed by generation); every worker parses the same JSON and derives the same
// replica sets and gradient buckets from it (docs/design.md "Runtime": per-layer gradient sync).
//
// Sharded stages (docs/runtime.md "Sharded stages"): a schedule device of a pipeline (a stage) may
// run on `widths[k]` ranks of one node. Its ranks hold the same layers, each a contiguous slice of
// every layer's flat parameters (shard_range), and each computes a slice of every microbatch's
// samples (sample_range). A layer sharded in any pipeline is "segmented": its gradient sync, norm
// and AdamW run per segment, the pieces cut at every pipeline's shard boundaries, so replicas of
// a segment stay bitwise identical however the pipelines cut the layer.
//
// Invariants (checked by validate_layout): ranks are numbered pipeline by pipeline and stage by
// stage, so pipeline p holds ranks [first_rank, first_rank + num_ranks()) and its stage k the
// ranks stage_first_rank(k) + [0, widths[k]); each pipeline's chunks cover layers
// [0, num_layers) contiguously, in order, each chunk at least one layer; the pipelines'
// microbatch ranges tile [0, total_microbatches).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "schedule/schedule.h"

namespace bw::runtime {

struct PipelineLayout {
  int first_rank = 0;
  int num_devices = 0;                            // schedule devices (stages)
  std::vector<int> widths;                        // ranks per stage (size num_devices, each >= 1)
  std::vector<std::pair<int, int>> chunk_layers;  // chunk -> layers [begin, end)
  int first_microbatch = 0;                       // global microbatch index of local microbatch 0
  int num_microbatches = 0;
  schedule::Schedule schedule;  // lowered (with SEND/RECV), over this pipeline's devices

  int num_ranks() const;
  int stage_first_rank(int stage) const;  // global rank of the stage's member 0
  int width(int stage) const { return widths[stage]; }
};

// [first, end) of a range of `n` items cut into `parts` near-equal contiguous pieces (the first
// n % parts get one more): piece `index`.
std::pair<int64_t, int64_t> split_range(int64_t n, int parts, int index);

// A segment of a segmented layer's flat parameters and the ranks holding it, one per pipeline.
struct Segment {
  int layer = 0;
  int64_t begin = 0, end = 0;
  std::vector<int> ranks;  // ascending
};

struct RunLayout {
  int generation = 0;
  int num_layers = 0;
  int vocab_size = 0;  // of the dataset, so ranks without data build the same shapes
  int microbatch_size = 1;
  int total_microbatches = 0;  // per step, over all pipelines
  std::vector<PipelineLayout> pipelines;

  int world_size() const;
  // The pipeline and the device (stage) within it of a global rank.
  std::pair<int, int> locate(int rank) const;
  // The rank's index among its stage's ranks, and the stage's width.
  int member_of(int rank) const;
  int width_of(int rank) const;
  // The ranks of the rank's stage, ascending.
  std::vector<int> stage_ranks(int rank) const;
  // Samples [first, end) of each microbatch that `rank` computes.
  std::pair<int, int> sample_range(int rank) const;
  // Whether some pipeline runs `layer` on a stage of more than one rank.
  bool segmented(int layer) const;
  // The slice [begin, end) of a layer of `numel` flat parameters that `rank` holds.
  std::pair<int64_t, int64_t> shard_range(int rank, int64_t numel) const;
  // A segmented layer's segments: cut at every pipeline's shard boundaries.
  std::vector<Segment> segments(int layer, int64_t numel) const;
  // Layers held by `rank`, ascending.
  std::vector<int> layers_of(int rank) const;
  // The rank holding `layer` in pipeline p (member 0 of its stage).
  int rank_of_layer(int pipeline, int layer) const;
  // The replicas of `layer`: one rank per pipeline (member 0 of each stage), ascending.
  std::vector<int> replicas(int layer) const;
  // The ranks that write `layer` into a checkpoint kept in 1 + `replicas` copies: one rank in
  // each of the first 1 + replicas pipelines (all of them when there are fewer), taking first
  // the pipelines that hold the layer whole (a stage of one rank), then those that hold it
  // sharded (member 0 of the stage, which gathers it), each group in pipeline order. Pipelines
  // never share a node, so the copies are on different nodes.
  std::vector<int> checkpoint_writers(int layer, int replicas) const;
};

// A gradient bucket: consecutive layers [first_layer, end_layer) with the same replica set.
struct Bucket {
  int first_layer = 0;
  int end_layer = 0;
  std::vector<int> ranks;  // ascending
};

// All buckets of the model's unsegmented layers, in layer order; every rank derives the same
// list, so the collectives on each sub-group happen in one global order (no deadlock between
// overlapping groups). Segmented layers sync per Segment instead (grad_sync.h).
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
