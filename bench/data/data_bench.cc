// Data pipeline throughput: opening the default corpus and assembling microbatches from the
// seeded global order (the per-step cost a worker pays before its first forward).
//   build/bench/data/bw_data_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace {

bw::data::TokenDataset synthetic(int64_t n) {
  std::string text(static_cast<size_t>(n), '\0');
  uint64_t state = 1;
  for (auto& ch : text) ch = static_cast<char>(bw::data::splitmix64(state) & 0xff);
  return bw::data::TokenDataset::from_text("synthetic", std::move(text));
}

void BM_OpenDefaultCorpus(benchmark::State& state) {
  std::string path;
  try {
    path = bw::data::default_corpus_path();
  } catch (const bw::ConfigError& e) {
    state.SkipWithError("default corpus not installed");
    return;
  }
  int64_t tokens = 0;
  for (auto _ : state) tokens = bw::data::TokenDataset::open(path).num_tokens();
  state.counters["tokens"] = static_cast<double>(tokens);
  state.SetBytesProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_OpenDefaultCorpus)->Unit(benchmark::kMillisecond);

// One microbatch of `mbs` samples of seq_len T: tokens/s of Sampler::batch.
void BM_SamplerBatch(benchmark::State& state) {
  const int T = static_cast<int>(state.range(0));
  const int mbs = static_cast<int>(state.range(1));
  bw::data::Sampler sampler(synthetic(4 << 20), T, 42);
  int64_t i = 0;
  for (auto _ : state) {
    auto b = sampler.batch(i, mbs);
    benchmark::DoNotOptimize(b.first.data_ptr());
    i += mbs;
  }
  state.SetItemsProcessed(state.iterations() * mbs * T);
}
BENCHMARK(BM_SamplerBatch)->Args({64, 4})->Args({1024, 4})->Args({1024, 16});

// A fresh epoch's permutation (paid once per epoch per process).
void BM_Permutation(benchmark::State& state) {
  int64_t epoch = 0;
  for (auto _ : state) {
    auto p = bw::data::seeded_permutation(state.range(0), 42, epoch++);
    benchmark::DoNotOptimize(p.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Permutation)->Arg(1 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
