// `breakwater plan`: templates, the chosen plan and, with --fail, the reconfigured plan, as
// tables for people or JSON (--json) for programs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/file_io.h"
#include "plan/planner.h"
#include "plan/reconfigure.h"

namespace bw::cli {
namespace {

struct PlanArgs {
  std::string profile;
  std::string cluster;
  int nodes = 0;
  int devices_per_node = 0;
  int fault_tolerance = 0;
  int microbatches = 0;
  double memory_gb = 0;
  double inter_node_gbps = 0;
  double intra_node_gbps = 0;
  std::string fail;
  int template_microbatches = 0;
  int threads = 1;
  int max_stage_devices = 0;  // 0: devices per node
  bool recompute = false;
  std::string schedules = "1f1b,interleaved,hanayo-w1,hanayo-w2";
  bool json = false;
  bool cost = false;  // print the cost note whatever its size
};

// A huge but legal request says what it will take before the long part starts: the planner's
// estimate of the composition and the simulated schedule choice (plan_cost.h), calibrated on the
// 2-core development machine, on stderr when it is above 2 s or 1 GiB (or always with --cost).
constexpr double kNoteSeconds = 2;
constexpr double kNoteBytes = 1024.0 * 1024 * 1024;

void print_cost_note(const plan::PlanCost& c, bool always) {
  if (!always && c.seconds < kNoteSeconds && c.peak_bytes < kNoteBytes) return;
  if (c.stage == "search") {
    fmt::print(stderr,
               "note: the template search may take up to {:.3g} s, twice when the planner "
               "searches again for another microbatch count ({:.3g} transitions of its dynamic "
               "program; its cost bounds often prune most of them); estimated at the reference "
               "machine's speed, docs/planning.md \"Cost of planning\"\n",
               c.seconds, c.search_transitions);
    std::fflush(stderr);
    return;
  }
  fmt::print(stderr,
             "note: planning will take about {:.3g} s more and {} in all (composition "
             "{:.3g} s: {:.3g} knapsack cells, {:.3g} template steps; simulated schedule choice "
             "{:.3g} s: {:.3g} slots); estimated at the reference machine's speed, "
             "docs/planning.md \"Cost of planning\"\n",
             c.seconds, io::human_bytes(static_cast<int64_t>(c.peak_bytes)), c.compose_seconds,
             c.compose_cells, c.compose_pairs, c.simulate_seconds, c.simulated_slots);
  std::fflush(stderr);
}

std::vector<NodeId> parse_nodes(const std::string& text, int num_nodes) {
  std::vector<NodeId> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int v = 0;
    try {
      size_t used = 0;
      v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("--fail: '{}' is not a node number (e.g. --fail 3,7)", item));
    }
    if (v < 0 || v >= num_nodes)
      throw ConfigError(
          fmt::format("--fail: node {} is outside the cluster's nodes 0..{}", v, num_nodes - 1));
    out.emplace_back(v);
  }
  std::vector<int> values;
  for (const NodeId n : out) values.push_back(n.value());
  require_distinct(values, "--fail");
  return out;
}

