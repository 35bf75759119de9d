// Forward + backward of causal attention, fused (SDPA) against written out, side by side in one
// run: `bw_attention_bench` prints both for each sequence length; the ratio is the comparison.
// Shape: batch 4, 12 heads of 64 (GPT-2's), fp32 and bf16, on the threads given by
// BENCH_THREADS (default 1).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace {

torch::Tensor written_out(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = q.size(-2);
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask = torch::ones({t, t}, torch::kBool).triu(1);
  att = at::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  return at::matmul(att, v);
}

torch::Tensor fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
}

template <bool kFused, bool kBf16>
void BM_Attention(benchmark::State& state) {
  const char* threads = std::getenv("BENCH_THREADS");
  at::set_num_threads(threads ? std::atoi(threads) : 1);
  const int64_t t = state.range(0);
  const auto dtype = kBf16 ? torch::kBFloat16 : torch::kFloat;
  torch::manual_seed(1);
  auto make = [&] { return torch::randn({4, 12, t, 64}).to(dtype).requires_grad_(true); };
  auto q = make(), k = make(), v = make();
  auto g = torch::randn({4, 12, t, 64}).to(dtype);
  for (auto _ : state) {
    auto y = kFused ? fused(q, k, v) : written_out(q, k, v);
    y.backward(g);
    benchmark::DoNotOptimize(q.grad().data_ptr());
    q.mutable_grad().reset();
    k.mutable_grad().reset();
    v.mutable_grad().reset();
  }
  state.SetLabel(kFused ? "sdpa" : "written-out");
}

BENCHMARK(BM_Attention<true, false>)->Name("fp32/sdpa")->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention<false, false>)->Name("fp32/written_out")->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention<true, true>)->Name("bf16/sdpa")->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention<false, true>)->Name("bf16/written_out")->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
