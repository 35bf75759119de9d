#include "plan/schedule_aware.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>

#include "core/check.h"
#include "plan/cost_model.h"
#include "schedule/generate.h"
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

schedule::ScheduleSpec schedule_spec(const Template& t, int microbatches) {
  return spec_of(t.schedule, t.num_stages(), microbatches);
}

ScheduleEvaluator simulator_evaluator(const Profile& profile, const Cluster& cluster,
                                      double state_bytes_per_param_byte, bool recompute,
                                      PlanWork* work) {
  CostOptions options;
  options.recompute = recompute;
  auto shared_model = std::make_shared<const CostModel>(profile, cluster, options);
  return [profile, cluster, state_bytes_per_param_byte, recompute, shared_model, work](
             const Template& t, const std::string& kind) -> std::optional<ScheduleEstimate> {
    const CostModel& model = *shared_model;
    const int stages = t.num_stages();
    schedule::ScheduleSpec spec = spec_of(kind, stages, t.microbatches);
    const bool own_partition = kind == "1f1b";
    if (!own_partition) {
      for (const auto& s : t.stages)
        if (s.num_devices != t.stages.front().num_devices) return std::nullopt;
    }
    // Per-layer costs on one of the stage's devices (cost_model.h): its share of the compute and
    // activations, the shard collectives added to the layer's forward (one all-gather) and
    // backward (one all-gather + the gradient all-reduce), not overlapped, and 1/d of the layer's
    // parameters (the gathered copy is added to the memory below). Recomputing, a layer's
    // backward runs its forward again first, and a microbatch in flight keeps only the layer's
    // input (cost_model.h).
    std::vector<sim::LayerCost> layers;
    for (const auto& s : t.stages) {
      if (s.num_devices > model.max_stage_devices()) return std::nullopt;  // cannot run
      for (int l = s.first_layer; l < s.end_layer(); ++l) {
        const LayerProfile& lp = profile.layers[l];
        const int d = s.num_devices;
        const double share = model.sample_share(d);
        const double gather_ms = model.shard_comm_ms(l, 1, d) / 4;  // one all-gather
        const double again = recompute ? lp.forward_ms * share : 0;
        sim::LayerCost c;
        c.forward_ms = lp.forward_ms * share + gather_ms;
        c.backward_ms = lp.backward_ms * share + again + 3 * gather_ms;
        if (lp.backward_input_ms) {
          c.backward_input_ms = *lp.backward_input_ms * share + again + gather_ms;
          c.backward_weight_ms = *lp.backward_weight_ms * share + 2 * gather_ms;
        }
        c.activation_bytes = (recompute ? model.input_bytes(l, 1) : lp.activation_bytes) * share;
        c.output_bytes = lp.output_bytes;
        c.param_bytes = lp.param_bytes / d;
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
        auto p = own_partition ? sim::predict(spec, sim::layer_costs(layers, stage_begin, {}, link))
                               : sim::predict(spec, layers, link);
        if (work) {
          const int per_device = spec.kind == "hanayo"        ? 2 * spec.waves
                                 : spec.kind == "interleaved" ? spec.chunks_per_device
                                                              : 1;
          work->simulated_slots += static_cast<int64_t>(stages) * per_device * m;
        }
        return p;
      } catch (const ConfigError&) {
        return std::nullopt;  // this kind cannot run this template (sizes)
      }
    };
    const int m = t.microbatches;
    auto a = run(m), b = run(2 * m);
    if (!a || !b) return std::nullopt;
    ScheduleEstimate e;
    if (!own_partition) {
      // The chunks as sim::predict partitioned them: balanced over the schedule's model stages,
      // chunk c on the schedule device (= template stage) chunk_placement gives.
      spec.microbatches = m;
      const std::vector<int> chunk_stage = schedule::chunk_stages(spec);
      const std::vector<int> placement = schedule::chunk_placement(spec);
      const int model_stages = *std::max_element(chunk_stage.begin(), chunk_stage.end()) + 1;
      if (model_stages != static_cast<int>(chunk_stage.size())) return std::nullopt;
      const std::vector<int> begin = sim::balanced_partition(layers, model_stages);
      for (size_t c = 0; c < chunk_stage.size(); ++c) {
        const int ms = chunk_stage[c];
        e.chunks.push_back({begin[ms], begin[ms + 1] - begin[ms], placement[c]});
      }
      std::sort(e.chunks.begin(), e.chunks.end(),
                [](const Chunk& x, const Chunk& y) { return x.first_layer < y.first_layer; });
    }
    // A sharded stage also holds one gathered layer and its full gradient at a time: twice the
    // largest layer among all chunks its devices hold; recomputing, also one layer's activations.
    std::vector<double> transient(stages, 0);
    auto add_transient = [&](int stage, int first, int end) {
      transient[stage] = std::max(
          transient[stage], model.stage_transient_bytes(first, end - first,
                                                        t.stages[stage].num_devices));
    };
    if (e.chunks.empty()) {
      for (int k = 0; k < stages; ++k)
        add_transient(k, t.stages[k].first_layer, t.stages[k].end_layer());
    } else {
      for (const auto& c : e.chunks) add_transient(c.stage, c.first_layer, c.end_layer());
    }
    BW_CHECK(static_cast<int>(a->peak_activation_bytes.size()) == stages,
             "simulated {} devices for {} stages", a->peak_activation_bytes.size(), stages);
    for (int k = 0; k < stages; ++k) {
      e.stage_memory_bytes.push_back(a->peak_activation_bytes[k] +
                                     state_bytes_per_param_byte * a->param_bytes[k] + transient[k]);
      e.peak_memory_bytes = std::max(e.peak_memory_bytes, e.stage_memory_bytes.back());
    }
    e.per_microbatch_ms = (b->iteration_ms - a->iteration_ms) / m;
    e.fixed_ms = a->iteration_ms - e.per_microbatch_ms * m;
    return e;
  };
}

}  // namespace bw::plan
