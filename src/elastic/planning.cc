#include "elastic/planning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/check.h"
#include "core/error.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan/schedule_aware.h"
#include "schedule/generate.h"

namespace bw::elastic {
namespace {

schedule::ScheduleSpec fit_spec(const runtime::PipelineConfig& p, int devices, int microbatches,
                                int num_layers, std::vector<std::string>& notes) {
  schedule::ScheduleSpec spec;
  spec.kind = p.schedule;
  spec.devices = devices;
  spec.microbatches = microbatches;
  spec.chunks_per_device = p.chunks_per_device;
  spec.waves = p.waves;
  if (spec.kind == "chimera") {
    throw ConfigError(
        "the runtime does not run chimera (its duplicated weights need a second gradient sync); "
        "choose gpipe, 1f1b, interleaved, hanayo, zb-h1 or zb-v (pipeline.schedule)");
  }
  while (spec.kind == "hanayo" && spec.waves > 1 && schedule::num_chunks(spec) > num_layers) {
    --spec.waves;
    if (schedule::num_chunks(spec) <= num_layers) {
      notes.push_back(fmt::format(
          "hanayo with {} waves needs more chunks than the model's {} layers on {} devices; "
          "running {} wave(s)",
          p.waves, num_layers, devices, spec.waves));
    }
  }
  while (spec.kind == "interleaved" && spec.chunks_per_device > 1 &&
         schedule::num_chunks(spec) > num_layers) {
    --spec.chunks_per_device;
    if (schedule::num_chunks(spec) <= num_layers) {
      notes.push_back(fmt::format(
          "interleaved with {} chunks per device needs more chunks than the model's {} layers "
          "on {} devices; running {}",
          p.chunks_per_device, num_layers, devices, spec.chunks_per_device));
    }
  }
  return spec;
}

runtime::PipelineLayout make_pipeline(const schedule::ScheduleSpec& spec, int num_layers) {
  schedule::check_spec(spec);
  schedule::Schedule compute = schedule::generate(spec);
  if (compute.num_stages() != compute.num_chunks) {
    throw ConfigError(
        fmt::format("schedule {} duplicates weights; the runtime cannot run it", spec.kind));
  }
  runtime::PipelineLayout pl;
  pl.num_devices = spec.devices;
  pl.num_microbatches = spec.microbatches;
  pl.chunk_layers = runtime::split_layers(num_layers, compute.num_chunks);
  pl.schedule = schedule::lower(compute);
  schedule::validate(pl.schedule);
  return pl;
}

// The pipeline the planner's template describes: its schedule kind and its chunks' layers. Nullopt
// when a stage spans several devices (data parallelism inside a stage, which the runtime does not
// run); the caller then uses the config's schedule on an even split.
std::optional<runtime::PipelineLayout> template_pipeline(const plan::Template& t, int microbatches,
                                                         int num_layers) {
  for (const auto& stage : t.stages) {
    if (stage.num_devices != 1) return std::nullopt;
  }
  const auto spec = plan::schedule_spec(t, microbatches);
  auto pl = make_pipeline(spec, num_layers);
  if (t.chunks.size() != pl.chunk_layers.size()) return std::nullopt;
  for (size_t c = 0; c < t.chunks.size(); ++c) {
    if (t.chunks[c].stage != pl.schedule.chunk_device[c]) return std::nullopt;
    pl.chunk_layers[c] = {t.chunks[c].first_layer, t.chunks[c].end_layer()};
  }
  return pl;
}

}  // namespace

void check_memory(const runtime::RunLayout& layout, const model::GptConfig& model,
                  const runtime::RunConfig& config) {
  if (config.cluster.memory_gb > 0) {
    const double limit = config.cluster.memory_gb * 1e9;
    for (int pi = 0; pi < static_cast<int>(layout.pipelines.size()); ++pi) {
      for (int d = 0; d < layout.pipelines[pi].num_devices; ++d) {
        const double need = estimate_device_bytes(layout, model, pi, d);
        if (need > limit) {
          const int r = layout.pipelines[pi].first_rank + d;
          throw ConfigError(fmt::format(
              "device {} of pipeline {} (rank {}) holds layers {} and needs about {:.3f} GB, but "
              "cluster.memory_gb is {}; raise cluster.memory_gb, add devices, or use a smaller "
              "microbatch_size",
              d, pi, r, layout.layers_of(r), need / 1e9, config.cluster.memory_gb));
        }
      }
    }
  }
}

LayoutPlan plan_layout(const runtime::RunConfig& config, const model::GptConfig& model,
                       int world_size, int generation) {
  const auto& p = config.pipeline;
  std::vector<int> devices = p.pipelines;
  std::vector<int> planned_microbatches;
  std::vector<std::string> planner_notes;
  std::vector<plan::Template> planned_templates;
  if (devices.empty() && p.profile.empty()) {
    // Uniform per-device cost: fault_tolerance + 1 pipelines of (nearly) equal size, microbatches
    // in proportion to devices. (On a uniform estimate with no memory limit the planner would
    // prefer one-device pipelines, i.e. no pipelining at all.)
    const int n = std::max(1, std::min(world_size, p.fault_tolerance + 1));
    for (int i = 0; i < n; ++i) devices.push_back(world_size / n + (i < world_size % n ? 1 : 0));
  }
  if (devices.empty()) {
    // The planner (plan/) chooses the pipelines and their microbatches from the profile.
    plan::Profile profile = plan::load_profile(p.profile);
    if (profile.num_layers() != model::num_layers(model)) {
      throw ConfigError(fmt::format(
          "profile '{}' has {} layers but model {} has {}; measure it with `breakwater profile "
          "measure --model {}`",
          p.profile, profile.num_layers(), model.name, model::num_layers(model), model.name));
    }
    plan::Cluster cluster;
    const bool explicit_world =
        world_size != config.cluster.nodes * config.cluster.devices_per_node;
    cluster.devices_per_node = explicit_world ? 1 : config.cluster.devices_per_node;
    cluster.num_nodes = world_size / cluster.devices_per_node;
    cluster.device_memory_gb = config.cluster.memory_gb > 0 ? config.cluster.memory_gb : 1e6;
    plan::PlannerOptions options;
    options.schedule_kinds = plan::simulated_schedule_kinds();
    options.evaluator = plan::simulator_evaluator(profile, cluster);
    const auto result =
        plan::make_plan(profile, cluster, p.fault_tolerance, p.microbatches, options);
    for (const auto& pipe : result.plan.pipelines) {
      devices.push_back(pipe.tmpl.num_nodes * cluster.devices_per_node);
      planned_microbatches.push_back(pipe.microbatches);
      planned_templates.push_back(pipe.tmpl);
    }
    planner_notes.push_back(fmt::format(
        "planner ({}): pipelines of {} devices with {} microbatches, predicted step {:.1f} ms",
        p.profile, fmt::join(devices, "+"), fmt::join(planned_microbatches, "+"),
        result.plan.step_ms));
  }
  const int total = std::accumulate(devices.begin(), devices.end(), 0);
  if (total != world_size) {
    throw ConfigError(fmt::format(
        "pipeline.pipelines {} uses {} devices but the cluster has {} (cluster.nodes {} x "
        "cluster.devices_per_node {}); make them agree",
        devices, total, world_size, config.cluster.nodes, config.cluster.devices_per_node));
  }
  std::vector<double> weights(devices.begin(), devices.end());
  const auto microbatches = planned_microbatches.empty()
                                ? runtime::split_microbatches(p.microbatches, weights)
                                : planned_microbatches;

  LayoutPlan out;
  out.notes = planner_notes;
  auto& layout = out.layout;
  layout.generation = generation;
  layout.num_layers = model::num_layers(model);
  layout.vocab_size = model.vocab_size;
  layout.microbatch_size = p.microbatch_size;
  layout.total_microbatches = p.microbatches;
  int rank = 0, mb = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    std::optional<runtime::PipelineLayout> from_template;
    if (!planned_templates.empty()) {
      try {
        from_template = template_pipeline(planned_templates[i], microbatches[i], layout.num_layers);
      } catch (const ConfigError& e) {
        out.notes.push_back(fmt::format(
            "pipeline {}: the planned {} schedule cannot run {} microbatches ({}); running {}", i,
            planned_templates[i].schedule, microbatches[i], e.what(), p.schedule));
      }
      if (!from_template) {
        out.notes.push_back(
            fmt::format("pipeline {}: the config's {} schedule on even chunks", i, p.schedule));
      }
    }
    auto pl =
        from_template
            ? std::move(*from_template)
            : make_pipeline(fit_spec(p, devices[i], microbatches[i], layout.num_layers, out.notes),
                            layout.num_layers);
    pl.first_rank = rank;
    pl.first_microbatch = mb;
    rank += pl.num_devices;
    mb += pl.num_microbatches;
    layout.pipelines.push_back(std::move(pl));
  }
  runtime::validate_layout(layout);
  // A planned layout passed the planner's memory model (from the measured profile).
  if (planned_templates.empty()) check_memory(layout, model, config);
  std::sort(out.notes.begin(), out.notes.end());
  out.notes.erase(std::unique(out.notes.begin(), out.notes.end()), out.notes.end());
  return out;
}

