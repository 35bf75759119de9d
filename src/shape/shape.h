// One description of a decoder-only transformer's shape, and what follows from it: parameter
// counts, model FLOPs, activation bytes and state bytes per parameter. Every layer that needs one
// of these numbers (the synthetic profiles and the planner, the forecast, the model, the
// profiler and the runtime's memory estimate) asks this struct, so the formulas exist once.
//
// The model is a flat list of layers (as src/model builds it):
//   0            token embedding (+ learned positions for gpt2)
//   1..n_blocks  pre-norm block: attention (GQA when n_kv_heads < n_heads) and MLP
//   n_blocks+1   final norm + LM head (+ the loss)
// Families: "gpt2" is Hugging Face's GPT2LMHeadModel (LayerNorm with bias, biases everywhere,
// learned positions, GELU MLP of ffn_hidden = 4 d, tied head); "llama" is LlamaForCausalLM
// (RMSNorm weight only, no biases, RoPE without parameters, SwiGLU MLP of three matrices,
// tied or untied head).
//
// Parameters are counted two ways. layer_parameters(l) and held_parameters() count what the
// layers hold: with tied embeddings the head holds its own copy of the embedding matrix (the two
// usually sit on different pipeline stages, and their gradients are summed every step), so the
// matrix is counted at layer 0 and again at the head. unique_parameters() counts it once, as
// Hugging Face's num_parameters() does. Memory is held_ (every stage holds what it holds);
// "how big is the model" is unique_.
//
// Model FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B): 6 N + 12 L H Q T for a
// forward and backward pass, with L blocks, H query heads of size Q, sequence T, and N the
// parameters that take part in a matmul per token, with the norms and biases as well:
// unique_parameters() less the lookup tables (position embeddings; the token embedding unless it
// is tied, in which case the head's matmul uses it). That is nanoGPT's estimate_mfu (N =
// get_num_params(), which leaves out the position embeddings). llm.c's gpt2_estimate_mfu takes
// 6 N' + 6 L C T instead, with N' all parameters (position embeddings included) and the attention
// term halved for the causal mask; PaLM counts the full T x T score matrix, and so do we.
// Recomputation is not model FLOPs (MFU counts none of it). Per layer: the embedding 0, a block
// 6 x its parameters + 12 H Q T, the head 6 x its parameters (final norm + the V x d matmul);
// their sum is the model's.
//
// Activation bytes kept from a layer's forward until its backward, per sample (everything is
// linear in the microbatch size), with s = seq_len, h = d_model, h_kv = n_kv_heads x head_dim,
// f = ffn_hidden, a = n_heads, e = bytes per activation element (4 fp32, 2 bf16):
//   block, kept for backward:  e s (6 h + 2 h_kv + m f)     m = 2 (GELU MLP), 4 (SwiGLU)
//       two norm inputs, the inputs of the QKV, output and first MLP matmuls, Q (h) and K, V
//       (h_kv each) for attention, and the MLP's hidden tensors (GELU: its input and output;
//       SwiGLU: gate, up, silu(gate) and their product). This is Korthikanti et al. 2022
//       ("Reducing activation recomputation in large transformer models", section 4.1) without
//       dropout: their 34 s b h for fp16 is 2 x 16 elements + 2 one-byte dropout masks.
//     + e a s^2                  with written-out attention: the softmax probabilities. Fused
//       attention (scaled_dot_product_attention, flash) keeps only its output, counted above,
//       and a per-head log-sum-exp.
//     + 2 s h (1 byte each)      with dropout: the two residual-dropout masks (Korthikanti)
//     + (1 + e) a s^2            with dropout and written-out attention: the attention-dropout
//       mask and output. With all three (bf16, written out, dropout) this is exactly their
//       s h (34 + 5 a s / h).
//   embedding: 8 s (the int64 token ids; the gather's backward needs nothing else).
//   head: e s 2 h (final-norm and matmul inputs) + 4 s V (the fp32 log-softmax the loss keeps;
//       the loss is fp32 in every precision) + 8 s (the int64 targets).
//   full recomputation: a layer keeps its input only (8 s token ids for the embedding, e s h
//       otherwise; the head also its 8 s targets); the one layer being recomputed holds its
//       no-recomputation bytes while it runs again.
// Per-token statistics (norm mean and rstd, fused attention's log-sum-exp) are left out: they
// are O(1 / head_dim) of the rest. Fused attention with n_kv_heads < n_heads is counted with K
// and V at h_kv width (SDPA's enable_gqa); an implementation that repeats them to h keeps
// 2 e s (h - h_kv) more.
//
// State bytes per parameter (state_bytes_per_parameter): fp32 training holds the fp32 parameter,
// its fp32 gradient and two fp32 AdamW moments, 16 bytes. bf16 mixed precision (autocast) holds
// the same: the parameter stays fp32 in the layer (the master copy), gradients are accumulated
// and reduced in fp32, the moments are fp32; 16 bytes. On top, autocast makes a bf16 copy of each
// weight it uses (compute_copy_bytes_per_parameter: 2 bytes, 0 in fp32), which the matmul saves
// for backward: one copy per layer per autocast region still waiting for its backward.
//
// Thread-safety: plain values; every function is const and pure.
#pragma once

