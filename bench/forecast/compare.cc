// The published comparison and breakwater's own figures, as tables (docs/forecast.md quotes
// them). Not a timing benchmark.
//
//   build-pure/bench/forecast/bw_forecast_compare [TRACE_DIR]
//
// 1. Oobleck's artifact constants for BERT-large, one failure every 10 minutes: the step time
//    each published fraction implies (bisection on the replay), and the fractions replayed at
//    those step times, under the artifact's accounting and under ours.
// 2. Breakwater's recovery model (detection + state transfer + regroup, only the elapsed part
//    of the interrupted step lost) on the same scenario.
// 3. GPT-3 6.7B on 32 x 8 devices (the real planner) under fixed, Poisson and burst failures.
// 4. The public spot-instance traces, when TRACE_DIR holds them (skipped otherwise).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>

#include "forecast/planned.h"
#include "forecast/replay.h"
#include "plan/schedule_aware.h"
#include "plan/synth.h"

namespace bw::forecast {
namespace {

constexpr double kDuration = 12 * 3600e3;

Trace fixed_trace(double interval_ms, int nodes) {
  SyntheticSpec s;
  s.nodes = nodes;
  s.interval_ms = interval_ms;
  s.duration_ms = kDuration;
  return make_synthetic(s);
}

double useful(const Trace& trace, PolicyKind kind, const PolicyCosts& costs, double step_ms,
              bool whole, double state_bytes = 0) {
  ConstantModel model(step_ms, 8192, 1, state_bytes);
  ReplayOptions o;
  o.duration_ms = kDuration;
  o.whole_step_loss = whole;
  return replay(trace, kind, costs, model, o).useful_fraction();
}

// Smallest step time in [lo, hi] whose fraction is <= target, for a fraction decreasing in T.
double bisect(const std::function<double(double)>& f, double target, double lo, double hi) {
  for (int i = 0; i < 50; ++i) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) > target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

void published() {
  const auto trace = fixed_trace(601.2e3, 1000);  // the artifact's trace: 601.2 s apart
  const auto costs = oobleck_artifact_bert_large();
  fmt::print("1. Published comparison (Oobleck SOSP'23, BERT-large, one failure / 10 min)\n");
  fmt::print("{:<28} {:>9} {:>12} {:>12} {:>14}\n", "system (our policy)", "published", "implied T",
             "ours, whole", "ours, elapsed");
  struct Row {
    const char* name;
    PolicyKind kind;
    double published;
    double wall_factor;  // model step = factor * wall step (redundant: useful share)
    double lo, hi;
  };
  const Row rows[] = {
      {"Oobleck (breakwater)", PolicyKind::kBreakwater, 0.955, 1.0, 1e3, 200e3},
      {"Varuna (restart)", PolicyKind::kRestart, 0.544, 1.0, 26e3, 50e3},
      {"Bamboo (redundant)", PolicyKind::kRedundant, 0.150, 0.1971, 1e3, 300e3},
  };
  for (const auto& r : rows) {
    auto f = [&](double wall) { return useful(trace, r.kind, costs, r.wall_factor * wall, true); };
    double T = 0;
    if (r.kind == PolicyKind::kRestart) {
      // Increasing in T while one checkpoint cycle fits between failures (U ~ 10 T / I).
      T = bisect([&](double t) { return -f(t); }, -r.published, r.lo, r.hi);
    } else {
      T = bisect(f, r.published, r.lo, r.hi);
    }
    fmt::print("{:<28} {:>8.1f}% {:>10.2f} s {:>11.1f}% {:>13.1f}%\n", r.name, 100 * r.published,
               T / 1e3, 100 * f(T), 100 * useful(trace, r.kind, costs, r.wall_factor * T, false));
  }
  fmt::print("\n");
}

void own_recovery() {
  // BERT-large: 340M parameters, 16 B of state each; a node of a 3-node pipeline holds a third.
  const double state_bytes = 340e6 * 16 / 3;
  const auto trace10 = fixed_trace(601.2e3, 1000);
  SyntheticSpec p;
  p.pattern = FailurePattern::kPoisson;
  p.nodes = 1000;
  p.interval_ms = 600e3;
  p.duration_ms = kDuration;
  PolicyCosts ours;  // breakwater's recovery model; restart/redundant keep the artifact's
  fmt::print("2. Breakwater's recovery model on the BERT-large scenario (T = 25.0 s)\n");
  fmt::print("   recovery = detection {:.0f} ms + {:.2f} GB over {:.0f} Gb/s + regroup {:.0f} ms\n",
             ours.breakwater.detection_ms, state_bytes / 1e9, ours.breakwater.inter_node_gbps,
             ours.breakwater.regroup_ms);
  fmt::print("{:<34} {:>14} {:>14}\n", "failures", "elapsed loss", "whole step");
  for (int kind = 0; kind < 2; ++kind) {
    double e = 0, w = 0;
    const int seeds = kind == 0 ? 1 : 20;
    for (int s = 1; s <= seeds; ++s) {
      p.seed = static_cast<std::uint64_t>(s);
      const auto trace = kind == 0 ? trace10 : make_synthetic(p);
      e += useful(trace, PolicyKind::kBreakwater, ours, 25e3, false, state_bytes) / seeds;
      w += useful(trace, PolicyKind::kBreakwater, ours, 25e3, true, state_bytes) / seeds;
    }
    fmt::print("{:<34} {:>13.2f}% {:>13.2f}%\n",
               kind == 0 ? "every 601.2 s" : "Poisson, mean 10 min (20 seeds)", 100 * e, 100 * w);
  }
  fmt::print("\n");
}

// GPT-3 6.7B on the real planner for up to `nodes` nodes of 8 A100s, with schedule-aware
// templates unless `one_f_one_b`.
std::unique_ptr<PlannerModel> planner_for(int nodes, bool one_f_one_b = false) {
  PlannerSetup s;
  s.profile = plan::synthesize_profile(plan::find_model("gpt3-6.7b"), plan::find_device("a100"), 1);
  s.cluster.num_nodes = nodes;
  s.cluster.devices_per_node = 8;
  s.cluster.device_memory_gb = 80;
  s.cluster.inter_node_gbps = PolicyCosts{}.breakwater.inter_node_gbps;
  s.fault_tolerance = 2;
  s.microbatches = 512;
  if (!one_f_one_b) {
    s.planner_options.schedule_kinds = plan::simulated_schedule_kinds();
    s.planner_options.evaluator = plan::simulator_evaluator(s.profile, s.cluster);
  }
  return std::make_unique<PlannerModel>(std::move(s));
}

int max_live(const Trace& trace) { return max_live_nodes(trace); }

void table(const std::string& title, const Trace& trace, double duration_ms) {
  auto model = planner_for(max_live(trace));
  ReplayOptions o;
  o.duration_ms = duration_ms;
  int removals = 0;
  for (const auto& e : trace.events) removals += e.kind == EventKind::kRemove;
  PolicyCosts young;
  young.restart.checkpoint_every_steps =
      young_checkpoint_steps(young.restart.checkpoint_ms, duration_ms / std::max(1, removals),
                             *model->step_ms(max_live(trace), Arrangement::kUniform));
  fmt::print("{}\n", title);
  fmt::print("  {:<18} {:>8} {:>11} {:>7} {:>7} {:>7} {:>7} {:>7}\n", "policy", "useful", "samples",
             "lost", "ckpt", "down", "redund", "stalled");
  auto row = [&](const std::string& name, const ReplayResult& r) {
    const auto& t = r.time;
    const double D = r.duration_ms / 100;
    fmt::print("  {:<18} {:>7.2f}% {:>11.4g} {:>6.2f}% {:>6.2f}% {:>6.2f}% {:>6.2f}% {:>6.2f}%\n",
               name, 100 * r.useful_fraction(), r.samples, t.lost_ms / D, t.checkpoint_ms / D,
               (t.reconfigure_ms + t.restart_ms + t.rebalance_ms) / D, t.redundant_ms / D,
               t.stalled_ms / D);
  };
  PlannedBreakwaterPolicy breakwater(PolicyCosts{}, *model);
  row("breakwater", replay(trace, breakwater, *model, o));
  PolicyCosts incremental;
  incremental.breakwater.replan_horizon_ms = 0;
  PlannedBreakwaterPolicy oobleck_like(incremental, *model);
  row("  incremental only", replay(trace, oobleck_like, *model, o));
  auto plain = planner_for(max_live(trace), /*one_f_one_b=*/true);
  PlannedBreakwaterPolicy plain_policy(PolicyCosts{}, *plain);
  row("  1F1B templates", replay(trace, plain_policy, *plain, o));
  row("restart", replay(trace, PolicyKind::kRestart, PolicyCosts{}, *model, o));
  row(fmt::format("restart, k={}", young.restart.checkpoint_every_steps),
      replay(trace, PolicyKind::kRestart, young, *model, o));
  row("redundant", replay(trace, PolicyKind::kRedundant, PolicyCosts{}, *model, o));
}

void gpt_scenarios() {
  auto model = planner_for(32);
  fmt::print(
      "3. GPT-3 6.7B on the planner, 32 nodes x 8 A100, 512 microbatches, f = 2, 12 h, failed "
      "nodes return after 30 min; k = Young's checkpoint interval\n");
  fmt::print(
      "   (step on 32 nodes: {:.2f} s templates, {:.2f} s identical pipelines, {:.2f} s 1F1B-only "
      "templates)\n",
      *model->step_ms(32, Arrangement::kTemplates) / 1e3,
      *model->step_ms(32, Arrangement::kUniform) / 1e3,
      *planner_for(32, true)->step_ms(32, Arrangement::kTemplates) / 1e3);
  for (int pattern = 0; pattern < 3; ++pattern) {
    SyntheticSpec s;
    s.pattern = static_cast<FailurePattern>(pattern);
    s.nodes = 32;
    s.interval_ms = pattern == 2 ? 3600e3 : 600e3;
    s.burst_size = 4;
    s.rejoin_after_ms = 30 * 60e3;
    s.duration_ms = kDuration;
    s.seed = 5;
    const char* names[] = {"fixed, every 10 min", "Poisson, mean 10 min",
                           "bursts of 4 within 30 s, mean 1 h apart"};
    table(fmt::format(" {}:", names[pattern]), make_synthetic(s), kDuration);
  }
  fmt::print("\n");
}

void public_traces(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty() || !fs::is_directory(dir)) {
    fmt::print("4. Public traces: skipped (no trace directory given or found)\n");
    return;
  }
  fmt::print("4. Public spot-instance traces, GPT-3 6.7B on the planner, up to the last event\n");
  for (const char* name :
       {"aws-p3.csv", "aws-g4dn.csv", "scaled-gcp.csv", "fixed-10m.csv", "fixed-1h.csv"}) {
    const auto path = fs::path(dir) / name;
    if (!fs::exists(path)) {
      fmt::print(" {}: skipped (absent)\n", name);
      continue;
    }
    const auto trace = read_trace(path.string());
    table(
        fmt::format(" {} ({} events, up to {} nodes):", name, trace.events.size(), max_live(trace)),
        trace, trace.events.back().time_ms);
  }
}

}  // namespace
}  // namespace bw::forecast

int main(int argc, char** argv) {
  bw::forecast::published();
  bw::forecast::own_recovery();
  bw::forecast::gpt_scenarios();
  bw::forecast::public_traces(argc > 1 ? argv[1] : "");
  return 0;
}
