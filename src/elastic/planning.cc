#include "elastic/planning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/check.h"
#include "core/error.h"
#include "plan/planner.h"
#include "runtime/device.h"
#include "plan/profile.h"
#include "plan/schedule_aware.h"
#include "schedule/generate.h"

namespace bw::elastic {
namespace {

// A template's schedule as a spec: "1f1b", "gpipe", "zb-h1", "zb-v", "interleaved" (v = 2, as the
// planner simulates it) or "interleaved-v{v}", "hanayo-w{W}".
schedule::ScheduleSpec spec_of(const std::string& label, int devices, int microbatches) {
  schedule::ScheduleSpec spec;
  spec.devices = devices;
  spec.microbatches = microbatches;
  spec.kind = label;
  if (label.rfind("hanayo-w", 0) == 0) {
    spec.kind = "hanayo";
    spec.waves = std::stoi(label.substr(8));
  } else if (label.rfind("interleaved-v", 0) == 0) {
    spec.kind = "interleaved";
    spec.chunks_per_device = std::stoi(label.substr(13));
  } else if (label == "interleaved") {
    spec.chunks_per_device = 2;
  }
  return spec;
}

std::string label_of(const schedule::ScheduleSpec& spec) {
  if (spec.kind == "hanayo") return fmt::format("hanayo-w{}", spec.waves);
  if (spec.kind == "interleaved") return fmt::format("interleaved-v{}", spec.chunks_per_device);
  return spec.kind;
}

bool accepts(const schedule::ScheduleSpec& spec, int num_layers) {
  try {
    schedule::check_spec(spec);
    return schedule::num_chunks(spec) <= num_layers;
  } catch (const ConfigError&) {
    return false;
  }
}

// The config's schedule fitted to `devices` and the model's layers (fewer waves or chunks per
// device when there are not enough layers); nullopt when not even that fits.
std::optional<schedule::ScheduleSpec> config_spec(const runtime::PipelineConfig& p, int devices,
                                                  int microbatches, int num_layers) {
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
  }
  while (spec.kind == "interleaved" && spec.chunks_per_device > 1 &&
         schedule::num_chunks(spec) > num_layers) {
    --spec.chunks_per_device;
  }
  if (schedule::num_chunks(spec) > num_layers) return std::nullopt;
  return spec;
}

// `spec` if it accepts its microbatch count, else the nearest that does: fewer waves or chunks,
// then 1f1b, then gpipe (which accepts any count).
schedule::ScheduleSpec refit(schedule::ScheduleSpec spec, int num_layers) {
  if (accepts(spec, num_layers)) return spec;
  auto s = spec;
  while (s.kind == "hanayo" && s.waves > 1) {
    --s.waves;
    if (accepts(s, num_layers)) return s;
  }
  while (s.kind == "interleaved" && s.chunks_per_device > 1) {
    --s.chunks_per_device;
    if (accepts(s, num_layers)) return s;
  }
  for (const char* kind : {"1f1b", "gpipe"}) {
    s = spec;
    s.kind = kind;
    if (accepts(s, num_layers)) return s;
  }
  throw ConfigError(fmt::format(
      "no schedule runs {} microbatches on {} devices with {} layers; give the pipelines more "
      "microbatches (pipeline.microbatches) or use fewer devices",
      spec.microbatches, spec.devices, num_layers));
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
  pl.widths.assign(spec.devices, 1);
  pl.num_microbatches = spec.microbatches;
  pl.chunk_layers = runtime::split_layers(num_layers, compute.num_chunks);
  pl.schedule = schedule::lower(compute);
  schedule::validate(pl.schedule);
  return pl;
}

// Stage widths for a pipeline of `devices` devices with stages of `per_stage` devices each.
std::vector<int> even_widths(int devices, int per_stage) {
  return std::vector<int>(static_cast<size_t>(devices / per_stage), per_stage);
}

// A uniform template on n nodes: the config's schedule on stages of `widths` devices (summing to
// n * g; a stage of several devices is sharded), even layer split, one cost unit (1 ms) per layer
// per microbatch, divided by the stage's width. Nullopt when the schedule does not fit the layers.
std::optional<plan::Template> uniform_template(const runtime::PipelineConfig& p, int nodes,
                                               int devices_per_node, int num_layers,
                                               const std::vector<int>& widths) {
  const int stages = static_cast<int>(widths.size());
  if (stages > num_layers) return std::nullopt;
  auto spec = config_spec(p, stages, std::max(p.microbatches, 2 * stages), num_layers);
  if (!spec) return std::nullopt;
  plan::Template t;
  t.num_nodes = nodes;
  t.devices_per_node = devices_per_node;
  t.schedule = label_of(*spec);
  t.microbatches = p.microbatches;
  const auto placement = schedule::chunk_placement(*spec);
  const auto ranges = runtime::split_layers(num_layers, static_cast<int>(placement.size()));
  std::vector<double> stage_ms(stages, 0.0);
  for (size_t c = 0; c < placement.size(); ++c) {
    plan::Chunk chunk;
    chunk.first_layer = ranges[c].first;
    chunk.num_layers = ranges[c].second - ranges[c].first;
    chunk.stage = placement[c];
    stage_ms[chunk.stage] += static_cast<double>(chunk.num_layers) / widths[chunk.stage];
    t.chunks.push_back(chunk);
  }
  // Stages carry the contiguous 1F1B partition (plan.h); the chunks say what each device holds.
  const auto stage_ranges = runtime::split_layers(num_layers, stages);
  int offset = 0;
  for (int s = 0; s < stages; ++s) {
    plan::Stage st;
    st.node = offset / devices_per_node;
    st.first_device = offset % devices_per_node;
    st.num_devices = widths[s];
    if ((offset + widths[s] - 1) / devices_per_node != st.node) {
      throw ConfigError(fmt::format(
          "stage {} of a pipeline on {} node(s) would run on devices {}..{}, across a node "
          "boundary (cluster.devices_per_node = {}); a stage's devices must be on one node: make "
          "the stage widths divide the nodes' devices",
          s, nodes, offset, offset + widths[s] - 1, devices_per_node));
    }
    offset += widths[s];
    st.first_layer = stage_ranges[s].first;
    st.num_layers = stage_ranges[s].second - stage_ranges[s].first;
    st.forward_ms = stage_ms[s] / 3;
    st.backward_ms = 2 * stage_ms[s] / 3;
    st.stage_ms = stage_ms[s];
    t.stages.push_back(st);
  }
  BW_CHECK(offset == nodes * devices_per_node, "stage widths cover {} of {} devices", offset,
           nodes * devices_per_node);
  double sum = 0, mx = 0;
  for (int s = 0; s < stages; ++s) {
    sum += stage_ms[s];
    if (stage_ms[s] > mx) {
      mx = stage_ms[s];
      t.bottleneck = s;
    }
  }
  t.sum_stage_ms = sum;
  t.max_stage_ms = mx;
  t.estimate.fixed_ms = sum - mx;
  t.estimate.per_microbatch_ms = mx;
  return t;
}

std::string node_ids(const std::vector<NodeId>& nodes) {
  std::vector<int> v;
  for (auto n : nodes) v.push_back(n.value());
  return fmt::format("{}", fmt::join(v, ","));
}

}  // namespace

