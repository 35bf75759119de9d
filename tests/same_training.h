// "The same training" in numbers: how far two runs may differ and still have trained the same
// samples with the same updates, when all they do differently is the order of floating-point sums
// (another pipeline layout, batch split, all-reduce or recovery plan). One rule for every test
// that compares two trainings (transparency, executor grid, recovery, re-join, multi-host,
// validation recovery); docs/runtime.md "Same training" states the same derivation.
//
// Same order, same bits. Where each parameter's gradient adds its microbatches in the same order
// in both runs (one pipeline against the single process, tied embeddings aside), every operation
// is the same on the same bits, and the runs are compared bitwise (kBitwise). MKL's default
// conditional numerical reproducibility lets a GEMM's kernel path, and so its bits, vary between
// calls; the test binaries that compare bitwise run with MKL_CBWR=COMPATIBLE (set before MKL's
// first call), which fixes the path.
//
// Another order. Let u = 2^-24 (fp32's unit roundoff) and K = 16, the most terms (microbatches,
// pipelines' partial sums) a gradient element sums in the tests. Reordering a sum of K terms moves
// it by at most K u sum|terms|, a relative change of K u C for an element whose terms cancel by C
// = sum|terms| / |sum terms|.
//  - Losses: the first step's loss differs only by its own sum, K u = 1e-6 relative; later steps
//    also see parameters that differ by far less than they move. Bound: 1e-5 relative per step.
//  - Parameters: AdamW moves a weight by lr_t m / (sqrt(v) + eps), a ratio independent of the
//    gradient's scale, so a relative change d of the gradient moves the update by at most lr_t d:
//    AdamW turns last-bit differences of a gradient into differences of lr-sized steps, amplified
//    by C. Over S steps at a peak rate lr the weights then differ by at most d S lr. The rule holds
//    elements with C <= 256 to it: d = K u 256 = 2^-12, so |a - b| <= 2^-12 S lr + 1e-4 |b| (the
//    relative term for the AdamW moments, which compare as the weights do and whose second moment
//    is tiny: its difference is relative to its size). Transparency and grid: S = 10 and 3 at lr
//    1e-2, 2.4e-5 and 7.3e-6; recovery: S = 8, 2.0e-5; re-join: S = 150, 3.7e-4.
//  - The one element whose C is unbounded: the attention key bias (the third of attn.qkv.bias
//    after the queries) has an exact gradient of zero (softmax ignores a shift of all of a query's
//    scores), so its gradient is rounding noise that AdamW scales to steps of up to lr either way:
//    |a - b| <= 2 S lr there. It cannot change any loss or any other weight.
//  - bf16 (train.precision = "bf16"): a reordered fp32 gradient can flip the bf16 rounding of a
//    weight's copy in the next forward, moving that weight's contribution by one bf16 ulp, 2^-8:
//    losses 2^-8 relative, and d = 2^-8 (|a - b| <= 2^-8 S lr + 1e-4 |b|).
// What the bound must always catch: a lost (or repeated) microbatch changes a step's gradient by
// about 1/K of itself, which AdamW turns into a change of about lr in many weights (1e-2 at lr
// 1e-2), against 2^-12 S lr allowed: caught while S < 400. executor_grid_test.cc checks it on a
// run that loses one microbatch of one step.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace bw::testing {

struct SameTraining {
  double loss_rel = 0;       // |loss_a - loss_b| <= loss_rel |loss_b|, every step
  double param_abs = 0;      // |a - b| <= param_abs + param_rel |b|, every element
  double param_rel = 0;
  double zero_grad_abs = 0;  // |a - b| there for the attention key bias (exact gradient zero)
  bool bitwise() const { return loss_rel == 0 && param_abs == 0 && param_rel == 0; }
};

inline constexpr double kFp32LossRel = 1e-5;       // 10 x K u
inline constexpr double kFp32Reordered = 0x1p-12;  // d = K u C = 16 x 2^-24 x 256
inline constexpr double kBf16Reordered = 0x1p-8;   // one bf16 ulp

