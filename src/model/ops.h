// Operations the training layers (gpt.cc) and the KV-cache generator (generate.cc) share, so
// that both compute RMSNorm and RoPE with the same operations in the same order as Hugging
// Face's LlamaRMSNorm and LlamaRotaryEmbedding (docs/models.md).
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

}  // namespace bw::model
