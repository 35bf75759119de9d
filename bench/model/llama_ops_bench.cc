// The Llama block's single-node operations (model/ops.h) against autograd of the composites
// they replace (Hugging Face's forms), forward + backward, side by side in one run:
// `bw_llama_ops_bench` prints both of each pair; the ratio is the comparison. Shapes are the
// block's at microbatch 4 x 256 tokens: d 256 (4 heads of 64, SwiGLU 704) and d 768 (12 heads,
// SwiGLU 2048); fp32 and bf16; on the threads given by BENCH_THREADS (default 1).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>

#include "model/ops.h"

namespace {

using bw::model::Family;
using bw::model::GptConfig;

enum class Op { kRmsNorm, kRope, kSwiglu };

torch::Tensor composite(Op op, const torch::Tensor& a, const torch::Tensor& b,
                        const torch::Tensor& c) {
  switch (op) {
    case Op::kRmsNorm: {
      auto h = a.to(torch::kFloat);
      h = h * at::rsqrt(h.pow(2).mean({-1}, true) + 1e-5);
      return b * h.to(a.scalar_type());
    }
    case Op::kRope:
      return a * b + bw::model::rotate_half(a) * c;
    case Op::kSwiglu:
      return at::silu(a) * b;
  }
  return {};
}

template <Op kOp, bool kFused, bool kBf16>
void BM_Op(benchmark::State& state) {
  const char* threads = std::getenv("BENCH_THREADS");
  at::set_num_threads(threads ? std::atoi(threads) : 1);
  const int64_t d = state.range(0), heads = d / 64, t = 256, mb = 4;
  const int64_t ffn = d == 256 ? 704 : 2048;
  const auto dtype = kBf16 ? torch::kBFloat16 : torch::kFloat;
  torch::manual_seed(1);
  torch::Tensor x, second, third;
  if (kOp == Op::kRmsNorm) {
    x = torch::randn({mb, t, d}).to(dtype);
    second = torch::ones({d}).requires_grad_(true);
  } else if (kOp == Op::kRope) {
    GptConfig c;
    c.family = Family::kLlama;
    c.d_model = static_cast<int>(d);
    c.n_heads = static_cast<int>(heads);
    auto table = bw::model::rope_table(c, t);
    x = torch::randn({mb, heads, t, 64}).to(dtype);
    second = table.cos.to(dtype);
    // The composite takes Hugging Face's sin: the signed table with its first half's sign back.
    auto sin = at::cat({-table.sin_signed.narrow(1, 0, 32), table.sin_signed.narrow(1, 32, 32)}, 1);
    third = (kFused ? table.sin_signed : sin).to(dtype);
  } else {
    x = torch::randn({mb, t, ffn}).to(dtype);
    second = torch::randn({mb, t, ffn}).to(dtype).requires_grad_(true);
  }
  x.requires_grad_(true);
  torch::Tensor y0 = composite(kOp, x, second, third);
  auto dy = torch::randn(y0.sizes()).to(y0.scalar_type());
  for (auto _ : state) {
    torch::Tensor y;
    if (!kFused) {
      y = composite(kOp, x, second, third);
    } else if (kOp == Op::kRmsNorm) {
      y = bw::model::rms_norm(x, second, 1e-5);
    } else if (kOp == Op::kRope) {
      y = bw::model::apply_rope(x, second, third);
    } else {
      y = bw::model::swiglu(x, second);
    }
    y.backward(dy);
    benchmark::DoNotOptimize(x.grad().data_ptr());
    x.mutable_grad().reset();
    if (second.requires_grad()) second.mutable_grad().reset();
  }
  state.SetLabel(kFused ? "single node" : "composite");
}

#define BW_OP_CASE(op, fused, bf16, label) \
  BENCHMARK(BM_Op<op, fused, bf16>)->Name(label)->Arg(256)->Arg(768)->Unit(benchmark::kMillisecond)
#define BW_OP_BENCH(op, name)                                   \
  BW_OP_CASE(op, false, false, "fp32/" name "/composite");      \
  BW_OP_CASE(op, true, false, "fp32/" name "/single_node");     \
  BW_OP_CASE(op, false, true, "bf16/" name "/composite");       \
  BW_OP_CASE(op, true, true, "bf16/" name "/single_node")

BW_OP_BENCH(Op::kRmsNorm, "rms_norm");
BW_OP_BENCH(Op::kRope, "rope");
BW_OP_BENCH(Op::kSwiglu, "swiglu");

}  // namespace

BENCHMARK_MAIN();
