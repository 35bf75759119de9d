#include "plan/schedule_aware.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/predict.h"

namespace bw::plan {

std::vector<std::string> simulated_schedule_kinds() {
  return {"1f1b", "interleaved", "hanayo-w1", "hanayo-w2"};
}

namespace {

schedule::ScheduleSpec spec_of(const std::string& kind, int devices, int microbatches) {
  schedule::ScheduleSpec s;
  s.devices = devices;
  s.microbatches = microbatches;
  if (kind == "1f1b") {
    s.kind = "1f1b";
  } else if (kind == "interleaved") {
    s.kind = "interleaved";
    s.chunks_per_device = 2;
  } else if (kind == "hanayo-w1" || kind == "hanayo-w2") {
    s.kind = "hanayo";
    s.waves = kind == "hanayo-w1" ? 1 : 2;
  } else {
    auto known = simulated_schedule_kinds();
    throw ConfigError(fmt::format("unknown schedule kind '{}' for templates; known: {}", kind,
                                  fmt::join(known, ", ")));
  }
  return s;
}

}  // namespace

ScheduleEvaluator simulator_evaluator(const Profile& profile, const Cluster& cluster,
                                      double state_bytes_per_param_byte) {
  return [profile, cluster, state_bytes_per_param_byte](
             const Template& t, const std::string& kind) -> std::optional<ScheduleEstimate> {
    const int stages = t.num_stages();
    schedule::ScheduleSpec spec = spec_of(kind, stages, t.microbatches);
    const bool own_partition = kind == "1f1b";
    if (!own_partition) {
      for (const auto& s : t.stages)
        if (s.num_devices != t.stages.front().num_devices) return std::nullopt;
    }
    // Per-layer costs on one of the stage's devices.
    std::vector<sim::LayerCost> layers;
    for (const auto& s : t.stages) {
      for (int l = s.first_layer; l < s.end_layer(); ++l) {
        const LayerProfile& lp = profile.layers[l];
        const double d = s.num_devices;
        sim::LayerCost c;
        c.forward_ms = lp.forward_ms / d;
        c.backward_ms = lp.backward_ms / d;
        if (lp.backward_input_ms) {
          c.backward_input_ms = *lp.backward_input_ms / d;
          c.backward_weight_ms = *lp.backward_weight_ms / d;
        }
        c.activation_bytes = lp.activation_bytes / d;
        c.output_bytes = lp.output_bytes;
        c.param_bytes = lp.param_bytes;
        layers.push_back(c);
      }
    }
    sim::LinkModel link;
    link.latency_ms = cluster.latency_us * 1e-3;
    link.bandwidth_gbps = t.num_nodes > 1 ? cluster.inter_node_gbps : cluster.intra_node_gbps;
    std::vector<int> stage_begin;
    for (const auto& s : t.stages) stage_begin.push_back(s.first_layer);
    stage_begin.push_back(t.stages.back().end_layer());

    auto run = [&](int m) -> std::optional<sim::Prediction> {
      spec.microbatches = m;
      try {
        if (own_partition)
          return sim::predict(spec, sim::layer_costs(layers, stage_begin, {}, link));
        return sim::predict(spec, layers, link);
      } catch (const ConfigError&) {
        return std::nullopt;  // this kind cannot run this template (sizes)
      }
    };
    const int m = t.microbatches;
    auto a = run(m), b = run(2 * m);
    if (!a || !b) return std::nullopt;
    ScheduleEstimate e;
    e.per_microbatch_ms = (b->iteration_ms - a->iteration_ms) / m;
    e.fixed_ms = a->iteration_ms - e.per_microbatch_ms * m;
    e.peak_memory_bytes = std::max(a->peak_memory_bytes(state_bytes_per_param_byte),
                                   b->peak_memory_bytes(state_bytes_per_param_byte));
    return e;
  };
}

}  // namespace bw::plan