RunPlan layout_plan(const PlanContext& ctx, const plan::Plan& plan) {
  RunPlan out;
  out.plan = plan;
  auto& layout = out.layout;
  const int num_layers = model::num_layers(ctx.model);
  layout.generation = plan.generation;
  layout.num_layers = num_layers;
  layout.vocab_size = ctx.model.vocab_size;
  layout.microbatch_size = ctx.config.pipeline.microbatch_size;
  layout.total_microbatches = plan.global_microbatches;
  int rank = 0, mb = 0;
  for (size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& pipe = plan.pipelines[i];
    const auto& t = pipe.tmpl;
    for (size_t s = 0; s < t.stages.size(); ++s) {
      if (t.stages[s].num_devices > layout.microbatch_size) {
        throw ConfigError(fmt::format(
            "the plan's template for {} nodes runs stage {} on {} devices, but a sharded stage "
            "splits each microbatch's samples over its devices and pipeline.microbatch_size is "
            "{}; raise pipeline.microbatch_size to >= {}",
            t.num_nodes, s, t.stages[s].num_devices, layout.microbatch_size,
            t.stages[s].num_devices));
      }
    }
    const auto wanted = spec_of(t.schedule, t.num_stages(), pipe.microbatches);
    const auto spec = refit(wanted, num_layers);
    auto pl = make_pipeline(spec, num_layers);
    if (label_of(spec) != label_of(wanted)) {
      out.notes.push_back(fmt::format(
          "pipeline {} (nodes {}): {} cannot run {} microbatches on {} devices; running {}", i,
          node_ids(pipe.nodes), label_of(wanted), pipe.microbatches, t.num_stages(),
          label_of(spec)));
    } else if (t.chunks.size() == pl.chunk_layers.size()) {
      bool same = true;
      for (size_t c = 0; c < t.chunks.size(); ++c) {
        same = same && t.chunks[c].stage == pl.schedule.chunk_device[c];
      }
      if (same) {
        for (size_t c = 0; c < t.chunks.size(); ++c) {
          pl.chunk_layers[c] = {t.chunks[c].first_layer, t.chunks[c].end_layer()};
        }
      }
    }
    pl.first_rank = rank;
    pl.first_microbatch = mb;
    pl.widths.clear();
    bool sharded = false;
    for (int s = 0; s < t.num_stages(); ++s) {
      pl.widths.push_back(t.stages[s].num_devices);
      sharded = sharded || t.stages[s].num_devices > 1;
      for (int j = 0; j < t.stages[s].num_devices; ++j) {
        out.workers.push_back(pipe.node_of_stage(s).value() * ctx.devices_per_node +
                              t.stages[s].first_device + j);
      }
    }
    if (sharded) {
      for (const auto& list : pl.schedule.actions) {
        for (const auto& a : list) {
          if (a.kind == schedule::ActionKind::I || a.kind == schedule::ActionKind::W) {
            throw ConfigError(fmt::format(
                "pipeline {} runs sharded stages with schedule {}, which splits backward into I "
                "and W; sharded stages run gpipe, 1f1b, interleaved or hanayo",
                i, pl.schedule.kind));
          }
        }
      }
    }
    rank += pl.num_ranks();
    mb += pl.num_microbatches;
    layout.pipelines.push_back(std::move(pl));
  }
  runtime::validate_layout(layout);
  check_memory(layout, ctx.model, ctx.config);
  return out;
}

