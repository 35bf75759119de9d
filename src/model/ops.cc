// RMSNorm and RoPE as single autograd nodes (model/ops.h).
#include "model/ops.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>

#include "model/swiglu_kernel.h"

namespace bw::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [x1, x2] -> [x2, x1] over the last dimension (a rotation by half: its own inverse).
torch::Tensor swap_halves(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return at::cat({halves[1], halves[0]}, -1);
}

// y = w * (h * rsqrt(mean(h^2) + eps)).to(dtype), h = x.to(fp32). With n = h * r and g = dy * w
// (in fp32): dh = r * (g - n * mean(g * n)), dw = sum over rows of dy * n.to(dtype). Autograd
// of the composite makes about a dozen passes over [rows, d] for this (pow, mean, rsqrt, mul and
// the casts each have their own backward, and dh arrives in two parts that are then added);
// this makes seven.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    auto h = x.to(torch::kFloat);
    auto r = at::rsqrt(h.pow(2).mean({-1}, /*keepdim=*/true) + eps);
    auto n = h * r;
    ctx->save_for_backward({n, r, weight});
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return weight * n.to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &n = saved[0], &r = saved[1], &weight = saved[2];
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto& dy = grads[0];
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(1)) {
      auto nd = n.scalar_type() == dtype ? n : n.to(dtype);
      dw = (dy * nd).reshape({-1, n.size(-1)}).sum(0).to(weight.scalar_type());
    }
    if (ctx->needs_input_grad(0)) {
      auto g = (dy * weight).to(torch::kFloat);
      auto mean_gn = (g * n).mean({-1}, /*keepdim=*/true);
      g.mul_(r);
      g.addcmul_(n, mean_gn.mul_(r), -1.0);
      dx = g.scalar_type() == dtype ? g : g.to(dtype);
    }
    return {dx, dw, torch::Tensor()};
  }
};

// y = x * cos + swap_halves(x) * sin_signed (model/ops.h), so dx = dy * cos + swap_halves(dy *
// sin_signed): swap_halves is its own transpose. Each direction: cat, two multiplications, one
// addition in place; autograd of Hugging Face's form also negates a half, allocates every
// intermediate and adds the two parts of dx in a separate pass.
struct RopeFunction : torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin_signed) {
    ctx->save_for_backward({cos, sin_signed});
    auto rotated = swap_halves(x);
    rotated.mul_(sin_signed);
    auto y = x * cos;
    y.add_(rotated);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& dy = grads[0];
    auto dx = swap_halves(dy * saved[1]);
    dx.add_(dy * saved[0]);
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

// Elements per task when the kernels run on several threads (about 64 KiB of fp32 per array).
constexpr int64_t kGrain = 16384;

template <typename T>
const T* data_of(const torch::Tensor& t) {
  return static_cast<const T*>(t.const_data_ptr());
}
template <typename T>
T* mutable_data_of(torch::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

// Runs fn(begin, end) over [0, n) on torch's intra-op threads.
template <typename Fn>
void for_ranges(int64_t n, const Fn& fn) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) { fn(begin, end); });
}

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    auto g = gate.contiguous(), u = up.contiguous();
    auto y = at::empty_like(g, at::MemoryFormat::Contiguous);
    const int64_t n = g.numel();
    if (g.scalar_type() == torch::kFloat) {
      const float *gp = data_of<float>(g), *up_ = data_of<float>(u);
      float* yp = mutable_data_of<float>(y);
      for_ranges(n, [&](int64_t b, int64_t e) {
        kernels::swiglu_forward(gp + b, up_ + b, yp + b, e - b);
      });
    } else {
      const uint16_t *gp = data_of<uint16_t>(g), *up_ = data_of<uint16_t>(u);
      uint16_t* yp = mutable_data_of<uint16_t>(y);
      for_ranges(n, [&](int64_t b, int64_t e) {
        kernels::swiglu_forward(gp + b, up_ + b, yp + b, e - b);
      });
    }
    ctx->save_for_backward({g, u});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &g = saved[0], &u = saved[1];
    auto dy = grads[0].to(g.scalar_type()).contiguous();
    auto dg = at::empty_like(g, at::MemoryFormat::Contiguous);
    auto du = at::empty_like(u, at::MemoryFormat::Contiguous);
    const int64_t n = g.numel();
    if (g.scalar_type() == torch::kFloat) {
      const float *gp = data_of<float>(g), *up = data_of<float>(u), *dyp = data_of<float>(dy);
      float *dgp = mutable_data_of<float>(dg), *dup = mutable_data_of<float>(du);
      for_ranges(n, [&](int64_t b, int64_t e) {
        kernels::swiglu_backward(gp + b, up + b, dyp + b, dgp + b, dup + b, e - b);
      });
    } else {
      const uint16_t *gp = data_of<uint16_t>(g), *up = data_of<uint16_t>(u),
                     *dyp = data_of<uint16_t>(dy);
      uint16_t *dgp = mutable_data_of<uint16_t>(dg), *dup = mutable_data_of<uint16_t>(du);
      for_ranges(n, [&](int64_t b, int64_t e) {
        kernels::swiglu_backward(gp + b, up + b, dyp + b, dgp + b, dup + b, e - b);
      });
    }
    return {dg, du};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const auto dtype = gate.scalar_type();
  if (gate.is_cpu() && up.is_cpu() && dtype == up.scalar_type() && gate.sizes() == up.sizes() &&
      (dtype == torch::kFloat || dtype == torch::kBFloat16)) {
    return SwigluFunction::apply(gate, up);
  }
  return at::silu(gate) * up;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

RopeTable rope_table(const GptConfig& c, int64_t positions) {
  // Hugging Face's LlamaRotaryEmbedding: the outer product of positions and inverse
  // frequencies, in fp32, doubled to head_dim.
  auto freqs = torch::arange(positions, torch::kInt64).to(torch::kFloat).unsqueeze(1) *
               rope_inverse_frequencies(c).unsqueeze(0);
  auto emb = at::cat({freqs, freqs}, -1);
  auto sin = emb.sin();
  const int64_t half = sin.size(1) / 2;
  return {emb.cos(), at::cat({-sin.narrow(1, 0, half), sin.narrow(1, half, half)}, 1)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin_signed) {
  return RopeFunction::apply(x, cos, sin_signed);
}

}  // namespace bw::model
