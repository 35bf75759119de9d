// The schedule target: generate + lower + validate + simulate Hanayo with P = 64, B = 512, W = 4
// in < 100 ms (docs/schedules.md). Also each step alone, and the planner's prediction call.
#include <benchmark/benchmark.h>

#include "schedule/generate.h"
#include "sim/predict.h"
#include "sim/timeline.h"

namespace bw::sim {
namespace {

const schedule::ScheduleSpec kHanayo{
    .kind = "hanayo", .devices = 64, .microbatches = 512, .waves = 4};

// The whole pipeline, summary numbers only (what the planner and --compare need).
void HanayoEndToEnd(benchmark::State& state) {
  const bool timeline = state.range(0) != 0;
  for (auto _ : state) {
    auto s = schedule::lower(schedule::generate(kHanayo));
    schedule::validate(s);
    auto r = simulate(s, stage_costs(s, {}), {.timeline = timeline});
    benchmark::DoNotOptimize(r.makespan_ms);
  }
}
BENCHMARK(HanayoEndToEnd)->Arg(0)->Arg(1)->ArgName("timeline")->Unit(benchmark::kMillisecond);

void SimulateLowered(benchmark::State& state) {
  const auto s = schedule::lower(schedule::generate(kHanayo));
  const auto cm = stage_costs(s, {});
  const bool timeline = state.range(0) != 0;
  for (auto _ : state) benchmark::DoNotOptimize(simulate(s, cm, {.timeline = timeline}));
  state.SetItemsProcessed(state.iterations() * s.num_actions());
}
BENCHMARK(SimulateLowered)->Arg(0)->Arg(1)->ArgName("timeline")->Unit(benchmark::kMillisecond);

void SimulateComputeOnly(benchmark::State& state) {
  const auto s = schedule::generate(kHanayo);
  const auto cm = stage_costs(s, {});
  for (auto _ : state) benchmark::DoNotOptimize(simulate(s, cm, {.timeline = false}));
  state.SetItemsProcessed(state.iterations() * s.num_actions());
}
BENCHMARK(SimulateComputeOnly)->Unit(benchmark::kMillisecond);

// A planner-sized question: 96 layers, 8 devices, 32 microbatches, every candidate kind.
void PredictAllKinds(benchmark::State& state) {
  std::vector<LayerCost> layers(96);
  for (auto& l : layers) {
    l.forward_ms = 1;
    l.backward_ms = 2;
    l.activation_bytes = 1e8;
    l.output_bytes = 1e7;
    l.param_bytes = 1e8;
  }
  const auto specs = candidate_specs(8, 32);
  for (auto _ : state)
    benchmark::DoNotOptimize(fastest_fitting(specs, layers, {.bandwidth_gbps = 200}, 80e9, 4));
}
BENCHMARK(PredictAllKinds)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bw::sim

BENCHMARK_MAIN();
