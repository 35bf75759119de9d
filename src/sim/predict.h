// What the planner asks the simulator: how long one iteration of a schedule takes on given costs,
// and whether it fits in memory; and which schedule kind is fastest among those that fit.
//
//   LinkModel link{.latency_ms = 0.005, .bandwidth_gbps = 200};
//   Prediction p = predict({.kind = "hanayo", .devices = 8, .microbatches = 32, .waves = 2},
//                          layers, link);
//   if (fits(p, 80e9)) use(p.iteration_ms);
//
// The layer overloads partition the layers into the schedule's model stages (balanced_partition:
// P stages for 1F1B, vP for interleaved, 2WP for Hanayo, ...) and then simulate the compute-only
// schedule (communication implicit, so the prediction does not depend on how receives are posted).
// Each call generates the schedule afresh; it takes well under a millisecond for typical sizes.
#pragma once

#include <optional>
#include <vector>

#include "schedule/generate.h"
#include "sim/cost_model.h"

namespace bw::sim {

struct Prediction {
  schedule::ScheduleSpec spec;
  double iteration_ms = 0;  // makespan of one iteration (all microbatches, forward and backward)
  double bubble_ratio = 0;  // overall
  std::vector<double> peak_activation_bytes;  // per device
  std::vector<double> param_bytes;            // per device (Chimera holds two stages' worth)

  // Largest per-device total of activations and parameters times `param_factor` (e.g. 4 for fp32
  // weights + gradient + two Adam moments).
  double peak_memory_bytes(double param_factor = 1.0) const;
};

// On explicit per-chunk costs (costs.chunks has num_chunks(spec) entries).
Prediction predict(const schedule::ScheduleSpec& spec, const CostModel& costs);
double predict_iteration_ms(const schedule::ScheduleSpec& spec, const CostModel& costs);

// On per-layer costs, balanced over the schedule's stages. ConfigError when the model has fewer
// layers than the schedule has stages.
Prediction predict(const schedule::ScheduleSpec& spec, const std::vector<LayerCost>& layers,
                   const LinkModel& link = {});
double predict_iteration_ms(const schedule::ScheduleSpec& spec,
                            const std::vector<LayerCost>& layers, const LinkModel& link = {});

// True when every device's activations + param_factor * parameters fit in `device_memory_bytes`.
bool fits(const Prediction& p, double device_memory_bytes, double param_factor = 1.0);

// The fastest of `candidates` that fits (ties: the earlier candidate); nullopt when none fits or
// none is valid for this model (invalid candidates are skipped, not errors).
std::optional<Prediction> fastest_fitting(const std::vector<schedule::ScheduleSpec>& candidates,
                                          const std::vector<LayerCost>& layers,
                                          const LinkModel& link, double device_memory_bytes,
                                          double param_factor = 1.0);

// Every kind with its usual parameters for P devices and B microbatches: gpipe, 1f1b,
// interleaved v = 2 (when Megatron accepts B), chimera (P even), hanayo W = 1, 2, 4, zb-h1, zb-v.
std::vector<schedule::ScheduleSpec> candidate_specs(int devices, int microbatches);

}  // namespace bw::sim
