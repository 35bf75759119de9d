// TransformerShape against references that do not use its formulas: Hugging Face's tensor lists
// for the same configs, hand counts of tiny shapes, PaLM's FLOP formula evaluated by hand, and
// Korthikanti et al.'s published activation expression.
#include "shape/shape.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace bw::shape {
namespace {

// One tensor of a Hugging Face state dict: its name, shape, and the flat layer that holds it.
struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  int layer;
};

int64_t numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  return n;
}

// GPT2LMHeadModel.named_parameters() (lm_head.weight is transformer.wte.weight, so it is not
// listed); Conv1D weights are [in, out].
std::vector<Tensor> hf_gpt2_tensors(int64_t vocab, int64_t n_positions, int64_t n_embd,
                                    int n_layer) {
  const int64_t d = n_embd;
  std::vector<Tensor> t = {{"transformer.wte.weight", {vocab, d}, 0},
                           {"transformer.wpe.weight", {n_positions, d}, 0}};
  for (int i = 0; i < n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const Tensor& x : std::vector<Tensor>{{p + "ln_1.weight", {d}, i + 1},
                                               {p + "ln_1.bias", {d}, i + 1},
                                               {p + "attn.c_attn.weight", {d, 3 * d}, i + 1},
                                               {p + "attn.c_attn.bias", {3 * d}, i + 1},
                                               {p + "attn.c_proj.weight", {d, d}, i + 1},
                                               {p + "attn.c_proj.bias", {d}, i + 1},
                                               {p + "ln_2.weight", {d}, i + 1},
                                               {p + "ln_2.bias", {d}, i + 1},
                                               {p + "mlp.c_fc.weight", {d, 4 * d}, i + 1},
                                               {p + "mlp.c_fc.bias", {4 * d}, i + 1},
                                               {p + "mlp.c_proj.weight", {4 * d, d}, i + 1},
                                               {p + "mlp.c_proj.bias", {d}, i + 1}})
      t.push_back(x);
  }
  t.push_back({"transformer.ln_f.weight", {d}, n_layer + 1});
  t.push_back({"transformer.ln_f.bias", {d}, n_layer + 1});
  return t;
}

// LlamaForCausalLM.named_parameters(); lm_head.weight is listed only when untied. nn.Linear
// weights are [out, in].
std::vector<Tensor> hf_llama_tensors(int64_t vocab, int64_t hidden, int64_t intermediate,
                                     int n_layer, int64_t heads, int64_t kv_heads, bool tied) {
  const int64_t d = hidden, kv = kv_heads * (hidden / heads), f = intermediate;
  std::vector<Tensor> t = {{"model.embed_tokens.weight", {vocab, d}, 0}};
  for (int i = 0; i < n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const Tensor& x : std::vector<Tensor>{{p + "self_attn.q_proj.weight", {d, d}, i + 1},
                                               {p + "self_attn.k_proj.weight", {kv, d}, i + 1},
                                               {p + "self_attn.v_proj.weight", {kv, d}, i + 1},
                                               {p + "self_attn.o_proj.weight", {d, d}, i + 1},
                                               {p + "mlp.gate_proj.weight", {f, d}, i + 1},
                                               {p + "mlp.up_proj.weight", {f, d}, i + 1},
                                               {p + "mlp.down_proj.weight", {d, f}, i + 1},
                                               {p + "input_layernorm.weight", {d}, i + 1},
                                               {p + "post_attention_layernorm.weight", {d}, i + 1}})
      t.push_back(x);
  }
  t.push_back({"model.norm.weight", {d}, n_layer + 1});
  if (!tied) t.push_back({"lm_head.weight", {vocab, d}, n_layer + 1});
  return t;
}

int64_t total(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += numel(t);
  return n;
}

// The parameters each flat layer holds: HF's tensors by layer, plus the head's copy of a tied
// embedding matrix.
std::vector<int64_t> held_by_layer(const std::vector<Tensor>& tensors, int num_layers,
                                   int64_t tied_copy) {
  std::vector<int64_t> held(num_layers, 0);
  for (const auto& t : tensors) held[t.layer] += numel(t);
  held[num_layers - 1] += tied_copy;
  return held;
}

