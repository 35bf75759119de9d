#include "plan/planner.h"

#include <fmt/format.h>

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/check.h"
#include "plan/cost_model.h"
#include "plan/schedule_aware.h"
#include "schedule/generate.h"

namespace bw::plan {
namespace {

TemplateOptions template_options(const PlannerOptions& o, int m, const Profile& profile,
                                 const Cluster& cluster) {
  TemplateOptions t;
  t.cost.microbatches = m;
  t.cost.state_bytes_per_param_byte = o.state_bytes_per_param_byte;
  t.cost.max_stage_devices = o.max_stage_devices;
  t.cost.recompute = o.recompute;
  t.threads = o.threads;
  t.schedule_kinds = o.schedule_kinds;
  t.evaluator = o.evaluator;
  if (!t.schedule_kinds.empty() && !t.evaluator)
    t.evaluator = simulator_evaluator(profile, cluster, o.state_bytes_per_param_byte,
                                      o.recompute, o.work);
  return t;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Why stages cannot be as wide as the node, or "" when they can.
std::string width_note(const CostModel& model, const Cluster& cluster, const TemplateOptions& opt) {
  const int g = cluster.devices_per_node, b = model.microbatch_size();
  if (model.max_stage_devices() >= g) return "";
  if (opt.cost.max_stage_devices > 0 && opt.cost.max_stage_devices <= b)
    return fmt::format(" Stages span at most {} of the {} devices of a node (--max-stage-devices).",
                       model.max_stage_devices(), g);
  return fmt::format(
      " A sharded stage splits every microbatch's samples over its devices, so it spans at most "
      "microbatch size = {} devices; {}a profile with larger microbatches (e.g. `breakwater "
      "profile synth --microbatch-size {}`) lets stages span up to {} devices.",
      b, b == 1 ? "with 1 no stage is sharded: " : "", g, g);
}

// fewest[i]: the fewest stages that hold layers [i, L) within memory with any number of nodes and
// ignoring how stages pack into nodes (so kInfStages proves that no pipeline holds them). Stage s
// of S keeps min(m, S - s) microbatches in flight, so fewer stages behind a stage never hurt it:
// prepending to the suffix with the fewest stages is always best.
constexpr int kInfStages = std::numeric_limits<int>::max();
std::vector<int> fewest_stages(const CostModel& model, double mem_limit) {
  const int L = model.num_layers(), m = model.options().microbatches;
  std::vector<int> fewest(L + 1, kInfStages);
  fewest[L] = 0;
  for (int i = L - 1; i >= 0; --i)
    for (int d = 1; d <= model.max_stage_devices(); ++d)
      for (int e = i + 1; e <= L; ++e) {
        const int count = e - i;
        if (model.stage_memory(i, count, d, 1) > mem_limit) break;  // grows with e
        if (fewest[e] == kInfStages) continue;
        if (model.stage_memory(i, count, d, std::min(m, fewest[e] + 1)) <= mem_limit)
          fewest[i] = std::min(fewest[i], fewest[e] + 1);
      }
  return fewest;
}

// The memory terms of layer `l` alone on d devices with `in_flight` microbatches, on the width
// where it needs least.
std::string layer_terms(const Profile& profile, const CostModel& model, int l, int in_flight) {
  int best_d = 1;
  for (int d = 2; d <= model.max_stage_devices(); ++d)
    if (model.stage_memory(l, 1, d, in_flight) < model.stage_memory(l, 1, best_d, in_flight))
      best_d = d;
  const auto gb = [](double bytes) { return bytes / 1e9; };
  const int b = model.microbatch_size();
  return fmt::format(
      "layer '{}' alone on {} device(s) with {} microbatch(es) in flight needs {:.2f} GB per "
      "device: parameters, gradients and AdamW state {:.2f} GB, gathered layer and gradient "
      "{:.2f} GB, activations {:.2f} GB per microbatch in flight ({} of the microbatch's {} "
      "samples)",
      profile.layers[l].name, best_d, in_flight, gb(model.stage_memory(l, 1, best_d, in_flight)),
      gb(model.stage_state_bytes(l, 1, best_d)), gb(model.stage_transient_bytes(l, 1, best_d)),
      gb(model.stage_activation_bytes(l, 1, best_d)), (b + best_d - 1) / best_d, b);
}

// Explains why nothing fits on `cluster`, with the node count that would or the memory term that
// does not fit.
[[noreturn]] void does_not_fit(const Profile& profile, const Cluster& cluster,
                               const TemplateOptions& opt) {
  Cluster bigger = cluster;
  bigger.num_nodes = profile.num_layers();
  TemplateOptions o = opt;
  o.max_nodes = bigger.num_nodes;
  o.min_nodes = cluster.num_nodes + 1;
  TemplateSet more =
      bigger.num_nodes > cluster.num_nodes ? generate_templates(profile, bigger, o) : TemplateSet{};
  const CostModel model(profile, cluster, opt.cost);
  const std::string note = width_note(model, cluster, opt);
  if (auto n0 = more.min_nodes()) {
    throw ConfigError(fmt::format(
        "model '{}' does not fit on {} nodes x {} devices of {} GB: its smallest pipeline needs "
        "{} nodes; use --nodes {} or more, or raise --memory-gb.{}",
        profile.model, cluster.num_nodes, cluster.devices_per_node, cluster.device_memory_gb, *n0,
        *n0, note));
  }
  const double mem = cluster.device_memory_bytes();
  const std::vector<int> fewest = fewest_stages(model, mem);
  const int L = model.num_layers();
  int first = L;  // the longest suffix [first, L) that fits in some pipeline
  while (first > 0 && fewest[first - 1] != kInfStages) --first;
  if (first == L) {  // the last layer does not fit alone with one microbatch in flight
    throw ConfigError(fmt::format(
        "model '{}' does not fit on devices of {} GB with any number of nodes: {}; raise "
        "--memory-gb or use a smaller microbatch.{}",
        profile.model, cluster.device_memory_gb, layer_terms(profile, model, L - 1, 1), note));
  }
  if (first > 0) {
    const int in_flight = std::min(model.options().microbatches, fewest[first] + 1);
    throw ConfigError(fmt::format(
        "model '{}' does not fit on devices of {} GB with any number of nodes: the activations "
        "kept in flight do not fit. 1F1B keeps S - s microbatches in flight at stage s of S; even "
        "ignoring how stages fill nodes, only the last {} of the {} layers fit in a pipeline (on "
        "{} stages), and no stage holding layer {} fits in front of them: {}; raise --memory-gb, "
        "{}or use a profile with less activation memory per sample.{}",
        profile.model, cluster.device_memory_gb, L - first, L, fewest[first], first - 1,
        layer_terms(profile, model, first - 1, in_flight),
        model.recompute() ? ""
                          : "recompute activations (--recompute; pipeline.recompute for train) ",
        note));
  }
  throw ConfigError(fmt::format(
      "model '{}' does not fit on {} nodes x {} devices of {} GB: {} stages would hold it, but "
      "not packed into whole nodes of {} devices; use more nodes, raise --memory-gb or change "
      "--max-stage-devices.{}",
      profile.model, cluster.num_nodes, cluster.devices_per_node, cluster.device_memory_gb,
      fewest[0], cluster.devices_per_node, note));
}

// Whether schedule::generate accepts `kind` for template `t` with m microbatches.
bool generates(Template t, const std::string& kind, int m) {
  t.schedule = kind;
  try {
    schedule::check_spec(schedule_spec(t, m));
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Templates choose their kind at the template's microbatch count; the batch split may give a
// pipeline another count. Re-picks each pipeline's kind at the count it actually gets: the
// fastest (simulated at that count) that generate() accepts and that fits memory, else the
// accepted one with the least memory. Then the plan's predictions follow.
void fit_schedules(Plan& plan, const Profile& profile, const Cluster& cluster,
                   const TemplateOptions& opt) {
  if (opt.schedule_kinds.empty()) return;
  const CostModel model(profile, cluster, opt.cost);
  const double mem_limit = cluster.device_memory_bytes();
  // Pipelines of one template with the same count get the same pick: evaluate it once.
  std::map<std::pair<int, int>, Template> picked;  // (template nodes, m) -> fitted template
  for (auto& p : plan.pipelines) {
    const int m = p.microbatches;
    const auto key = std::make_pair(p.tmpl.num_nodes, m);
    if (auto it = picked.find(key); it != picked.end()) {
      p.tmpl = it->second;
      continue;
    }
    Template at_m = p.tmpl;
    at_m.microbatches = m;
    std::optional<std::pair<std::string, ScheduleEstimate>> fast, small;
    for (const auto& kind : opt.schedule_kinds) {
      if (!generates(at_m, kind, m)) continue;
      auto est = opt.evaluator(at_m, kind);
      if (!est) continue;
      const double ms = est->fixed_ms + est->per_microbatch_ms * m;
      if (est->peak_memory_bytes <= mem_limit &&
          (!fast || ms < fast->second.fixed_ms + fast->second.per_microbatch_ms * m))
        fast = std::make_pair(kind, *est);
      if (!small || est->peak_memory_bytes < small->second.peak_memory_bytes)
        small = std::make_pair(kind, *est);
    }
    auto& pick = fast ? fast : small;
    if (pick) {
      set_schedule(at_m, pick->first, pick->second, model);
      p.tmpl = std::move(at_m);
    }
    BW_CHECK(generates(p.tmpl, p.tmpl.schedule, m), "no schedule kind runs {} microbatches", m);
    picked.emplace(key, p.tmpl);
  }
  update_predictions(plan, cluster);
}

}  // namespace

PlanResult make_plan(const Profile& profile, const Cluster& cluster, int fault_tolerance,
                     int microbatches, const PlannerOptions& options) {
  validate(cluster);
  if (fault_tolerance < 0)
    throw ConfigError(fmt::format("fault tolerance must be >= 0, got {}", fault_tolerance));
  if (microbatches < 1 || microbatches > kMaxPlanMicrobatches)
    throw ConfigError(
        fmt::format("microbatches must be in [1, {}], got {}", kMaxPlanMicrobatches, microbatches));
  if (options.template_microbatches && *options.template_microbatches < 1)
    throw ConfigError(
        fmt::format("template microbatches must be >= 1, got {}", *options.template_microbatches));
  const int m1 = options.template_microbatches.value_or(
      std::max(1, ceil_div(microbatches, fault_tolerance + 1)));
  TemplateOptions opt = template_options(options, m1, profile, cluster);
  PlanResult best;
  // The search first, then (having said what the rest costs) the simulated schedule choice:
  // together what generate_templates does.
  TemplateOptions search = opt;
  search.schedule_kinds.clear();
  if (options.on_cost) options.on_cost(estimate_search(profile, cluster, search));
  best.templates = generate_templates(profile, cluster, search);
  if (best.templates.templates.empty()) does_not_fit(profile, cluster, opt);
  if (options.on_cost) {
    options.on_cost(estimate_rest(best.templates, cluster, fault_tolerance, microbatches,
                                  opt.schedule_kinds, !options.template_microbatches));
  }
  choose_schedules(best.templates, profile, cluster, opt);
  best.plan = instantiate(best.templates, cluster.num_nodes, fault_tolerance, microbatches, cluster,
                          options.work);
  fit_schedules(best.plan, profile, cluster, opt);
  if (options.template_microbatches) return best;
  const int m2 = std::max(1, ceil_div(microbatches, static_cast<int>(best.plan.pipelines.size())));
  if (m2 == m1) return best;
  PlanResult second;
  const TemplateOptions opt2 = template_options(options, m2, profile, cluster);
  second.templates = generate_templates(profile, cluster, opt2);
  if (second.templates.templates.empty()) return best;
  try {
    second.plan = instantiate(second.templates, cluster.num_nodes, fault_tolerance, microbatches,
                              cluster, options.work);
    fit_schedules(second.plan, profile, cluster, opt2);
  } catch (const ConfigError&) {
    return best;
  }
  return second.plan.step_ms < best.plan.step_ms ? second : best;
}

}  // namespace bw::plan