runtime::RunLayout single_device_layout(const runtime::RunConfig& config,
                                        const model::GptConfig& model, int generation) {
  runtime::RunLayout layout;
  layout.generation = generation;
  layout.num_layers = model::num_layers(model);
  layout.vocab_size = model.vocab_size;
  layout.microbatch_size = config.pipeline.microbatch_size;
  layout.total_microbatches = config.pipeline.microbatches;
  runtime::PipelineLayout pl;
  pl.num_devices = 1;
  pl.num_microbatches = config.pipeline.microbatches;
  pl.chunk_layers = {{0, layout.num_layers}};
  pl.schedule.kind = "single";
  pl.schedule.num_devices = 1;
  pl.schedule.num_chunks = 1;
  pl.schedule.num_microbatches = pl.num_microbatches;
  pl.schedule.chunk_device = {0};
  pl.schedule.actions.resize(1);
  for (int m = 0; m < pl.num_microbatches; ++m) {
    pl.schedule.actions[0].push_back({schedule::ActionKind::F, 0, m});
    pl.schedule.actions[0].push_back({schedule::ActionKind::B, 0, m});
  }
  layout.pipelines.push_back(std::move(pl));
  runtime::validate_layout(layout);
  check_memory(layout, model, config);
  return layout;
}

double estimate_device_bytes(const runtime::RunLayout& layout, const model::GptConfig& model,
                             int pipeline, int device) {
  const auto& pl = layout.pipelines[pipeline];
  const int rank = pl.first_rank + device;
  double param_count = 0, act_bytes_per_mb = 0;
  for (int l : layout.layers_of(rank)) {
    param_count += static_cast<double>(model::num_parameters(model, l));
    // A block keeps roughly 16 activations of [mbs, T, d] plus the attention matrix.
    const double btd = double(layout.microbatch_size) * model.seq_len * model.d_model;
    const double att =
        double(layout.microbatch_size) * model.n_heads * model.seq_len * model.seq_len;
    switch (model::layer_kind(model, l)) {
      case model::LayerKind::kEmbedding:
        act_bytes_per_mb += 4 * btd;
        break;
      case model::LayerKind::kBlock:
        act_bytes_per_mb += 4 * (16 * btd + 2 * att);
        break;
      case model::LayerKind::kHead:
        act_bytes_per_mb +=
            4 * (2 * btd + 3.0 * layout.microbatch_size * model.seq_len * model.vocab_size);
        break;
    }
  }
  // In flight: at most every microbatch the device forwards before its first backward.
  int in_flight = 0, peak = 0;
  for (const auto& a : pl.schedule.actions[device]) {
    if (a.kind == schedule::ActionKind::F) peak = std::max(peak, ++in_flight);
    if (a.kind == schedule::ActionKind::B || a.kind == schedule::ActionKind::W) --in_flight;
  }
  // `peak` counts chunk-microbatches; each holds only its chunk's share, so this bounds above.
  return 16.0 * param_count + act_bytes_per_mb * std::max(1, peak);
}

}  // namespace bw::elastic