void expect_layers(const TransformerShape& s, const std::vector<int64_t>& want) {
  ASSERT_EQ(s.num_layers(), static_cast<int>(want.size()));
  int mismatches = 0;
  for (int l = 0; l < s.num_layers() && mismatches < 3; ++l) {
    if (s.layer_parameters(l) != want[l]) {
      ++mismatches;
      ADD_FAILURE() << s.name << " layer " << l << ": " << s.layer_parameters(l) << " parameters, "
                    << "Hugging Face's tensors hold " << want[l];
    }
  }
}

TEST(Shape, Gpt2MatchesHuggingFace) {
  // gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl: config.json's n_embd, n_head, n_layer.
  struct Case {
    const char* name;
    int64_t d, heads;
    int layers;
    int64_t published;  // GPT2LMHeadModel(config).num_parameters(); 0 when not pinned here
  };
  for (Case c : {Case{"gpt2", 768, 12, 12, 124'439'808}, Case{"gpt2-medium", 1024, 16, 24, 0},
                 Case{"gpt2-large", 1280, 20, 36, 0}, Case{"gpt2-xl", 1600, 25, 48, 0}}) {
    const TransformerShape s = gpt2_shape(c.name, 50257, 1024, c.d, c.heads, c.layers);
    const auto hf = hf_gpt2_tensors(50257, 1024, c.d, c.layers);
    EXPECT_EQ(s.unique_parameters(), total(hf)) << c.name;
    if (c.published > 0) EXPECT_EQ(s.unique_parameters(), c.published) << c.name;
    expect_layers(s, held_by_layer(hf, s.num_layers(), 50257 * c.d));
    EXPECT_EQ(s.held_parameters(), total(hf) + 50257 * c.d) << c.name;
  }
}

