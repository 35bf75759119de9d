// Generation, lowering and validation cost per schedule kind, and reading PyTorch's published
// DualPipeV schedule (shared/data/pytorch-schedules, when present).
#include <benchmark/benchmark.h>

#include <filesystem>

#include "schedule/generate.h"

namespace bw::schedule {
namespace {

ScheduleSpec spec(const std::string& kind, int P, int B) {
  ScheduleSpec s{.kind = kind, .devices = P, .microbatches = B};
  if (kind == "hanayo") s.waves = 4;
  return s;
}

void Generate(benchmark::State& state, std::string kind) {
  const auto s = spec(kind, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(generate(s));
  state.SetItemsProcessed(state.iterations() * generate(s).num_actions());
}

void Lower(benchmark::State& state, std::string kind) {
  const auto s =
      generate(spec(kind, static_cast<int>(state.range(0)), static_cast<int>(state.range(1))));
  for (auto _ : state) benchmark::DoNotOptimize(lower(s));
  state.SetItemsProcessed(state.iterations() * lower(s).num_actions());
}

void Validate(benchmark::State& state, std::string kind) {
  const auto l = lower(
      generate(spec(kind, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)))));
  for (auto _ : state) validate(l);
  state.SetItemsProcessed(state.iterations() * l.num_actions());
}

void ReadPyTorchDualPipeV(benchmark::State& state) {
  const std::string path =
      std::string(BW_SHARED_DATA) + "/pytorch-schedules/dualpipev_4rank_10mb.csv";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("shared/data/pytorch-schedules not present");
    return;
  }
  for (auto _ : state) {
    auto s = read_csv_file(path);
    validate(lower(s));
    benchmark::DoNotOptimize(s);
  }
}

#define KINDS(fn)                                                                  \
  BENCHMARK_CAPTURE(fn, gpipe, std::string("gpipe"))->Args({64, 512});             \
  BENCHMARK_CAPTURE(fn, 1f1b, std::string("1f1b"))->Args({64, 512});               \
  BENCHMARK_CAPTURE(fn, interleaved, std::string("interleaved"))->Args({64, 512}); \
  BENCHMARK_CAPTURE(fn, chimera, std::string("chimera"))->Args({64, 512});         \
  BENCHMARK_CAPTURE(fn, hanayo_w4, std::string("hanayo"))->Args({64, 512});        \
  BENCHMARK_CAPTURE(fn, zb_h1, std::string("zb-h1"))->Args({64, 512});             \
  BENCHMARK_CAPTURE(fn, zb_v, std::string("zb-v"))->Args({64, 512})

KINDS(Generate)->Unit(benchmark::kMillisecond);
KINDS(Lower)->Unit(benchmark::kMillisecond);
KINDS(Validate)->Unit(benchmark::kMillisecond);
BENCHMARK(ReadPyTorchDualPipeV)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bw::schedule

BENCHMARK_MAIN();
