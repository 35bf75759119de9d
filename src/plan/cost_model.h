// The closed-form cost model of one pipeline under 1F1B, shared by the template search and its
// brute-force oracle. Documented in docs/planning.md.
//
// A pipeline on n nodes of g devices is a sequence of stages; stage s holds the contiguous layers
// [first, first + count) and d_s devices of one node. Devices are laid out in stage order, so the
// stages of a pipeline fill its n*g devices exactly, node after node; a stage never straddles two
// nodes. A stage on d >= 2 devices is sharded (FSDP FULL_SHARD, as the runtime runs it): each
// device holds 1/d of the stage's parameters, gradients and AdamW moments, computes its share
// ceil(b/d) of every microbatch's b samples (so d <= b), and per layer and microbatch all-gathers
// the layer's parameters before forward and before backward and all-reduces its gradient after
// backward over the intra-node link, not overlapped with compute. d = 1 is a plain stage.
//
//   t_s  = (F_s + B_s) * q_s + x_s + c_s      per-microbatch time of stage s, q_s = ceil(b/d)/b
//   x_s  = 4 (d - 1) (count * latency + (P_s / d) / bw_intra)   collectives (0 for d = 1):
//          per layer 2 ring all-gathers (d-1)(lat + (P_l/d)/bw) + 1 ring all-reduce, twice that
//   c_s  = 2 * transfer(output bytes of s)    activation forward + gradient back (0 for the last)
//   T(m) = sum_s t_s + (m - 1) * t_k*         k* = bottleneck (largest t_s)
//
// T(m) is Oobleck's three-part iteration time (warm-up ramp into the bottleneck, the bottleneck's
// m - S + k* - 1 steady 1F1B pairs plus its own warm-up and cool-down, drain out of it); written
// out, the k*-dependent parts of ramp and drain add up to the sum above (docs/planning.md).
// Memory per device of stage s (1F1B keeps min(m, S - s) microbatches in flight at stage s):
//   mem_s = state_factor * P_s / d + [d >= 2] 2 max_l P_l + min(m, S - s) * A_s * q_s
// (the gathered parameters of one layer and its full gradient exist at once while it computes).
// With activation recomputation (CostOptions::recompute) a microbatch in flight keeps only the
// inputs of the stage's layers, I_s = sum_l I_l (I_l = the output bytes of layer l - 1; the
// token ids, A_0, for layer 0), and one layer's activations exist while it recomputes and runs
// its backward; its forward runs twice:
//   t_s   = (2 F_s + B_s) * q_s + x_s + c_s
//   mem_s = state_factor * P_s / d + [d >= 2] 2 max_l P_l + max_l A_l * q_s
//           + min(m, S - s) * I_s * q_s
#pragma once

#include <optional>
#include <vector>

#include "plan/cluster.h"
#include "plan/profile.h"
#include "shape/shape.h"

namespace bw::plan {

// One stage of a candidate pipeline, as searched: layers and device count.
struct StageShape {
  int first_layer = 0;
  int num_layers = 0;
  int num_devices = 0;
  auto operator<=>(const StageShape&) const = default;
};

// Bytes of parameter, gradient and AdamW state per byte of fp32 parameters (profiles give
// param_bytes at 4 bytes a parameter): 16 / 4, in fp32 and bf16 mixed precision alike.
inline constexpr double kStateBytesPerParamByte =
    shape::state_bytes_per_parameter(shape::Precision::kFp32) / shape::kParameterBytes;

struct CostOptions {
  int microbatches = 1;  // m the pipeline is evaluated at
  // Per-device bytes of parameters, gradients and optimizer state per byte of parameters.
  double state_bytes_per_param_byte = kStateBytesPerParamByte;
  // Most devices one stage may span (1 = no sharding); 0 = the node's device count g. Stages
  // never span more than g devices, nor more than the profile's microbatch size.
  int max_stage_devices = 0;
  // Activation recomputation (the runtime's pipeline.recompute): a microbatch in flight keeps
  // only each layer's input; a layer's forward runs again just before its backward.
  bool recompute = false;
};

struct PipelineCost {
  std::vector<double> stage_ms;      // t_s
  std::vector<double> stage_memory;  // mem_s in bytes, per device
  double sum_ms = 0;
  double max_ms = 0;
  int bottleneck = 0;       // largest t_s (first such index)
  double iteration_ms = 0;  // T(m)
  double peak_memory_bytes = 0;
  bool fits = false;  // every stage's memory <= the device memory and its width is allowed
};

// Prefix sums over a profile for O(1) stage costs.
class CostModel {
 public:
  CostModel(const Profile& profile, const Cluster& cluster, CostOptions options);