TEST(Shape, LlamaMatchesHuggingFace) {
  // Llama 3.2 1B (tied) and Llama 3.1 8B (untied): config.json's hidden_size,
  // intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads.
  struct Case {
    const char* name;
    int64_t d, f;
    int layers;
    int64_t heads, kv_heads;
    bool tied;
    int64_t published;
  };
  for (Case c : {Case{"llama3.2-1b", 2048, 8192, 16, 32, 8, true, 1'235'814'400},
                 Case{"llama3.1-8b", 4096, 14336, 32, 32, 8, false, 8'030'261'248}}) {
    const TransformerShape s =
        llama_shape(c.name, 128256, 8192, c.d, c.heads, c.kv_heads, c.layers, c.f, c.tied);
    const auto hf = hf_llama_tensors(128256, c.d, c.f, c.layers, c.heads, c.kv_heads, c.tied);
    EXPECT_EQ(total(hf), c.published) << c.name;
    EXPECT_EQ(s.unique_parameters(), c.published) << c.name;
    expect_layers(s, held_by_layer(hf, s.num_layers(), c.tied ? 128256 * c.d : 0));
  }
}

TEST(Shape, TinyShapesByHand) {
  // gpt2, d 4, 2 heads, 1 block, vocab 10, seq 3:
  //   embedding 10*4 + 3*4 = 52
  //   block: ln_1 8, c_attn 4*12 + 12 = 60, c_proj 16 + 4 = 20, ln_2 8, c_fc 4*16 + 16 = 80,
  //          mlp.c_proj 16*4 + 4 = 68: 244
  //   head: ln_f 8 + the tied copy 40 = 48
  const TransformerShape g = gpt2_shape("g", 10, 3, 4, 2, 1);
  EXPECT_EQ(g.layer_parameters(0), 52);
  EXPECT_EQ(g.layer_parameters(1), 244);
  EXPECT_EQ(g.layer_parameters(2), 48);
  EXPECT_EQ(g.held_parameters(), 344);
  EXPECT_EQ(g.unique_parameters(), 304);
  EXPECT_EQ(g.flop_parameters(), 292);  // less the 12 position embeddings
  // 6 N + 12 L H Q T = 6*292 + 12*1*2*2*3 = 1752 + 144.
  EXPECT_DOUBLE_EQ(g.flops_per_token(), 1896);

  // llama, d 8, 4 heads (head_dim 2), 2 kv heads (kv width 4), 2 blocks, ffn 12, vocab 16,
  // untied:
  //   embedding 16*8 = 128
  //   block: 2 norms 16, q 64, k 32, v 32, o 64, gate 96, up 96, down 96: 496
  //   head: norm 8 + lm_head 128 = 136
  const TransformerShape l = llama_shape("l", 16, 5, 8, 4, 2, 2, 12, false);
  EXPECT_EQ(l.layer_parameters(0), 128);
  EXPECT_EQ(l.layer_parameters(1), 496);
  EXPECT_EQ(l.layer_parameters(3), 136);
  EXPECT_EQ(l.unique_parameters(), 1256);
  EXPECT_EQ(l.held_parameters(), 1256);
  EXPECT_EQ(l.flop_parameters(), 1128);  // less the untied embedding table
  // 6*1128 + 12*2*4*2*5 = 6768 + 960.
  EXPECT_DOUBLE_EQ(l.flops_per_token(), 7728);
}

TEST(Shape, FlopsArePalmAppendixB) {
  // gpt2 124M at T = 1024, by hand: N = 124,439,808 - 1024*768 (position embeddings) =
  // 123,653,376; 6 N = 741,920,256; 12 L H Q T = 12*12*12*64*1024 = 113,246,208.
  const TransformerShape s = gpt2_shape("gpt2", 50257, 1024, 768, 12, 12);
  EXPECT_EQ(s.flop_parameters(), 123'653'376);
  EXPECT_DOUBLE_EQ(s.flops_per_token(), 855'166'464.0);
  // The layers' shares add up to the model's, and a block's is 6 x its parameters + 12 H Q T.
  double sum = 0;
  for (int l = 0; l < s.num_layers(); ++l) sum += s.layer_flops_per_token(l);
  EXPECT_DOUBLE_EQ(sum, s.flops_per_token());
  EXPECT_DOUBLE_EQ(s.layer_flops_per_token(0), 0);
  EXPECT_DOUBLE_EQ(s.layer_flops_per_token(1), 6.0 * 7'087'872 + 12.0 * 768 * 1024);
  EXPECT_DOUBLE_EQ(s.layer_flops_per_token(13), 6.0 * (50257 * 768 + 2 * 768));
  // Llama 3.2 1B at T = 8192: N = all 1,235,814,400 (tied: the head's matmul uses the table);
  // 12 L H Q T = 12*16*32*64*8192.
  const TransformerShape l = llama_shape("1b", 128256, 8192, 2048, 32, 8, 16, 8192, true);
  EXPECT_DOUBLE_EQ(l.flops_per_token(), 6.0 * 1'235'814'400 + 12.0 * 16 * 32 * 64 * 8192);
}

TEST(Shape, ActivationsReduceToKorthikanti) {
  // Korthikanti et al. 2022, section 4.1: s b h (34 + 5 a s / h) bytes per block in fp16 with
  // dropout and the attention scores written out. GPT-3 175B's shape and a small one.
  for (const TransformerShape& s :
       {gpt2_shape("175b", 50257, 2048, 12288, 96, 96),
        gpt2_shape("small", 50257, 1024, 768, 12, 2), gpt2_shape("tiny", 256, 16, 32, 2, 2)}) {
    const double sd = double(s.seq_len), h = double(s.d_model), a = double(s.n_heads);
    ActivationOptions megatron{Precision::kBf16, Recompute::kNone, Attention::kWrittenOut, true};
    EXPECT_DOUBLE_EQ(s.activation_bytes_per_sample(1, megatron), sd * h * (34 + 5 * a * sd / h))
        << s.name;
    // Without dropout and with fused attention: 16 elements of s h (34 - 2 mask bytes, halved).
    EXPECT_DOUBLE_EQ(s.activation_bytes_per_sample(1, {Precision::kBf16}), 2 * 16 * sd * h);
    EXPECT_DOUBLE_EQ(s.activation_bytes_per_sample(1, {Precision::kFp32}), 4 * 16 * sd * h);
    // Written out, no dropout: plus the softmax probabilities, a s^2 elements.
    EXPECT_DOUBLE_EQ(s.activation_bytes_per_sample(
                         1, {Precision::kFp32, Recompute::kNone, Attention::kWrittenOut}),
                     4 * (16 * sd * h + a * sd * sd));
  }
}

TEST(Shape, ActivationsOfEveryLayerByHand) {
  // The tiny llama above in bf16, s 5, h 8, h_kv 4, f 12, V 16: a block keeps two norm inputs,
  // the QKV, o_proj and gate/up inputs and Q (6 x 5 x 8 = 240 elements), K and V (2 x 5 x 4 =
  // 40) and gate, up, silu(gate), their product (4 x 5 x 12 = 240): 520 elements, 1040 bytes.
  const TransformerShape l = llama_shape("l", 16, 5, 8, 4, 2, 2, 12, false);
  const ActivationOptions bf16{Precision::kBf16};
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(1, bf16), 1040);
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(0, bf16), 40);  // 5 int64 token ids
  // Head: final-norm and lm_head inputs 2 x 5 x 8 bf16 = 160, fp32 log-softmax 5 x 16 x 4 =
  // 320, int64 targets 40.
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(3, bf16), 520);
  // Full recomputation keeps the input: 5 x 8 x 2 = 80 (the head also its 40 bytes of targets).
  const ActivationOptions full{Precision::kBf16, Recompute::kFull};
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(0, full), 40);
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(1, full), 80);
  EXPECT_DOUBLE_EQ(l.activation_bytes_per_sample(3, full), 120);
  EXPECT_DOUBLE_EQ(l.output_bytes_per_sample(2, Precision::kBf16), 80);
  EXPECT_DOUBLE_EQ(l.output_bytes_per_sample(2, Precision::kFp32), 160);
  EXPECT_DOUBLE_EQ(l.output_bytes_per_sample(3, Precision::kFp32), 0);
}

