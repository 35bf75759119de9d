// SwiGLU's elementwise part, silu(gate) * up, forward and backward each in one pass over memory,
// on raw fp32 or bf16 arrays (the autograd node around them is model/ops.h's swiglu). Autograd
// of the composite at::silu(gate) * up makes five passes (silu; the product; and in backward
// two products and silu_backward), each reading or writing a [rows, ffn] array; these make two.
//
// Numerics: the formulas of ATen's CPU kernels, silu(g) = g / (1 + exp(-g)) and its derivative
// sigmoid(g) * (1 + g * (1 - sigmoid(g))), with exp from a degree-7 polynomial after range
// reduction (within a few ulps of the exact value, as ATen's vectorised exp). In bf16 every
// value that autograd of the composite would round to bf16 is rounded here too (silu(g), the
// product, dy * up and dy * silu(g)), to nearest even.
//
// The loops are plain C++ that the compiler vectorises; on x86-64 with GCC or Clang each is
// compiled for AVX-512, AVX2 and the baseline and chosen at load time (target_clones).
//
// Thread-safety: pure functions of their arguments; callers split ranges across threads.
#pragma once

#include <cstdint>

namespace bw::model::kernels {

// y[i] = silu(g[i]) * u[i] for i in [0, n).
void swiglu_forward(const float* g, const float* u, float* y, int64_t n);
void swiglu_forward(const uint16_t* g, const uint16_t* u, uint16_t* y, int64_t n);  // bf16 bits
// dg[i] = dy[i] * u[i] * silu'(g[i]), du[i] = dy[i] * silu(g[i]).
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                     int64_t n);
void swiglu_backward(const uint16_t* g, const uint16_t* u, const uint16_t* dy, uint16_t* dg,
                     uint16_t* du, int64_t n);

}  // namespace bw::model::kernels
