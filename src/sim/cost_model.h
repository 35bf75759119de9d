// Costs the simulator runs a schedule on: per-chunk compute times and memory, and links.
//
// A chunk's F/B/I/W times are per microbatch. `activation_bytes` is what its forward keeps per
// microbatch until its backward frees it (B, or W for a split backward); `output_bytes` is what
// its forward sends to the next chunk (its gradient comes back the same size). Link bandwidth is
// in gigabits per second (as plan/cluster.h), 0 meaning infinite; latency in milliseconds.
//
// Three ways to build one: uniform (every chunk equal: the closed-form tests), per-device stage
// costs spread over a schedule's chunks (compare kinds on one model: `breakwater schedule`), and
// per-layer costs with a layer partition (the planner).
#pragma once

#include <vector>

#include "schedule/schedule.h"

namespace bw::sim {

struct ChunkCost {
  double forward_ms = 0;
  double backward_ms = 0;         // full backward (B)
  double backward_input_ms = 0;   // I
  double backward_weight_ms = 0;  // W
  double activation_bytes = 0;
  double output_bytes = 0;
  double param_bytes = 0;
  // PyTorch's chunk actions (action.h), 0 unless given: UNSHARD's all-gather runs in the
  // background and the chunk's next compute waits for it; REDUCE_GRAD holds the device.
  double unshard_ms = 0;
  double reduce_grad_ms = 0;
};

struct LinkModel {
  double latency_ms = 0;
  double bandwidth_gbps = 0;  // gigabits per second; 0 = infinite

  // Time the link is busy with `bytes` (serialisation), and that plus latency.
  double busy_ms(double bytes) const {
    if (bandwidth_gbps <= 0 || bytes <= 0) return 0;
    return bytes * 8.0 / (bandwidth_gbps * 1e9) * 1e3;
  }
  double transfer_ms(double bytes) const { return latency_ms + busy_ms(bytes); }
};

struct CostModel {
  std::vector<ChunkCost> chunks;  // indexed by chunk of the schedule simulated
  LinkModel link;                 // between devices of one node (all devices when flat)
  LinkModel inter_node_link;      // between nodes, used when devices_per_node > 0
  int devices_per_node = 0;       // 0: one flat network
  // The runtime's own time per action (posting a send or receive, bookkeeping around a compute),
  // charged to the device after each action as idle time. 0 models a free runtime; the runtime
  // benchmark measures it (docs/runtime.md) so predictions of real steps include it.
  double action_overhead_ms = 0;
  // An OVERLAP_F_B pair runs as one interval of length t_a + t_b - overlap_f_b * min(t_a, t_b):
  // 0 (the default) when the two computations share the device, 1 when the shorter one hides
  // entirely behind the longer (docs/schedules.md).
  double overlap_f_b = 0;

  const LinkModel& link_between(int src_device, int dst_device) const;
};

// Every chunk of the `num_chunks` the same; I and W each half of B.
CostModel uniform_costs(int num_chunks, double forward_ms, double backward_ms,
                        double activation_bytes = 1.0, double output_bytes = 0.0);

// Costs of one device's share of the model (a 1F1B stage: 1/P of it) per microbatch, spread over
// the chunks of `s`: a replica of S chunks on P devices gives each chunk stage * P / S (so
// Hanayo's 2WP chunks each get 1/(2W) of a stage). I and W default to half of B each.
struct StageCost {
  double forward_ms = 1;
  double backward_ms = 2;
  double backward_input_ms = -1;   // < 0: backward_ms / 2
  double backward_weight_ms = -1;  // < 0: backward_ms / 2
  double activation_bytes = 1;     // M_a: one stage's activations per microbatch
  double output_bytes = 0;         // sent between consecutive stages per microbatch
  double param_bytes = 0;
};
CostModel stage_costs(const schedule::Schedule& s, const StageCost& stage,
                      const LinkModel& link = {});

// Per-layer costs, as in a profile (plan/profile.h).
struct LayerCost {
  double forward_ms = 0;
  double backward_ms = 0;
  double backward_input_ms = -1;   // < 0: backward_ms / 2
  double backward_weight_ms = -1;  // < 0: backward_ms - input part
  double activation_bytes = 0;
  double output_bytes = 0;
  double param_bytes = 0;
};

// Chunk costs from layers: stage k holds layers [stage_begin[k], stage_begin[k+1]) and chunk c
// holds stage chunk_stage[c] (empty: chunk c holds stage c). ConfigError when the partition does
// not cover the layers exactly or leaves a stage empty.
CostModel layer_costs(const std::vector<LayerCost>& layers, const std::vector<int>& stage_begin,
                      const std::vector<int>& chunk_stage, const LinkModel& link = {});

// The contiguous partition of layers into `num_stages` non-empty stages that minimises the
// largest stage's forward + backward time (exact). Returns stage_begin (num_stages + 1 entries).
// ConfigError when there are fewer layers than stages.
std::vector<int> balanced_partition(const std::vector<LayerCost>& layers, int num_stages);

}  // namespace bw::sim