std::pair<PlanContext, RunPlan> initial_plan(const runtime::RunConfig& config,
                                             const model::GptConfig& model, int world_size) {
  const auto& p = config.pipeline;
  const int num_layers = model::num_layers(model);
  PlanContext ctx;
  ctx.config = config;
  ctx.model = model;
  const bool explicit_world = world_size != config.cluster.nodes * config.cluster.devices_per_node;
  ctx.devices_per_node = explicit_world ? 1 : config.cluster.devices_per_node;
  const int g = ctx.devices_per_node;
  const int nodes = world_size / g;
  ctx.cluster.num_nodes = nodes;
  ctx.cluster.devices_per_node = g;
  ctx.cluster.device_memory_gb = config.cluster.memory_gb > 0 ? config.cluster.memory_gb : 1e6;
  std::vector<std::string> notes;
  plan::Plan plan;
  if (!p.profile.empty() && p.pipelines.empty()) {
    // The planner (plan/) chooses the pipelines and their microbatches from the profile.
    plan::Profile profile = plan::load_profile(p.profile);
    if (profile.num_layers() != num_layers) {
      throw ConfigError(fmt::format(
          "profile '{}' has {} layers but model {} has {}; measure it with `breakwater profile "
          "measure --model {}`",
          p.profile, profile.num_layers(), model.name, num_layers, model.name));
    }
    plan::PlannerOptions options;
    options.schedule_kinds = plan::simulated_schedule_kinds();
    options.recompute = p.recompute == "full";
    options.evaluator = plan::simulator_evaluator(profile, ctx.cluster, 4, options.recompute);
    auto result = plan::make_plan(profile, ctx.cluster, p.fault_tolerance, p.microbatches, options);
    ctx.templates = std::move(result.templates);
    plan = std::move(result.plan);
    std::vector<int> sizes, mbs;
    for (const auto& pipe : plan.pipelines) {
      sizes.push_back(pipe.tmpl.num_nodes * g);
      mbs.push_back(pipe.microbatches);
    }
    notes.push_back(fmt::format(
        "planner ({}): pipelines of {} devices with {} microbatches, predicted step {:.1f} ms",
        p.profile, fmt::join(sizes, "+"), fmt::join(mbs, "+"), plan.step_ms));
  } else {
    ctx.templates.num_layers = num_layers;
    ctx.templates.devices_per_node = g;
    ctx.templates.microbatch_size = p.microbatch_size;
    const int per_stage = p.devices_per_stage;
    if (g % per_stage != 0) {
      throw ConfigError(fmt::format(
          "pipeline.devices_per_stage {} does not divide the {} devices of a node "
          "(cluster.devices_per_node, or 1 with --devices); a stage's devices must be on one node",
          per_stage, g));
    }
    for (int n = 1; n <= nodes; ++n) {
      if (auto t = uniform_template(p, n, g, num_layers, even_widths(n * g, per_stage)))
        ctx.templates.templates.push_back(*t);
    }
    std::vector<int> devices = p.pipelines;
    if (devices.empty()) {
      // fault_tolerance + 1 pipelines of (nearly) equal node counts. (On a uniform estimate with
      // no memory limit the planner would prefer one-node pipelines, i.e. no pipelining.)
      const int n = std::max(1, std::min(nodes, p.fault_tolerance + 1));
      for (int i = 0; i < n; ++i) devices.push_back((nodes / n + (i < nodes % n ? 1 : 0)) * g);
    }
    const int total = std::accumulate(devices.begin(), devices.end(), 0);
    if (total != world_size) {
      throw ConfigError(fmt::format(
          "pipeline.pipelines {} uses {} devices but the cluster has {} (cluster.nodes {} x "
          "cluster.devices_per_node {}); make them agree",
          devices, total, world_size, config.cluster.nodes, config.cluster.devices_per_node));
    }
    std::vector<double> weights(devices.begin(), devices.end());
    const auto microbatches = runtime::split_microbatches(p.microbatches, weights);
    plan.num_layers = num_layers;
    plan.devices_per_node = g;
    plan.microbatch_size = p.microbatch_size;
    plan.global_microbatches = p.microbatches;
    int node = 0;
    size_t stage_cursor = 0;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] % g != 0) {
        throw ConfigError(fmt::format(
            "pipeline.pipelines entry {} has {} devices, not a whole number of nodes of {} "
            "devices (cluster.devices_per_node); use multiples of {}",
            i, devices[i], g, g));
      }
      const int n = devices[i] / g;
      const auto* t = ctx.templates.find(n);
      std::optional<plan::Template> custom;
      if (!p.stage_devices.empty()) {
        // This pipeline's stage widths, in order (validated to cut each pipeline whole).
        std::vector<int> widths;
        int used = 0;
        while (used < devices[i]) {
          widths.push_back(p.stage_devices[stage_cursor]);
          used += p.stage_devices[stage_cursor++];
        }
        custom = uniform_template(p, n, g, num_layers, widths);
        t = custom ? &*custom : nullptr;
      }
      if (t == nullptr) {
        // The fewest chunks the schedule can take (config_spec lowers waves and chunks per
        // device down to 1 before it gives up).
        schedule::ScheduleSpec fewest;
        fewest.kind = p.schedule;
        fewest.devices = devices[i];
        fewest.microbatches = microbatches[i];
        fewest.waves = 1;
        fewest.chunks_per_device = 1;
        throw ConfigError(fmt::format(
            "a pipeline of {} devices needs at least {} layers for schedule {}, and model {} "
            "has only {} layers; use fewer devices per pipeline or a bigger model",
            devices[i], schedule::num_chunks(fewest), p.schedule, model.name, num_layers));
      }
      plan::Pipeline pipe;
      pipe.tmpl = *t;
      for (int k = 0; k < n; ++k) pipe.nodes.push_back(NodeId(node++));
      pipe.microbatches = microbatches[i];
      pipe.iteration_ms = t->iteration_ms(microbatches[i]);
      plan.pipelines.push_back(std::move(pipe));
    }
    plan::update_predictions(plan, ctx.cluster);
    plan::validate_plan(plan);
    // The config's schedule may have needed fewer waves or chunks for the model's layers.
    for (const auto& pipe : plan.pipelines) {
      const auto want = spec_of(p.schedule == "hanayo" ? fmt::format("hanayo-w{}", p.waves)
                                : p.schedule == "interleaved"
                                    ? fmt::format("interleaved-v{}", p.chunks_per_device)
                                    : p.schedule,
                                pipe.tmpl.num_stages(), pipe.microbatches);
      if (label_of(want) != pipe.tmpl.schedule) {
        notes.push_back(
            fmt::format("{} needs more chunks than the model's {} layers on {} devices; running {}",
                        label_of(want), num_layers, pipe.tmpl.num_stages(), pipe.tmpl.schedule));
      }
    }
  }
  plan.generation = 0;
  auto run = layout_plan(ctx, plan);
  run.notes.insert(run.notes.begin(), notes.begin(), notes.end());
  std::sort(run.notes.begin(), run.notes.end());
  run.notes.erase(std::unique(run.notes.begin(), run.notes.end()), run.notes.end());
  return {std::move(ctx), std::move(run)};
}