inline constexpr SameTraining kBitwise{};

// Runs of `steps` steps at a peak learning rate `lr` that differ in the order of their fp32 sums.
inline SameTraining fp32_same_training(int steps, double lr) {
  return {kFp32LossRel, kFp32Reordered * steps * lr, 1e-4, 2 * steps * lr};
}

// The same in bf16 mixed precision.
inline SameTraining bf16_same_training(int steps, double lr) {
  return {kBf16Reordered, kBf16Reordered * steps * lr, 1e-4, 2 * steps * lr};
}

// Where `name` holds the attention key bias (a parameter, not its moments): the middle third of
// attn.qkv.bias. Returns false for every other tensor.
inline bool has_key_bias(const std::string& name) { return name.ends_with("attn.qkv.bias"); }

struct StateComparison {
  int bad = 0;              // elements outside the bound
  double max_abs_diff = 0;  // over every element compared (the key bias included)
  std::string first;        // the first mismatches, one line each
  bool ok() const { return bad == 0; }
};

// `got` against `want`, tensor by tensor (the same names, shapes and dtypes; integer tensors
// such as AdamW's step count compare exactly), within `tol`.
inline StateComparison compare_state(const std::map<std::string, torch::Tensor>& got,
                                     const std::map<std::string, torch::Tensor>& want,
                                     const SameTraining& tol) {
  StateComparison out;
  const auto note = [&](const std::string& line) {
    if (++out.bad <= 5) out.first += line + "\n";
  };
  for (const auto& [name, ref] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      note(name + ": missing");
      continue;
    }
    const auto& t = it->second;
    if (t.sizes() != ref.sizes() || t.scalar_type() != ref.scalar_type()) {
      note(fmt::format("{}: shape or dtype differs", name));
      continue;
    }
    if (!ref.is_floating_point() || tol.bitwise()) {
      if (!torch::equal(t, ref)) {
        const double d =
            (t.to(torch::kFloat64) - ref.to(torch::kFloat64)).abs().max().item<double>();
        out.max_abs_diff = std::max(out.max_abs_diff, d);
        note(fmt::format("{}: not bitwise equal (max |diff| {:.3g})", name, d));
      }
      continue;
    }
    const auto a = t.to(torch::kFloat64), b = ref.to(torch::kFloat64);
    const auto diff = (a - b).abs();
    auto excess = diff - (tol.param_abs + tol.param_rel * b.abs());
    if (has_key_bias(name) && ref.dim() == 1 && ref.numel() % 3 == 0) {
      const int64_t d = ref.numel() / 3;
      excess.narrow(0, d, d).copy_(diff.narrow(0, d, d) - tol.zero_grad_abs);
    }
    out.max_abs_diff = std::max(out.max_abs_diff, diff.max().item<double>());
    const int64_t n = (excess > 0).sum().item<int64_t>();
    if (n > 0) {
      const int64_t i = excess.reshape({-1}).argmax().item<int64_t>();
      out.bad += static_cast<int>(n) - 1;
      note(fmt::format("{}: {} elements outside the bound; worst [{}] = {:.9g} vs {:.9g}", name,
                       n, i, a.reshape({-1})[i].item<double>(), b.reshape({-1})[i].item<double>()));
    }
  }
  return out;
}

// Per-step losses of two runs within `loss_rel` ("" when they are, else the first mismatches).
inline std::string compare_losses(const std::vector<double>& got, const std::vector<double>& want,
                                  double loss_rel) {
  std::string out;
  if (got.size() != want.size())
    return fmt::format("{} losses here, {} in the reference\n", got.size(), want.size());
  int bad = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const bool same = loss_rel == 0 ? got[s] == want[s]
                                    : std::abs(got[s] - want[s]) <= loss_rel * std::abs(want[s]);
    if (!same && bad++ < 5)
      out += fmt::format("step {}: loss {:.9g} vs {:.9g} (relative {:.3g})\n", s, got[s], want[s],
                         std::abs(got[s] - want[s]) / std::abs(want[s]));
  }
  return out;
}

}  // namespace bw::testing
