// Replay speed. Target (issue 5): 12 hours of a 1024-node cluster with a failure every
// 5 minutes in < 5 s, for the three policies together, model evaluation included.
//
//   build-pure/bench/forecast/bw_forecast_bench
#include <benchmark/benchmark.h>

#include "forecast/planned.h"
#include "forecast/replay.h"
#include "plan/schedule_aware.h"
#include "plan/synth.h"

namespace bw::forecast {
namespace {

Trace trace_1024(FailurePattern pattern) {
  SyntheticSpec s;
  s.pattern = pattern;
  s.nodes = 1024;
  s.interval_ms = 300e3;
  s.duration_ms = 12 * 3600e3;
  s.rejoin_after_ms = 30 * 60e3;  // spot capacity returns: joins as well as failures
  s.seed = 42;
  return make_synthetic(s);
}

void BM_ThreePolicies1024Nodes12h(benchmark::State& state, const std::string& model_name,
                                  FailurePattern pattern) {
  const auto trace = trace_1024(pattern);
  for (auto _ : state) {
    // A fresh model each time, so its per-node-count memo is part of the measured cost.
    AnalyticCluster c;
    c.microbatches = 512;
    c.fault_tolerance = 2;
    AnalyticGptModel model(gpt3_preset(model_name), c);
    ReplayOptions o;
    o.duration_ms = 12 * 3600e3;
    double useful = 0;
    for (auto kind : {PolicyKind::kBreakwater, PolicyKind::kRestart, PolicyKind::kRedundant}) {
      useful += replay(trace, kind, PolicyCosts{}, model, o).useful_fraction();
    }
    benchmark::DoNotOptimize(useful);
  }
  state.counters["events"] = static_cast<double>(trace.events.size());
}

BENCHMARK_CAPTURE(BM_ThreePolicies1024Nodes12h, gpt3_6_7b_fixed, std::string("gpt3-6.7b"),
                  FailurePattern::kFixed)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ThreePolicies1024Nodes12h, gpt3_175b_fixed, std::string("gpt3-175b"),
                  FailurePattern::kFixed)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ThreePolicies1024Nodes12h, gpt3_175b_bursts, std::string("gpt3-175b"),
                  FailurePattern::kBursts)
    ->Unit(benchmark::kMillisecond);

// The real planner: templates once for 1024 nodes, reconfigure/join per event for breakwater,
// identical-pipeline plans per node count for the others.
void BM_ThreePoliciesPlanner1024Nodes12h(benchmark::State& state, const std::string& model_name,
                                         bool schedule_aware, double replan_horizon_ms) {
  const auto trace = trace_1024(FailurePattern::kFixed);
  for (auto _ : state) {
    PlannerSetup s;
    s.profile =
        plan::synthesize_profile(plan::find_model(model_name), plan::find_device("a100"), 1);
    s.cluster.num_nodes = 1024;
    s.cluster.devices_per_node = 8;
    s.cluster.device_memory_gb = 80;
    s.fault_tolerance = 2;
    s.microbatches = 512;
    if (schedule_aware) {
      s.planner_options.schedule_kinds = plan::simulated_schedule_kinds();
      s.planner_options.evaluator = plan::simulator_evaluator(s.profile, s.cluster);
    }
    PlannerModel model(s);
    ReplayOptions o;
    o.duration_ms = 12 * 3600e3;
    PolicyCosts costs;
    costs.breakwater.replan_horizon_ms = replan_horizon_ms;
    PlannedBreakwaterPolicy breakwater(costs, model);
    double useful = replay(trace, breakwater, model, o).useful_fraction();
    for (auto kind : {PolicyKind::kRestart, PolicyKind::kRedundant}) {
      useful += replay(trace, kind, PolicyCosts{}, model, o).useful_fraction();
    }
    benchmark::DoNotOptimize(useful);
  }
}
BENCHMARK_CAPTURE(BM_ThreePoliciesPlanner1024Nodes12h, gpt3_6_7b_1f1b_incremental,
                  std::string("gpt3-6.7b"), false, 0.0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_ThreePoliciesPlanner1024Nodes12h, gpt3_6_7b_schedule_aware_incremental,
                  std::string("gpt3-6.7b"), true, 0.0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_ThreePoliciesPlanner1024Nodes12h, gpt3_6_7b_schedule_aware_replan,
                  std::string("gpt3-6.7b"), true, 600e3)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_ReplayOnlyConstantModel(benchmark::State& state) {
  const auto trace = trace_1024(FailurePattern::kPoisson);
  ConstantModel model(10e3, 512);
  ReplayOptions o;
  o.duration_ms = 12 * 3600e3;
  for (auto _ : state) {
    benchmark::DoNotOptimize(replay(trace, PolicyKind::kBreakwater, PolicyCosts{}, model, o));
  }
}
BENCHMARK(BM_ReplayOnlyConstantModel)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bw::forecast

BENCHMARK_MAIN();
