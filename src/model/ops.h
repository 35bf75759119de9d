// Operations the training layers (gpt.cc) and the KV-cache generator (generate.cc) share, so
// that both compute RMSNorm and RoPE with the same operations in the same order as Hugging
// Face's LlamaRMSNorm and LlamaRotaryEmbedding (docs/models.md).
//
// rms_norm, apply_rope and swiglu are single autograd nodes (torch::autograd::Function), each
// with its backward written out by hand in fewer passes over the activations than autograd would
// make of the composite (docs/models.md "Speed"). rms_norm's and apply_rope's forward run Hugging
// Face's operations (the composite's bits); apply_rope's backward gives autograd's bits too,
// rms_norm's the same gradient in another order of operations (within a few ulps); swiglu's
// kernels are described in model/swiglu_kernel.h.
//
// Thread-safety: pure functions.
#pragma once

#include <torch/types.h>

#include "model/gpt.h"

namespace bw::model {

// LlamaRMSNorm: in fp32, then back to the input's dtype, times the weight.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// RoPE's inverse frequencies (modeling_rope_utils.py, default and llama3), fp32 [head_dim / 2].
torch::Tensor rope_inverse_frequencies(const GptConfig& c);
// rotate_half: [x1, x2] -> [-x2, x1] over the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x);

// The RoPE table of positions [0, positions): cos and "signed sin", the sin with its first half
// negated, both fp32 [positions, head_dim]. rotate_half(x) * sin == swap_halves(x) * sin_signed
// exactly (a sign flip rounds nothing), which saves rotate_half's negation.
struct RopeTable {
  torch::Tensor cos, sin_signed;
};
RopeTable rope_table(const GptConfig& c, int64_t positions);
// x * cos + rotate_half(x) * sin over x's last dimension (head_dim), with cos and sin_signed
// broadcast against x ([T, head_dim] against [b, heads, T, head_dim]): Hugging Face's
// apply_rotary_pos_emb, the same bits forward and backward, in 4 passes each way.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin_signed);

// silu(gate) * up, the SwiGLU of LlamaMLP, as one autograd node: on the CPU in fp32 or bf16 (gate
// and up of one dtype and shape) over the one-pass kernels of model/swiglu_kernel.h, elsewhere the
// composite at::silu(gate) * up.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace bw::model