LayoutPlan plan_layout(const runtime::RunConfig& config, const model::GptConfig& model,
                       int world_size, int generation) {
  auto [ctx, run] = initial_plan(config, model, world_size);
  run.layout.generation = generation;
  return {std::move(run.layout), std::move(run.notes)};
}

void check_memory(const runtime::RunLayout& layout, const model::GptConfig& model,
                  const runtime::RunConfig& config) {
  if (config.cluster.memory_gb > 0) {
    const double limit = config.cluster.memory_gb * 1e9;
    for (int pi = 0; pi < static_cast<int>(layout.pipelines.size()); ++pi) {
      for (int d = 0; d < layout.pipelines[pi].num_devices; ++d) {
        const double need =
            estimate_device_bytes(layout, model, pi, d, config.pipeline.recompute == "full",
                                  runtime::run_precision(config.train, config.cluster));
        if (need > limit) {
          const int r = layout.pipelines[pi].stage_first_rank(d);
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
  pl.widths = {1};
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
                             int pipeline, int device, bool recompute,
                             model::Precision precision) {
  const auto& pl = layout.pipelines[pipeline];
  const int rank = pl.stage_first_rank(device);
  const int width = pl.widths[device];
  // Every byte count comes from the model's shape (shape/shape.h): per parameter, the state of
  // the precision (16 bytes: fp32 parameter, gradient and AdamW moments) plus bf16's weight copy
  // saved for backward; per sample, what each layer keeps for its backward with fused attention,
  // or only its input when recomputing (then one layer's activations exist while it runs again).
  const auto shape = model::shape_of(model);
  const auto p = precision;
  const double per_param =
      shape::state_bytes_per_parameter(p) + shape::compute_copy_bytes_per_parameter(p);
  const double mbs = layout.microbatch_size;
  double param_count = 0, act_bytes_per_mb = 0, largest = 0, input_bytes_per_mb = 0,
         largest_act = 0;
  for (int l : layout.layers_of(rank)) {
    const double n = static_cast<double>(shape.layer_parameters(l));
    param_count += n;
    largest = std::max(largest, n);
    const double act = mbs * shape.activation_bytes_per_sample(l, {p, shape::Recompute::kNone});
    act_bytes_per_mb += act;
    input_bytes_per_mb += mbs * shape.activation_bytes_per_sample(l, {p, shape::Recompute::kFull});
    largest_act = std::max(largest_act, act);
  }
  if (recompute) act_bytes_per_mb = input_bytes_per_mb;
  const double recomputed = recompute ? largest_act : 0;
  // In flight: at most every microbatch the device forwards before its first backward.
  int in_flight = 0, peak = 0;
  for (const auto& a : pl.schedule.actions[device]) {
    if (a.kind == schedule::ActionKind::F) peak = std::max(peak, ++in_flight);
    if (a.kind == schedule::ActionKind::B || a.kind == schedule::ActionKind::W) --in_flight;
  }
  // `peak` counts chunk-microbatches; each holds only its chunk's share, so this bounds above.
  if (width == 1) {
    return per_param * param_count + recomputed + act_bytes_per_mb * std::max(1, peak);
  }
  // Sharded: 1/width of the state, one layer gathered whole (parameters and gradient), and
  // activations of the member's rows only.
  const double rows = std::ceil(static_cast<double>(layout.microbatch_size) / width);
  const double share = rows / layout.microbatch_size;
  return per_param * param_count / width + 2 * shape::kParameterBytes * largest +
         recomputed * share +
         act_bytes_per_mb * share * std::max(1, peak);
}

}  // namespace bw::elastic