#include <cstdint>
#include <string>

namespace bw::shape {

enum class Family { kGpt2, kLlama };
enum class Norm { kLayerNorm, kRmsNorm };  // LayerNorm: weight + bias; RMSNorm: weight only
enum class LayerKind { kEmbedding, kBlock, kHead };
enum class Precision { kFp32, kBf16 };
enum class Recompute { kNone, kFull };
enum class Attention { kFused, kWrittenOut };

// "gpt2" / "llama", "fp32" / "bf16"; the parse functions throw ConfigError naming the choices.
const char* family_name(Family family);
Family parse_family(const std::string& name);
const char* precision_name(Precision precision);
Precision parse_precision(const std::string& name);

// Bytes of one activation element: 4 (fp32), 2 (bf16).
constexpr double activation_element_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }
// Bytes of one parameter as the layers store it (fp32 in both precisions: the master copy).
constexpr double kParameterBytes = 4;
// Parameter + gradient + two AdamW moments, all fp32 in both precisions: 16.
constexpr double state_bytes_per_parameter(Precision) { return 4 + 4 + 4 + 4; }
// The bf16 weight copy autocast makes (and the matmul saves for backward): 2 bytes; 0 in fp32.
constexpr double compute_copy_bytes_per_parameter(Precision p) {
  return p == Precision::kFp32 ? 0 : 2;
}

struct ActivationOptions {
  Precision precision = Precision::kFp32;
  Recompute recompute = Recompute::kNone;
  Attention attention = Attention::kFused;
  bool dropout = false;  // Megatron-style residual and attention dropout (breakwater has none)
};

struct TransformerShape {
  std::string name;
  Family family = Family::kGpt2;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // == n_heads without grouped-query attention
  int64_t n_blocks = 0;
  int64_t ffn_hidden = 0;  // 4 d_model for gpt2; Llama's intermediate_size
  bool tied_embeddings = true;
  bool learned_positions = true;
  bool biases = true;
  Norm norm = Norm::kLayerNorm;

  // ConfigError naming the field unless every size is >= 1, n_heads divides d_model, n_kv_heads
  // divides n_heads and the flags fit the family (gpt2: LayerNorm; llama: no learned positions).
  void validate() const;

  int num_layers() const { return static_cast<int>(n_blocks) + 2; }
  // BW_CHECK on a layer outside [0, num_layers()).
  LayerKind layer_kind(int layer) const;
  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Parameters the layer holds (the head holds its copy of a tied matrix).
  int64_t layer_parameters(int layer) const;
  // Sum of layer_parameters over the layers: what one pipeline holds.
  int64_t held_parameters() const;
  // The model's parameters with a tied matrix counted once (Hugging Face's num_parameters()).
  int64_t unique_parameters() const;
  // N of 6 N: unique_parameters() less the lookup-only embedding tables.
  int64_t flop_parameters() const;

  // Model FLOPs per token, forward + backward (PaLM appendix B): 6 N + 12 L H Q T.
  double flops_per_token() const;
  // The layer's share; the layers' shares sum to flops_per_token(). Forward is a third of it.
  double layer_flops_per_token(int layer) const;

  // Bytes the layer keeps from forward until backward for one sample (see the top comment).
  double activation_bytes_per_sample(int layer, const ActivationOptions& options) const;
  // Bytes of the activation layer `layer` sends to the next one for one sample (s h e; 0 for
  // the head, whose logits go to the loss on the same device).
  double output_bytes_per_sample(int layer, Precision precision) const;
};

// GPT2LMHeadModel's shape: ffn 4 d, n_kv_heads = n_heads, tied, learned positions, biases,
// LayerNorm. Validated.
TransformerShape gpt2_shape(std::string name, int64_t vocab, int64_t seq_len, int64_t d_model,
                            int64_t n_heads, int64_t n_blocks);
// LlamaForCausalLM's shape: RMSNorm, no biases, RoPE (no position parameters), SwiGLU of
// `ffn_hidden`. Validated.
TransformerShape llama_shape(std::string name, int64_t vocab, int64_t seq_len, int64_t d_model,
                             int64_t n_heads, int64_t n_kv_heads, int64_t n_blocks,
                             int64_t ffn_hidden, bool tied_embeddings);

}  // namespace bw::shape
