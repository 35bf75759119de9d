#include "model/flops.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>

namespace bw::model {

double flops_per_token(const GptConfig& config) { return shape_of(config).flops_per_token(); }

PeakFlops peak_from_table(const std::string& device_name, Precision precision) {
  // Dense peaks from the vendors' data sheets, in TFLOP/s: {name, bf16, fp32 (no TF32)}.
  struct Row {
    const char* name;
    const char* label;
    double bf16, fp32;
  };
  static constexpr std::array<Row, 3> kRows = {{
      {"H200", "H200 SXM", 989.0, 67.0},
      {"H100", "H100 SXM", 989.0, 67.0},
      {"A100", "A100", 312.0, 19.5},
  }};
  for (const auto& r : kRows) {
    if (device_name.find(r.name) == std::string::npos) continue;
    const bool bf16 = precision == Precision::kBf16;
    return {(bf16 ? r.bf16 : r.fp32) * 1e12,
            fmt::format("table: {} {} dense", r.label, precision_name(precision))};
  }
  return {0.0, ""};
}

PeakFlops measure_cpu_peak(Precision precision, int threads) {
  constexpr int64_t kN = 512;
  const int saved = at::get_num_threads();
  at::set_num_threads(std::max(1, threads));
  torch::NoGradGuard no_grad;
  const auto dtype = precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat;
  auto a = torch::randn({kN, kN}).to(dtype), b = torch::randn({kN, kN}).to(dtype);
  auto c = torch::mm(a, b);  // warm-up: the kernel's packing buffers, the threads
  double best_s = 1e30;
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  for (int i = 0; i < 5 || (Clock::now() < until && i < 200); ++i) {
    const auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  at::set_num_threads(saved);
  return {2.0 * kN * kN * kN / best_s,
          fmt::format("measured: 512^3 {} matmul, {} thread{}", precision_name(precision),
                      threads, threads == 1 ? "" : "s")};
}

}  // namespace bw::model
