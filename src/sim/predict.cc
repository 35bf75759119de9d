#include "sim/predict.h"

#include <algorithm>

#include "core/error.h"
#include "sim/timeline.h"

namespace bw::sim {

double Prediction::peak_memory_bytes(double param_factor) const {
  double peak = 0;
  for (size_t d = 0; d < peak_activation_bytes.size(); ++d)
    peak = std::max(peak, peak_activation_bytes[d] + param_factor * param_bytes[d]);
  return peak;
}

Prediction predict(const schedule::ScheduleSpec& spec, const CostModel& costs) {
  const schedule::Schedule s = schedule::generate(spec);
  const SimResult r = simulate(s, costs, SimOptions{.timeline = false});
  Prediction p;
  p.spec = spec;
  p.iteration_ms = r.makespan_ms;
  p.bubble_ratio = r.overall_bubble_ratio;
  p.peak_activation_bytes = r.peak_activation_bytes;
  p.param_bytes = r.param_bytes;
  return p;
}

double predict_iteration_ms(const schedule::ScheduleSpec& spec, const CostModel& costs) {
  return predict(spec, costs).iteration_ms;
}

Prediction predict(const schedule::ScheduleSpec& spec, const std::vector<LayerCost>& layers,
                   const LinkModel& link) {
  const std::vector<int> stages = schedule::chunk_stages(spec);
  const int num_stages = *std::max_element(stages.begin(), stages.end()) + 1;
  const auto partition = balanced_partition(layers, num_stages);
  const bool duplicated = num_stages != static_cast<int>(stages.size());
  return predict(spec,
                 layer_costs(layers, partition, duplicated ? stages : std::vector<int>{}, link));
}

double predict_iteration_ms(const schedule::ScheduleSpec& spec,
                            const std::vector<LayerCost>& layers, const LinkModel& link) {
  return predict(spec, layers, link).iteration_ms;
}

bool fits(const Prediction& p, double device_memory_bytes, double param_factor) {
  return p.peak_memory_bytes(param_factor) <= device_memory_bytes;
}

std::optional<Prediction> fastest_fitting(const std::vector<schedule::ScheduleSpec>& candidates,
                                          const std::vector<LayerCost>& layers,
                                          const LinkModel& link, double device_memory_bytes,
                                          double param_factor) {
  std::optional<Prediction> best;
  for (const auto& spec : candidates) {
    Prediction p;
    try {
      p = predict(spec, layers, link);
    } catch (const ConfigError&) {
      continue;  // not valid for this model or these sizes
    }
    if (!fits(p, device_memory_bytes, param_factor)) continue;
    if (!best || p.iteration_ms < best->iteration_ms) best = std::move(p);
  }
  return best;
}

std::vector<schedule::ScheduleSpec> candidate_specs(int devices, int microbatches) {
  std::vector<schedule::ScheduleSpec> out;
  auto add = [&](schedule::ScheduleSpec s) {
    try {
      schedule::check_spec(s);
      out.push_back(s);
    } catch (const ConfigError&) {
    }
  };
  const int P = devices, B = microbatches;
  add({.kind = "gpipe", .devices = P, .microbatches = B});
  add({.kind = "1f1b", .devices = P, .microbatches = B});
  add({.kind = "interleaved", .devices = P, .microbatches = B, .chunks_per_device = 2});
  add({.kind = "chimera", .devices = P, .microbatches = B});
  for (int w : {1, 2, 4}) add({.kind = "hanayo", .devices = P, .microbatches = B, .waves = w});
  add({.kind = "zb-h1", .devices = P, .microbatches = B});
  add({.kind = "zb-v", .devices = P, .microbatches = B});
  return out;
}

}  // namespace bw::sim
