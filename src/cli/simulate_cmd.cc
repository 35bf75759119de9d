// `breakwater simulate`: replays a cluster through a failure trace under one or more policies
// (breakwater, restart, redundant) and prints a table per policy, or JSON; optionally an SVG of
// throughput over time. The cluster comes from the analytic GPT-3 model (forecast/model.h), or
// from a constant step time (--step-ms) to reproduce published comparisons.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/error.h"
#include "core/file_io.h"
#include "forecast/artifact.h"
#include "forecast/model.h"
#include "forecast/planned.h"
#include "forecast/policies.h"
#include "forecast/replay.h"
#include "forecast/report.h"
#include "forecast/step_table.h"
#include "forecast/trace.h"
#include "plan/schedule_aware.h"
#include "plan/synth.h"

namespace bw::cli {
namespace {

struct SimulateArgs {
  std::string model = "gpt3-6.7b";
  int nodes = 32;
  int devices_per_node = 8;
  int fault_tolerance = 2;
  int microbatches = 512;
  int microbatch_size = 1;
  double device_tflops = 140;
  double device_memory_gb = 80;
  double device_memory_gb_set = NAN;
  double step_ms = 0;                  // > 0: constant-step model instead of the analytic one
  std::string throughput = "planner";  // planner | analytic
  std::string device = "a100";
  std::vector<std::string> schedules;  // planner: kinds templates may use (empty: all)
  std::string trace;
  std::string failure_every;
  double failure_rate = 0;  // per hour
  int burst_size = 0;
  std::string burst_window = "30s";
  std::string rejoin_after;
  std::uint64_t seed = 1;
  double hours = 12;
  std::vector<std::string> policies;
  std::string svg;
  bool json = false;
  std::string costs_preset;
  bool whole_step_loss = false;
  std::string step_table;         // per-policy step time by node count (CSV)
  double samples_per_step = NAN;  // for samples_per_s tables (default: the --costs model's)
  double startup_ms = NAN;        // cold start (default: 0, or the --costs model's 45 s)
  double join_boot_ms = NAN;      // instance start-up of a join (default: 0, or 45 s likewise)
  bool no_failover_slowdown = false, no_checkpoint_after_restart = false;
  bool no_align_checkpoints = false;
  bool no_train_through = false, no_join_waits = false, no_stalled_rendezvous = false;
  bool no_idle_removal_slowdown = false;
  // Cost overrides (NaN: keep the default).
  double detection_ms = NAN, inter_node_gbps = NAN, regroup_ms = NAN, reconfigure_ms = NAN;
  double replan_horizon_ms = NAN;
  double restart_ms = NAN, checkpoint_ms = NAN, rebalance_ms = NAN, redundant_restart_ms = NAN;
  double useful_share = NAN;
  std::string checkpoint_every;  // steps, or "auto" (Young's interval for the trace)
};

void set_if(double& field, double value) {
  if (!std::isnan(value)) field = value;
}

// Every count, cost and rate flag, before anything is built. NaN cost overrides mean "keep the
// default" (set_if), so only given values are checked.
void check_args(const SimulateArgs& a) {
  require_in(a.hours, 1e-6, 24.0 * 366 * 10, "--hours");
  require_count(a.nodes, 1, forecast::kMaxTraceNodes, "--nodes");
  require_count(a.devices_per_node, 1, 64, "--devices-per-node");
  require_count(a.fault_tolerance, 0, forecast::kMaxTraceNodes, "--fault-tolerance");
  require_count(a.microbatches, 1, 1 << 20, "--microbatches");
  require_count(a.microbatch_size, 1, 1 << 20, "--microbatch-size");
  require_positive(a.device_tflops, "--device-tflops");
  if (!std::isnan(a.device_memory_gb_set))
    require_positive(a.device_memory_gb_set, "--device-memory-gb");
  require_non_negative(a.step_ms, "--step-ms");
  require_non_negative(a.failure_rate, "--failure-rate");
  require_count(a.burst_size, 0, forecast::kMaxTraceNodes, "--burst-size");
  for (const auto& [v, flag] : std::vector<std::pair<double, const char*>>{
           {a.detection_ms, "--detection-ms"},
           {a.regroup_ms, "--regroup-ms"},
           {a.reconfigure_ms, "--reconfigure-ms"},
           {a.replan_horizon_ms, "--replan-horizon-ms"},
           {a.restart_ms, "--restart-ms"},
           {a.checkpoint_ms, "--checkpoint-ms"},
           {a.rebalance_ms, "--rebalance-ms"},
           {a.redundant_restart_ms, "--redundant-restart-ms"},
           {a.startup_ms, "--startup-ms"},
           {a.join_boot_ms, "--join-boot-ms"}}) {
    if (!std::isnan(v)) require_non_negative(v, flag);
  }
  if (!std::isnan(a.inter_node_gbps)) require_positive(a.inter_node_gbps, "--inter-node-gbps");
  if (!std::isnan(a.useful_share)) {
    if (!(a.useful_share > 0 && a.useful_share <= 1))
      throw ConfigError(fmt::format("--useful-share must be in (0, 1], got {}", a.useful_share));
  }
}

void run_simulate(const SimulateArgs& a) {
  using namespace bw::forecast;
  check_args(a);
  const double duration_ms = a.hours * 3600e3;
  const int sources = !a.trace.empty() + !a.failure_every.empty() + (a.failure_rate > 0);
  if (sources != 1) {
    throw ConfigError(
        "give exactly one failure source: --trace FILE, --failure-every DURATION or "
        "--failure-rate PER_HOUR");
  }
  Trace trace;
  if (!a.trace.empty()) {
    trace = read_trace(a.trace);
    validate_trace(trace);
  } else {
    SyntheticSpec s;
    s.nodes = a.nodes;
    s.duration_ms = duration_ms;
    s.seed = a.seed;
    if (!a.failure_every.empty()) {
      s.pattern = FailurePattern::kFixed;
      s.interval_ms = parse_duration_ms(a.failure_every, "--failure-every");
    } else {
      s.pattern = FailurePattern::kPoisson;
      s.interval_ms = 3600e3 / a.failure_rate;
    }
    if (a.burst_size > 0) {
      s.pattern = FailurePattern::kBursts;
      s.burst_size = a.burst_size;
      s.burst_window_ms = parse_duration_ms(a.burst_window, "--burst-window");
    }
    if (!a.rejoin_after.empty())
      s.rejoin_after_ms = parse_duration_ms(a.rejoin_after, "--rejoin-after");
    trace = make_synthetic(s);
  }
  // A huge but legal trace says what it will cost before the replay starts. Measured on one core
  // (analytic model, 3 policies): 72 k events 2 s, 288 k events 35 s; the planner model ~3x.
  if (trace.events.size() > 100'000) {
    const double n = static_cast<double>(trace.events.size());
    const double s = 4.2e-10 * n * n * (a.throughput == "planner" && a.step_ms <= 0 ? 3.0 : 1.0) *
                     std::max<size_t>(1, a.policies.empty() ? 3 : a.policies.size()) / 3.0;
    fmt::print(stderr, "note: {} trace events to replay; expect roughly {:.0f} s\n",
               trace.events.size(), s);
    std::fflush(stderr);
  }

  PolicyCosts costs;
  std::optional<ArtifactModel> artifact;
  if (a.costs_preset.rfind("oobleck-", 0) == 0) {
    artifact = artifact_model(a.costs_preset.substr(8));
    costs = artifact->costs;
  } else if (!a.costs_preset.empty() && a.costs_preset != "default") {
    throw ConfigError(fmt::format("unknown --costs '{}'; choose default or oobleck-<model> ({})",
                                  a.costs_preset, fmt::join(artifact_model_names(), ", ")));
  }
  if (a.no_failover_slowdown) costs.redundant.failover_slowdown.reset();
  if (a.no_checkpoint_after_restart) costs.restart.checkpoint_after_restart = false;
  if (a.no_align_checkpoints) costs.restart.align_checkpoints = false;
  if (a.no_train_through) {
    costs.breakwater.train_through_reconfiguration = false;
    costs.restart.train_through_restart = false;
  }
  if (a.no_join_waits) {
    costs.breakwater.join_waits_for_failure_from_nodes = 0;
    costs.restart.join_waits_for_failure_from_nodes = 0;
    costs.redundant.join_rebalance_pipeline_nodes = 0;
    costs.redundant.idle_removal_slows = false;  // it needs the pipelines of that rule
  }
  if (a.no_stalled_rendezvous) {
    costs.breakwater.stalled_rendezvous = false;
    costs.restart.stalled_rendezvous = false;
  }
  if (a.no_idle_removal_slowdown) costs.redundant.idle_removal_slows = false;
  set_if(costs.breakwater.detection_ms, a.detection_ms);
  set_if(costs.breakwater.inter_node_gbps, a.inter_node_gbps);
  set_if(costs.breakwater.regroup_ms, a.regroup_ms);
  set_if(costs.breakwater.replan_horizon_ms, a.replan_horizon_ms);
  if (!std::isnan(a.reconfigure_ms)) costs.breakwater.fixed_reconfigure_ms = a.reconfigure_ms;
  set_if(costs.restart.restart_ms, a.restart_ms);
  set_if(costs.restart.checkpoint_ms, a.checkpoint_ms);
  set_if(costs.redundant.rebalance_ms, a.rebalance_ms);
  set_if(costs.redundant.restart_ms, a.redundant_restart_ms);
  set_if(costs.redundant.useful_share, a.useful_share);

  std::unique_ptr<ThroughputModel> model;
  PlannerModel* planner = nullptr;
  if (a.throughput != "planner" && a.throughput != "analytic") {
    throw ConfigError(
        fmt::format("unknown --throughput '{}'; choose planner or analytic", a.throughput));
  }
  if (!a.step_table.empty() && a.checkpoint_every == "auto") {
    throw ConfigError(
        "--checkpoint-every auto needs one step time; give a step count with "
        "--step-table");
  }
  if (!a.step_table.empty()) {
    // The table gives each policy its own model (below); this one only fills the report.
    model = std::make_unique<ConstantModel>(1000, 1);
  } else if (a.step_ms > 0) {
    model = std::make_unique<ConstantModel>(
        a.step_ms, static_cast<double>(a.microbatches) * a.microbatch_size);
  } else if (a.throughput == "planner") {
    // The real planner: a synthetic profile of the model on the device, templates for up to
    // the most nodes the trace ever has.
    const auto dev = plan::find_device(a.device);
    PlannerSetup setup;
    // The analytic model's size names map onto the planner's (plan/synth.h).
    std::string name = a.model;
    for (const auto& [size, planner_name] :
         std::vector<std::pair<std::string, std::string>>{{"gpt3-125m", "gpt3-small"},
                                                          {"gpt3-350m", "gpt3-medium"},
                                                          {"gpt3-760m", "gpt3-large"},
                                                          {"gpt3-1.3b", "gpt3-xl"}}) {
      if (name == size) name = planner_name;
    }
    setup.profile = plan::synthesize_profile(plan::find_model(name), dev, a.microbatch_size);
    setup.cluster.num_nodes = std::max(1, max_live_nodes(trace));
    setup.cluster.devices_per_node = a.devices_per_node;
    setup.cluster.device_memory_gb =
        std::isnan(a.device_memory_gb_set) ? dev.memory_gb : a.device_memory_gb_set;
    setup.cluster.inter_node_gbps = costs.breakwater.inter_node_gbps;
    setup.fault_tolerance = a.fault_tolerance;
    setup.microbatches = a.microbatches;
    // Schedule-aware templates: each node count takes the kind the simulator predicts fastest.
    // Only 1F1B: the planner's own closed form, no simulation.
    const auto kinds = a.schedules.empty() ? plan::simulated_schedule_kinds() : a.schedules;
    if (kinds != std::vector<std::string>{"1f1b"}) {
      setup.planner_options.schedule_kinds = kinds;
      setup.planner_options.evaluator = plan::simulator_evaluator(setup.profile, setup.cluster);
    }
    auto m = std::make_unique<PlannerModel>(std::move(setup));
    planner = m.get();
    model = std::move(m);
  } else {
    AnalyticCluster c;
    c.devices_per_node = a.devices_per_node;
    c.device_tflops = a.device_tflops;
    c.device_memory_gb =
        std::isnan(a.device_memory_gb_set) ? a.device_memory_gb : a.device_memory_gb_set;
    c.microbatches = a.microbatches;
    c.microbatch_size = a.microbatch_size;
    c.fault_tolerance = a.fault_tolerance;
    auto m = std::make_unique<AnalyticGptModel>(gpt3_preset(a.model), c);
    if (m->min_nodes_per_pipeline() < 0) {
      throw ConfigError(fmt::format(
          "{} does not fit: one microbatch's activations exceed {} GB per device; raise "
          "--device-memory-gb",
          a.model, a.device_memory_gb));
    }
    model = std::move(m);
  }

  if (a.checkpoint_every == "auto") {
    // Young's interval from the trace's failure rate and the step on the largest membership.
    int removals = 0;
    for (const auto& e : trace.events) removals += e.kind == EventKind::kRemove;
    const int most = max_live_nodes(trace);
    const double mtbf_ms = duration_ms / std::max(1, removals);
    const auto step = model->step_ms(most, Arrangement::kUniform);
    if (!step) throw ConfigError("--checkpoint-every auto: the model does not fit the cluster");
    costs.restart.checkpoint_every_steps =
        young_checkpoint_steps(costs.restart.checkpoint_ms, mtbf_ms, *step);
  } else if (!a.checkpoint_every.empty()) {
    try {
      std::size_t used = 0;
      const int k = std::stoi(a.checkpoint_every, &used);
      if (used != a.checkpoint_every.size() || k < 0) throw std::invalid_argument("");
      costs.restart.checkpoint_every_steps = k;
    } catch (const std::logic_error&) {
      throw ConfigError(fmt::format("--checkpoint-every '{}' is not a step count >= 0 or 'auto'",
                                    a.checkpoint_every));
    }
  }
  std::vector<std::string> names = a.policies;
  if (names.empty()) names = {"breakwater", "restart", "redundant"};
  ReplayOptions options;
  options.duration_ms = duration_ms;
  options.whole_step_loss = a.whole_step_loss;
  options.startup_ms = !std::isnan(a.startup_ms) ? a.startup_ms
                       : artifact                ? artifact->startup_ms
                                                 : 0.0;
  options.join_boot_ms = !std::isnan(a.join_boot_ms) ? a.join_boot_ms
                         : artifact                  ? artifact->startup_ms
                                                     : 0.0;
  std::optional<StepTable> table;
  double table_samples = a.samples_per_step;
  if (!a.step_table.empty()) {
    if (std::isnan(table_samples)) {
      table_samples = artifact ? artifact->samples_per_step
                               : static_cast<double>(a.microbatches) * a.microbatch_size;
    }
    table = read_step_table(a.step_table, table_samples);
  }
  std::vector<ReplayResult> results;
  for (const auto& name : names) {
    const auto kind = parse_policy(name);
    if (table) {
      // Each policy trains at its own measured step time for the node count.
      const auto rows = table->step_ms.find(kind);
      if (rows == table->step_ms.end()) {
        throw ConfigError(
            fmt::format("{} has no rows for policy {}; add `{},nodes,...` rows or "
                        "leave it out of --policy",
                        a.step_table, name, name));
      }
      TableModel tm(rows->second, table_samples, 0, artifact ? artifact->min_nodes : 0);
      results.push_back(replay(trace, kind, costs, tm, options));
    } else if (planner && kind == PolicyKind::kBreakwater) {
      // Follows the plan through every failure and join (reconfigure / join per event).
      PlannedBreakwaterPolicy policy(costs, *planner);
      results.push_back(replay(trace, policy, *model, options));
    } else {
      results.push_back(replay(trace, kind, costs, *model, options));
    }
  }

  if (!a.svg.empty()) {
    SvgOptions so;
    so.title = !a.step_table.empty() ? fmt::format("step table {}", a.step_table)
               : a.step_ms > 0       ? fmt::format("constant step {:g} ms", a.step_ms)
                                     : fmt::format("{} on {} nodes x {} devices", a.model, a.nodes,
                                                   a.devices_per_node);
    io::write_file(a.svg, render_svg(results, so), "SVG");
  }
  if (a.json) {
    json::Json doc;
    doc["duration_ms"] = duration_ms;
    doc["model"] = a.step_ms > 0 ? std::string("constant") : a.model;
    doc["throughput"] = a.step_ms > 0 ? std::string("constant") : a.throughput;
    doc["whole_step_loss"] = a.whole_step_loss;
    doc["costs"] = to_json(costs);
    doc["results"] = to_json(results);
    fmt::print("{}\n", doc.dump(2));
  } else {
    fmt::print("{}", format_tables(results));
  }
}

void add_simulate(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate", "replay a cluster through a failure trace under breakwater, restart, redundant");
  cmd->add_option("--model", args->model, "gpt3-125m .. gpt3-175b (planner also: bert-large)")
      ->capture_default_str();
  cmd->add_option("--nodes", args->nodes, "nodes at the start (synthetic traces)")
      ->capture_default_str();
  cmd->add_option("--devices-per-node", args->devices_per_node)->capture_default_str();
  cmd->add_option("--fault-tolerance", args->fault_tolerance, "f: keep f+1 pipelines")
      ->capture_default_str();
  cmd->add_option("--microbatches", args->microbatches, "per global batch")->capture_default_str();
  cmd->add_option("--microbatch-size", args->microbatch_size)->capture_default_str();
  cmd->add_option("--device-tflops", args->device_tflops, "sustained FLOP rate per device")
      ->capture_default_str();
  cmd->add_option("--device-memory-gb", args->device_memory_gb_set,
                  "device memory (default: the device's, 80 for the analytic model)");
  cmd->add_option("--throughput", args->throughput,
                  "planner (templates + reconfigure per event) or analytic (closed form)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "planner: device of the synthetic profile")
      ->capture_default_str();
  cmd->add_option("--schedules", args->schedules,
                  "planner: schedule kinds templates may use (1f1b, interleaved, hanayo-w1, "
                  "hanayo-w2; default all)")
      ->delimiter(',');
  cmd->add_option("--step-ms", args->step_ms,
                  "constant step time instead of the GPT model (published comparisons)");
  cmd->add_option("--trace", args->trace, "CSV trace: time_ms,add|remove,nodeN");
  cmd->add_option("--failure-every", args->failure_every, "fixed interval, e.g. 10m");
  cmd->add_option("--failure-rate", args->failure_rate, "Poisson failures per hour");
  cmd->add_option("--burst-size", args->burst_size, "correlated bursts of this many nodes");
  cmd->add_option("--burst-window", args->burst_window, "spread of one burst")
      ->capture_default_str();
  cmd->add_option("--rejoin-after", args->rejoin_after, "removed nodes come back after this");
  cmd->add_option("--seed", args->seed)->capture_default_str();
  cmd->add_option("--hours", args->hours, "replayed duration")->capture_default_str();
  cmd->add_option("--policy", args->policies, "breakwater, restart, redundant (repeatable; all)")
      ->delimiter(',');
  cmd->add_option("--svg", args->svg, "write throughput over time here");
  cmd->add_flag("--json", args->json, "print JSON instead of tables");
  cmd->add_option("--costs", args->costs_preset,
                  "default, or oobleck-<model> (bert-large, gpt2, gpt3-medium, gpt3-2.7b, "
                  "gpt3-6.7b): Oobleck's artifact costs, 45 s cold start, 12-node minimum");
  cmd->add_option("--step-table", args->step_table,
                  "CSV policy,nodes,step_ms (or samples_per_s): each policy's step time by node "
                  "count (data/oobleck-sosp23/<model>.csv)");
  cmd->add_option("--samples-per-step", args->samples_per_step,
                  "samples per step for a samples_per_s table (default: the --costs model's, or "
                  "microbatches x microbatch size)");
  cmd->add_option("--startup-ms", args->startup_ms,
                  "cold start: instances boot this long, then each system starts up (0: train "
                  "from the first event)");
  cmd->add_option("--join-boot-ms", args->join_boot_ms,
                  "instance start-up of a node the trace adds later: it joins this long after "
                  "(default 0; the --costs oobleck-* models: 45 s, as the artifact)");
  cmd->add_flag("--no-failover-slowdown", args->no_failover_slowdown,
                "redundant: lose the step in flight at a failover instead of finishing it slowed");
  cmd->add_flag("--no-checkpoint-after-restart", args->no_checkpoint_after_restart,
                "restart: no checkpoint after a restart's first step");
  cmd->add_flag("--no-align-checkpoints", args->no_align_checkpoints,
                "restart: checkpoint every k steps after each start, not at multiples of k");
  cmd->add_flag("--no-train-through", args->no_train_through,
                "breakwater, restart: a failure stops the configuration that lost the node at "
                "once, instead of it training on until the recovery ends");
  cmd->add_flag("--no-join-waits", args->no_join_waits,
                "every join reconfigures (breakwater), restarts (restart) or rebalances "
                "(redundant), instead of waiting for the next failure or a whole pipeline");
  cmd->add_flag("--no-stalled-rendezvous", args->no_stalled_rendezvous,
                "breakwater, restart: a stalled cluster recovers only once it can train again");
  cmd->add_flag("--no-idle-removal-slowdown", args->no_idle_removal_slowdown,
                "redundant: removing a spare does not slow training");
  cmd->add_flag("--whole-step-loss", args->whole_step_loss,
                "a failure wastes the whole step in flight (Oobleck's artifact accounting)");
  cmd->add_option("--detection-ms", args->detection_ms, "breakwater: failure detection (1000)");
  cmd->add_option("--inter-node-gbps", args->inter_node_gbps, "breakwater: state transfer (100)");
  cmd->add_option("--regroup-ms", args->regroup_ms, "breakwater: new process groups (500)");
  cmd->add_option("--reconfigure-ms", args->reconfigure_ms,
                  "breakwater: fixed reconfiguration cost instead of the model");
  cmd->add_option("--replan-horizon-ms", args->replan_horizon_ms,
                  "breakwater on the planner: take a fresh plan when it does more steps over "
                  "this horizon (600000; 0: incremental only, as Oobleck)");
  cmd->add_option("--restart-ms", args->restart_ms, "restart: full restart (76000)");
  cmd->add_option("--checkpoint-ms", args->checkpoint_ms, "restart: one checkpoint (15800)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "restart: steps between (10), or auto (Young's interval)");
  cmd->add_option("--rebalance-ms", args->rebalance_ms, "redundant: failover+rebalance (76000)");
  cmd->add_option("--redundant-restart-ms", args->redundant_restart_ms,
                  "redundant: restart when neighbours fail (76000)");
  cmd->add_option("--useful-share", args->useful_share,
                  "redundant: useful fraction of a step (0.1971)");
  cmd->callback([cmd, args] {
    reject_nan_values(*cmd);
    require_distinct(args->schedules, "--schedules");
    require_distinct(args->policies, "--policy");
    // 0 reads as "not given" for these two; given, it would be silently ignored.
    if (cmd->count("--burst-size") > 0 && args->burst_size < 1)
      throw ConfigError(fmt::format(
          "--burst-size must be >= 1, got {}; omit it for failures one node at a time",
          args->burst_size));
    if (cmd->count("--step-ms") > 0 && !(args->step_ms > 0))
      throw ConfigError(fmt::format(
          "--step-ms must be a finite number > 0, got {}; omit it to time steps with the model",
          args->step_ms));
    run_simulate(*args);
  });
}

const Registrar kRegistrar("simulate", 50, add_simulate);

}  // namespace
}  // namespace bw::cli