TEST(Shape, BytesPerParameter) {
  // fp32: parameter, gradient, two AdamW moments, 4 bytes each. bf16 autocast keeps all four in
  // fp32 and makes a 2-byte copy of each weight it computes with.
  EXPECT_EQ(state_bytes_per_parameter(Precision::kFp32), 16);
  EXPECT_EQ(state_bytes_per_parameter(Precision::kBf16), 16);
  EXPECT_EQ(compute_copy_bytes_per_parameter(Precision::kFp32), 0);
  EXPECT_EQ(compute_copy_bytes_per_parameter(Precision::kBf16), 2);
  EXPECT_EQ(activation_element_bytes(Precision::kFp32), 4);
  EXPECT_EQ(activation_element_bytes(Precision::kBf16), 2);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_EQ(parse_family("llama"), Family::kLlama);
  EXPECT_STREQ(family_name(Family::kGpt2), "gpt2");
  EXPECT_THROW(parse_precision("fp16"), ConfigError);
  EXPECT_THROW(parse_family("bert"), ConfigError);
}

TEST(Shape, BadShapesNameTheField) {
  auto message = [](auto make) {
    try {
      make();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { gpt2_shape("m", 50257, 1024, 768, 5, 12); }).find("n_heads (5)"),
            std::string::npos);
  EXPECT_NE(message([] { llama_shape("m", 10, 4, 8, 4, 3, 1, 12, true); }).find("n_kv_heads (3)"),
            std::string::npos);
  EXPECT_NE(message([] { gpt2_shape("m", 0, 1024, 768, 12, 12); }).find("vocab must be >= 1"),
            std::string::npos);
  TransformerShape s = gpt2_shape("m", 10, 4, 8, 2, 1);
  s.norm = Norm::kRmsNorm;
  EXPECT_THROW(s.validate(), ConfigError);
  EXPECT_THROW(s.layer_kind(3), InternalError);
}

}  // namespace
}  // namespace bw::shape