  int num_layers() const { return num_layers_; }
  int devices_per_node() const { return cluster_.devices_per_node; }
  int microbatch_size() const { return microbatch_size_; }
  // Widest stage allowed: min(g, max_stage_devices, microbatch size) (docs/planning.md).
  int max_stage_devices() const { return max_stage_devices_; }
  const CostOptions& options() const { return options_; }
  const Cluster& cluster() const { return cluster_; }

  double compute_ms(int first, int count) const;  // sum of F + B over the layers
  double forward_ms(int first, int count) const;
  double backward_ms(int first, int count) const;
  double param_bytes(int first, int count) const;
  double activation_bytes(int first, int count) const;
  double max_layer_param_bytes(int first, int count) const;  // largest P_l, O(1)
  double max_layer_activation_bytes(int first, int count) const;  // largest A_l, O(1)
  // I_s: the bytes of the layers' inputs, what recomputation keeps per microbatch in flight.
  double input_bytes(int first, int count) const;
  bool recompute() const { return options_.recompute; }
  double output_bytes(int last_layer) const { return output_bytes_[last_layer]; }
  // Samples of a microbatch the busiest of d devices computes, over the microbatch size:
  // ceil(b / d) / b (1 for d = 1).
  double sample_share(int devices) const;
  // c_s for a stage ending at `last_layer` whose successor is (not) on the same node.
  double comm_ms(int last_layer, bool next_same_node) const;
  // A device's share of the stage's forward + backward compute per microbatch (with the
  // recomputed forward when recompute()).
  double stage_compute_ms(int first, int count, int devices) const {
    return (compute_ms(first, count) + (recompute() ? forward_ms(first, count) : 0)) *
           sample_share(devices);
  }
  // Per microbatch: the parameter all-gathers (forward, backward) and gradient all-reduces of a
  // sharded stage's layers (0 for one device).
  double shard_comm_ms(int first, int count, int devices) const;
  // t_s without the boundary transfer: compute share + shard collectives.
  double stage_local_ms(int first, int count, int devices) const {
    return stage_compute_ms(first, count, devices) + shard_comm_ms(first, count, devices);
  }
  // mem_s per device with `in_flight` microbatches' activations kept.
  double stage_memory(int first, int count, int devices, int in_flight) const;
  // The parts of mem_s: state (parameters, gradients, optimizer) per device, the transient
  // gathered layer + its gradient (+ one layer's recomputed activations), and activations (or,
  // recomputing, layer inputs) per in-flight microbatch per device.
  double stage_state_bytes(int first, int count, int devices) const;
  double stage_transient_bytes(int first, int count, int devices) const;
  double stage_activation_bytes(int first, int count, int devices) const {
    return (recompute() ? input_bytes(first, count) : activation_bytes(first, count)) *
           sample_share(devices);
  }

  // Evaluates a full pipeline from scratch (the oracle's path): checks the shape covers every
  // layer and fills num_nodes * g devices without straddling a node. A stage wider than
  // max_stage_devices() is costed but makes the pipeline not fit (the runtime cannot run it).
  PipelineCost evaluate(const std::vector<StageShape>& stages, int num_nodes) const;

 private:
  int num_layers_;
  int microbatch_size_;
  int max_stage_devices_;
  Cluster cluster_;
  CostOptions options_;
  std::vector<double> fwd_, bwd_, param_, act_, in_;  // prefix sums, size L + 1
  std::vector<double> output_bytes_;
  // Sparse tables of layer parameter and activation bytes: max_param_[k][i] = max of P_l over
  // [i, i + 2^k), likewise max_act_ for A_l.
  std::vector<std::vector<double>> max_param_, max_act_;
};

}  // namespace bw::plan
