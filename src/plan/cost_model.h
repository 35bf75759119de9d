// The closed-form cost model of one pipeline under 1F1B, shared by the template search and its
// brute-force oracle. Documented in docs/planning.md.
//
// A pipeline on n nodes of g devices is a sequence of stages; stage s holds the contiguous layers
// [first, first + count) and d_s devices of one node, data-parallel (each device runs 1/d_s of
// every microbatch). Devices are laid out in stage order, so the stages of a pipeline fill its
// n*g devices exactly, node after node; a stage never straddles two nodes.
//
//   t_s  = (F_s + B_s) / d_s + c_s            per-microbatch time of stage s
//   c_s  = 2 * transfer(output bytes of s)    activation forward + gradient back (0 for the last)
//   T(m) = sum_s t_s + (m - 1) * t_k*         k* = bottleneck (largest t_s)
//
// T(m) is Oobleck's three-part iteration time (warm-up ramp into the bottleneck, the bottleneck's
// m - S + k* - 1 steady 1F1B pairs plus its own warm-up and cool-down, drain out of it); written
// out, the k*-dependent parts of ramp and drain add up to the sum above (docs/planning.md).
// Memory per device of stage s (1F1B keeps min(m, S - s) microbatches in flight at stage s):
//   mem_s = state_factor * P_s + min(m, S - s) * A_s / d_s
#pragma once

#include <optional>
#include <vector>

#include "plan/cluster.h"
#include "plan/profile.h"

namespace bw::plan {

// One stage of a candidate pipeline, as searched: layers and device count.
struct StageShape {
  int first_layer = 0;
  int num_layers = 0;
  int num_devices = 0;
  auto operator<=>(const StageShape&) const = default;
};

struct CostOptions {
  int microbatches = 1;  // m the pipeline is evaluated at
  // Per-device bytes of parameters, gradients and optimizer state per byte of parameters:
  // 4 = fp32 weights + fp32 grads + two fp32 AdamW moments.
  double state_bytes_per_param_byte = 4;
};

struct PipelineCost {
  std::vector<double> stage_ms;      // t_s
  std::vector<double> stage_memory;  // mem_s in bytes, per device
  double sum_ms = 0;
  double max_ms = 0;
  int bottleneck = 0;       // largest t_s (first such index)
  double iteration_ms = 0;  // T(m)
  double peak_memory_bytes = 0;
  bool fits = false;  // every stage's memory <= the device memory
};

// Prefix sums over a profile for O(1) stage costs.
class CostModel {
 public:
  CostModel(const Profile& profile, const Cluster& cluster, CostOptions options);

  int num_layers() const { return num_layers_; }
  int devices_per_node() const { return cluster_.devices_per_node; }
  const CostOptions& options() const { return options_; }
  const Cluster& cluster() const { return cluster_; }

  double compute_ms(int first, int count) const;  // sum of F + B over the layers
  double forward_ms(int first, int count) const;
  double backward_ms(int first, int count) const;
  double param_bytes(int first, int count) const;
  double activation_bytes(int first, int count) const;
  double output_bytes(int last_layer) const { return output_bytes_[last_layer]; }
  // c_s for a stage ending at `last_layer` whose successor is (not) on the same node.
  double comm_ms(int last_layer, bool next_same_node) const;
  // t_s without the communication term.
  double stage_compute_ms(int first, int count, int devices) const {
    return compute_ms(first, count) / devices;
  }
  double stage_memory(int first, int count, int devices, int in_flight) const;

  // Evaluates a full pipeline from scratch (the oracle's path): checks the shape covers every
  // layer and fills num_nodes * g devices without straddling a node.
  PipelineCost evaluate(const std::vector<StageShape>& stages, int num_nodes) const;

 private:
  int num_layers_;
  Cluster cluster_;
  CostOptions options_;
  std::vector<double> fwd_, bwd_, param_, act_;  // prefix sums, size L + 1
  std::vector<double> output_bytes_;
};

}  // namespace bw::plan
