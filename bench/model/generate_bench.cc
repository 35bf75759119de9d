// `breakwater generate`'s KV cache (model/generate.h) against recomputing the whole window with
// the training layers for every token, side by side in one run: the ratio of the two tokens/s
// counters is the comparison (docs/cli.md "generate"). Model: gpt2 "small" (d 128, 4 heads, 6
// blocks) with GPT-2's 50257-token vocabulary and a context of 256 positions; a 64-token prompt
// continued by 192 greedy tokens, so the window grows to the whole context. Threads:
// BENCH_THREADS (default 1).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>

#include "model/generate.h"
#include "model/gpt.h"

namespace {

constexpr int kPrompt = 64;
constexpr int kNew = 192;

template <bool kCache>
void BM_Generate(benchmark::State& state) {
  const char* threads = std::getenv("BENCH_THREADS");
  at::set_num_threads(threads ? std::atoi(threads) : 1);
  auto c = bw::model::family_config(bw::model::Family::kGpt2, "small", 50257);
  c.max_positions = c.seq_len = kPrompt + kNew;
  std::vector<std::shared_ptr<bw::model::Layer>> layers;
  for (int l = 0; l < bw::model::num_layers(c); ++l) layers.push_back(bw::model::build_layer(c, l, 1));
  bw::model::KvCacheModel kv(c, layers);
  std::vector<int64_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[i] = (i * 7919) % c.vocab_size;
  bw::model::GenerateOptions o;
  o.max_tokens = kNew;
  o.temperature = 0;
  o.use_cache = kCache;
  int64_t tokens = 0;
  for (auto _ : state) {
    auto out = bw::model::generate(kv, prompt, o);
    tokens += static_cast<int64_t>(out.size());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Generate<true>)->Name("generate/kv_cache")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Generate<false>)->Name("generate/recompute")->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
