// SwiGLU's elementwise kernels (model/swiglu_kernel.h).
#include "model/swiglu_kernel.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__)
#define BW_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BW_VECTOR_CLONES
#endif

namespace bw::model::kernels {
namespace {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline float from_bf16(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as c10::BFloat16's constructor (NaN inputs do not occur here: a NaN
// activation has already poisoned the loss, and the step is skipped).
inline uint16_t to_bf16(float f) {
  const uint32_t b = float_to_bits(f);
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// exp(x) for x in any range: clamped to [-87, 88] (below, the result is under 2^-125 and feeds
// only 1 + exp(x); above, silu's exp(-g) for g < -88 makes silu(g) = g / (1 + e^88), zero to
// float precision), then 2^n * p(r) with n = round(x / ln 2), |r| <= ln 2 / 2 and p the Taylor
// polynomial of degree 7 (truncation error below 2^-27; with its roundings, a few ulps).
inline float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in the default mode.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * bits_to_float(static_cast<uint32_t>(e) << 23);
}

}  // namespace

BW_VECTOR_CLONES
void swiglu_forward(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = g[i] / (1.0f + exp_poly(-g[i]));
    y[i] = s * u[i];
  }
}

BW_VECTOR_CLONES
void swiglu_forward(const uint16_t* g, const uint16_t* u, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gf = from_bf16(g[i]);
    const float s = round_bf16(gf / (1.0f + exp_poly(-gf)));
    y[i] = to_bf16(s * from_bf16(u[i]));
  }
}

BW_VECTOR_CLONES
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_poly(-g[i]);
    const float sig = 1.0f / (1.0f + e);
    const float s = g[i] / (1.0f + e);
    du[i] = dy[i] * s;
    dg[i] = (dy[i] * u[i]) * sig * (1.0f + g[i] * (1.0f - sig));
  }
}

BW_VECTOR_CLONES
void swiglu_backward(const uint16_t* g, const uint16_t* u, const uint16_t* dy, uint16_t* dg,
                     uint16_t* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gf = from_bf16(g[i]), dyf = from_bf16(dy[i]);
    const float e = exp_poly(-gf);
    const float sig = 1.0f / (1.0f + e);
    const float s = round_bf16(gf / (1.0f + e));
    du[i] = to_bf16(dyf * s);
    const float ds = round_bf16(dyf * from_bf16(u[i]));
    dg[i] = to_bf16(ds * sig * (1.0f + gf * (1.0f - sig)));
  }
}

}  // namespace bw::model::kernels