// "0-3,8" for a node list.
std::string ranges(std::vector<NodeId> nodes) {
  std::sort(nodes.begin(), nodes.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < nodes.size();) {
    size_t j = i;
    while (j + 1 < nodes.size() && nodes[j + 1].value() == nodes[j].value() + 1) ++j;
    parts.push_back(j == i ? fmt::format("{}", nodes[i])
                           : fmt::format("{}-{}", nodes[i], nodes[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

// Run-length form of a per-stage list: "3x2,1x4" = three stages of 2 then one of 4.
std::string runs(const std::vector<int>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    parts.push_back(j - i == 1 ? fmt::format("{}", v[i]) : fmt::format("{}x{}", j - i, v[i]));
    i = j;
  }
  std::string out = fmt::format("{}", fmt::join(parts, ","));
  return out.size() <= 26 ? out : out.substr(0, 23) + "...";
}

void print_templates(const plan::TemplateSet& set) {
  fmt::print(
      "Templates (chunks in model order, one per stage for 1f1b; time and memory at m; "
      "\"3x2\" = three of 2; a stage on 2 or more devices is sharded)\n");
  fmt::print("{:>5} {:>6} {:<26} {:<26} {:>7} {:<11} {:>4} {:>12} {:>9}\n", "nodes", "stages",
             "layers/chunk", "devices/stage", "sharded", "schedule", "m", "time ms", "mem GB");
  for (const auto& t : set.templates) {
    std::vector<int> layers, devices;
    int sharded = 0;
    for (const auto& c : t.chunks) layers.push_back(c.num_layers);
    for (const auto& s : t.stages) devices.push_back(s.num_devices), sharded += s.sharded();
    fmt::print("{:>5} {:>6} {:<26} {:<26} {:>7} {:<11} {:>4} {:>12.2f} {:>9.2f}\n", t.num_nodes,
               t.num_stages(), runs(layers), runs(devices), sharded, t.schedule, t.microbatches,
               t.iteration_ms(t.microbatches), t.peak_memory_bytes / 1e9);
  }
}

// Per stage of each template the plan uses: devices, sharded or not, times and memory.
void print_plan_stages(const plan::Plan& p) {
  // Field by field, not through JSON: a plan may have thousands of pipelines of one template.
  auto same = [](const plan::Template& a, const plan::Template& b) {
    if (a.num_nodes != b.num_nodes || a.schedule != b.schedule ||
        a.microbatches != b.microbatches || a.num_stages() != b.num_stages() ||
        a.chunks.size() != b.chunks.size() || a.peak_memory_bytes != b.peak_memory_bytes ||
        a.estimate.fixed_ms != b.estimate.fixed_ms ||
        a.estimate.per_microbatch_ms != b.estimate.per_microbatch_ms)
      return false;
    for (size_t k = 0; k < a.chunks.size(); ++k) {
      const auto &x = a.chunks[k], &y = b.chunks[k];
      if (x.first_layer != y.first_layer || x.num_layers != y.num_layers || x.stage != y.stage)
        return false;
    }
    for (int k = 0; k < a.num_stages(); ++k) {
      const auto &x = a.stages[k], &y = b.stages[k];
      if (x.first_layer != y.first_layer || x.num_layers != y.num_layers ||
          x.num_devices != y.num_devices || x.stage_ms != y.stage_ms ||
          x.memory_bytes != y.memory_bytes || x.comm_ms != y.comm_ms ||
          x.shard_comm_ms != y.shard_comm_ms || x.forward_ms != y.forward_ms ||
          x.backward_ms != y.backward_ms)
        return false;
    }
    return true;
  };
  std::vector<const plan::Template*> shown;
  for (const auto& pl : p.pipelines) {
    const plan::Template& t = pl.tmpl;
    bool seen = false;
    for (const auto* s : shown) seen = seen || same(*s, t);
    if (seen) continue;
    shown.push_back(&t);
    fmt::print(
        "\nStages of the {}-node template ({}, m = {}; times per microbatch and device; memory = "
        "peak per device)\n",
        t.num_nodes, t.schedule, t.microbatches);
    fmt::print("{:>5} {:>4} {:<8} {:>7} {:<12} {:>11} {:>9} {:>9} {:>8}\n", "stage", "node",
               "devices", "sharded", "layers", "compute ms", "shard ms", "send ms", "mem GB");
    for (int k = 0; k < t.num_stages(); ++k) {
      const auto& st = t.stages[k];
      std::vector<std::string> ranges;
      for (const auto& [first, end] : t.layers_of_stage(k))
        ranges.push_back(end - first == 1 ? fmt::format("{}", first)
                                          : fmt::format("{}-{}", first, end - 1));
      std::string layers = fmt::format("{}", fmt::join(ranges, ","));
      if (layers.size() > 12) layers = layers.substr(0, 9) + "...";
      const std::string devices =
          st.num_devices == 1
              ? fmt::format("{}", st.first_device)
              : fmt::format("{}-{}", st.first_device, st.first_device + st.num_devices - 1);
      fmt::print("{:>5} {:>4} {:<8} {:>7} {:<12} {:>11.2f} {:>9.2f} {:>9.2f} {:>8.2f}\n", k,
                 st.node, devices, st.sharded() ? "yes" : "no", layers,
                 st.forward_ms + st.backward_ms, st.shard_comm_ms, st.comm_ms,
                 st.memory_bytes / 1e9);
    }
  }
}

void print_plan(const plan::Plan& p, const std::string& title) {
  fmt::print("\n{} (generation {}): {} pipelines on {} nodes, {} microbatches of {}\n", title,
             p.generation, p.pipelines.size(), p.num_nodes(), p.global_microbatches,
             p.microbatch_size);
  fmt::print("{:>8} {:>5} {:<24} {:<11} {:>12} {:>12}\n", "pipeline", "nodes", "node ids",
             "schedule", "microbatches", "time ms");
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    const auto& pl = p.pipelines[i];
    fmt::print("{:>8} {:>5} {:<24} {:<11} {:>12} {:>12.2f}\n", i, pl.nodes.size(), ranges(pl.nodes),
               pl.tmpl.schedule, pl.microbatches, pl.iteration_ms);
  }
  fmt::print(
      "step {:.2f} ms = slowest pipeline {:.2f} ms + gradient all-reduce {:.2f} ms; "
      "throughput {:.2f} samples/s\n",
      p.step_ms, p.pipeline_ms, p.allreduce_ms, p.samples_per_s);
}

// Given overrides must be valid (not silently replaced by the cluster file's or the default).
void check_args(const PlanArgs& a, const CLI::App& cmd) {
  if (cmd.count("--nodes")) require_count(a.nodes, 1, plan::kMaxNodes, "--nodes");
  if (cmd.count("--devices-per-node"))
    require_count(a.devices_per_node, 1, plan::kMaxDevicesPerNode, "--devices-per-node");
  if (cmd.count("--memory-gb")) require_positive(a.memory_gb, "--memory-gb");
  if (cmd.count("--inter-node-gbps")) require_positive(a.inter_node_gbps, "--inter-node-gbps");
  if (cmd.count("--intra-node-gbps")) require_positive(a.intra_node_gbps, "--intra-node-gbps");
  if (cmd.count("--template-microbatches"))
    require_count(a.template_microbatches, 1, plan::kMaxPlanMicrobatches,
                  "--template-microbatches");
  require_count(a.fault_tolerance, 0, plan::kMaxNodes, "--fault-tolerance");
  require_count(a.microbatches, 1, plan::kMaxPlanMicrobatches, "--microbatches");
  require_count(a.threads, 1, 256, "--threads");
  if (cmd.count("--max-stage-devices"))
    require_count(a.max_stage_devices, 1, plan::kMaxDevicesPerNode, "--max-stage-devices");
}

void run(const PlanArgs& a) {
  plan::Profile profile = plan::load_profile(a.profile);
  plan::Cluster cluster;
  if (!a.cluster.empty()) cluster = plan::load_cluster(a.cluster);
  if (a.nodes > 0) cluster.num_nodes = a.nodes;
  if (a.devices_per_node > 0) cluster.devices_per_node = a.devices_per_node;
  if (a.memory_gb > 0) cluster.device_memory_gb = a.memory_gb;
  if (a.inter_node_gbps > 0) cluster.inter_node_gbps = a.inter_node_gbps;
  if (a.intra_node_gbps > 0) cluster.intra_node_gbps = a.intra_node_gbps;
  if (a.cluster.empty() && a.nodes <= 0)
    throw ConfigError("give the cluster: --nodes N (and --devices-per-node), or --cluster C.json");
  plan::validate(cluster);
  if (a.max_stage_devices > cluster.devices_per_node)
    throw ConfigError(fmt::format(
        "--max-stage-devices {} exceeds the {} devices of a node (a stage never spans nodes); "
        "use at most {}",
        a.max_stage_devices, cluster.devices_per_node, cluster.devices_per_node));
  plan::PlannerOptions opt;
  opt.max_stage_devices = a.max_stage_devices;
  opt.recompute = a.recompute;
  if (a.template_microbatches > 0) opt.template_microbatches = a.template_microbatches;
  opt.threads = a.threads;
  opt.on_cost = [always = a.cost](const plan::PlanCost& c) { print_cost_note(c, always); };
  if (a.schedules != "closed-form") {
    std::stringstream ss(a.schedules);
    std::string kind;
    while (std::getline(ss, kind, ','))
      if (!kind.empty()) opt.schedule_kinds.push_back(kind);
    require_distinct(opt.schedule_kinds, "--schedules");
  }
  plan::PlanResult r = plan::make_plan(profile, cluster, a.fault_tolerance, a.microbatches, opt);
  std::optional<plan::Reconfiguration> re;
  if (!a.fail.empty()) {
    re = plan::reconfigure(r.plan, r.templates, parse_nodes(a.fail, cluster.num_nodes), cluster);
  }
  if (a.json) {
    json::Json doc;
    doc["profile"] = profile.model;
    doc["cluster"] = plan::to_json(cluster);
    doc["templates"] = json::Json::array();
    for (const auto& t : r.templates.templates) doc["templates"].push_back(plan::to_json(t));
    doc["plan"] = plan::to_json(r.plan);
    if (re) {
      doc["reconfigured"] = plan::to_json(re->plan);
      doc["layer_copies"] = json::Json::array();
      for (const auto& c : re->copies)
        doc["layer_copies"].push_back({{"layer", c.layer.value()},
                                       {"to", {c.to.node.value(), c.to.device}},
                                       {"from", {c.from.node.value(), c.from.device}}});
    }
    fmt::print("{}\n", doc.dump(2));
    return;
  }
  fmt::print("Profile '{}' ({} layers, microbatch size {}) on {} nodes x {} devices of {} GB\n\n",
             profile.model, profile.num_layers(), profile.microbatch_size, cluster.num_nodes,
             cluster.devices_per_node, cluster.device_memory_gb);
  print_templates(r.templates);
  print_plan(r.plan, "Plan");
  print_plan_stages(r.plan);
  if (re) {
    print_plan(re->plan, fmt::format("After failure of nodes {}", a.fail));
    // A device of a sharded stage needs only its 1/d slice of each layer.
    double bytes = 0;
    for (const auto& c : re->copies) {
      const auto at = re->plan.locate(c.to);
      const int d = at ? re->plan.pipelines[at->pipeline].tmpl.stages[at->stage].num_devices : 1;
      bytes += profile.layers[c.layer.value()].param_bytes / d;
    }
    fmt::print("layer copies: {} (parameters {:.2f} GB, plus optimizer state)\n", re->copies.size(),
               bytes / 1e9);
  }
}

void add(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Pipeline templates and a fault-tolerant plan for a profile on a cluster");
  sub->add_option("--profile", args->profile, "layer profile JSON (docs/profiles.md)")->required();
  sub->add_option("--cluster", args->cluster, "cluster JSON; flags below override it");
  sub->add_option("--nodes", args->nodes, "number of nodes N");
  sub->add_option("--devices-per-node", args->devices_per_node, "devices per node g");
  sub->add_option("--fault-tolerance", args->fault_tolerance,
                  "f: node failures to survive (>= f + 1 pipelines)");
  sub->add_option("--microbatches", args->microbatches, "microbatches B in the global batch")
      ->required();
  sub->add_option("--memory-gb", args->memory_gb, "memory per device in GB (default 80)");
  sub->add_option("--inter-node-gbps", args->inter_node_gbps, "network per node, Gbit/s");
  sub->add_option("--intra-node-gbps", args->intra_node_gbps, "link inside a node, Gbit/s");
  sub->add_option("--fail", args->fail, "comma-separated failed nodes, e.g. 3,7");
  sub->add_option("--template-microbatches", args->template_microbatches,
                  "microbatches per pipeline the templates optimise for (default: automatic)");
  sub->add_option("--threads", args->threads, "threads for the template search");
  sub->add_option("--max-stage-devices", args->max_stage_devices,
                  "most devices of a node one stage may span, sharded across them (default: "
                  "devices per node; 1 = no sharding; never more than the profile's microbatch "
                  "size)");
  sub->add_flag("--recompute", args->recompute,
                "plan with activation recomputation (the runtime's pipeline.recompute): a "
                "microbatch in flight keeps only its layers' inputs, each layer's forward runs "
                "again before its backward");
  sub->add_option("--schedules", args->schedules,
                  "schedule kinds a template may use, chosen per node count by the simulator "
                  "(1f1b, interleaved, hanayo-w1, hanayo-w2), or closed-form for the closed-form "
                  "1F1B model only")
      ->capture_default_str();
  sub->add_flag("--json", args->json, "print JSON instead of tables");
  sub->add_flag("--cost", args->cost,
                "print the estimated time and memory of planning on stderr even when small (it is "
                "printed anyway above 2 s or 1 GiB)");
  sub->callback([sub, args] {
    reject_nan_values(*sub);
    check_args(*args, *sub);
    run(*args);
  });
}

Registrar registrar("plan", 10, add);

}  // namespace
}  // namespace bw::cli
