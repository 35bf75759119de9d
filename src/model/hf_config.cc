#include "model/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/json.h"

namespace bw::model {
namespace {

using nlohmann::json;

// Keys that change nothing in breakwater's forward and backward pass (breakwater has no dropout,
// no cache, and token ids are the data's), accepted in either family.
const std::set<std::string> kInert = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
    "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class", "id2label",
    "label2id", "problem_type", "task_specific_params", "tie_word_embeddings", "is_decoder",
    "is_encoder_decoder", "chunk_size_feed_forward"};
const std::set<std::string> kGpt2Keys = {
    "vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner",
    "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
    "add_cross_attention", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout"};
const std::set<std::string> kLlamaKeys = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "attention_dropout",
    "mlp_bias", "pretraining_tp"};

bool present(const json& doc, const char* key) {
  return doc.contains(key) && !doc.at(key).is_null();
}

[[noreturn]] void unsupported(const std::string& where, const std::string& field,
                              const std::string& what) {
  throw ConfigError(fmt::format("{}: field '{}' {}; breakwater implements only the models of "
                                "docs/models.md",
                                where, field, what));
}

// `key` when present must equal `want` (a bool, string or number).
template <typename T>
void require_value(const json& doc, const char* key, const T& want, const std::string& where) {
  if (!present(doc, key)) return;
  const auto& v = doc.at(key);
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean() && v.get<bool>() == want;
  } else if constexpr (std::is_convertible_v<T, std::string>) {
    ok = v.is_string() && v.get<std::string>() == std::string(want);
  } else {
    ok = v.is_number() && v.get<double>() == static_cast<double>(want);
  }
  if (!ok) unsupported(where, key, fmt::format("= {} is not supported (only {})", v.dump(), json(want).dump()));
}

int get_size(const json& doc, const char* key, const std::string& where) {
  return static_cast<int>(bw::json::get_int_in(doc, key, where, 1, 1 << 24));
}

int64_t token_id(const json& doc, const char* key) {
  if (!present(doc, key)) return -1;
  const auto& v = doc.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v.front().is_number_integer()) return v.front().get<int64_t>();
  return -1;
}

void check_keys(const json& doc, const std::set<std::string>& family_keys,
                const std::string& where) {
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!kInert.count(it.key()) && !family_keys.count(it.key())) {
      unsupported(where, it.key(), "is not a key breakwater knows for this model_type");
    }
  }
}

GptConfig gpt2_from(const json& doc, const std::string& where) {
  check_keys(doc, kGpt2Keys, where);
  GptConfig c;
  c.family = Family::kGpt2;
  c.vocab_size = get_size(doc, "vocab_size", where);
  c.max_positions = get_size(doc, "n_positions", where);
  c.seq_len = c.max_positions;
  c.d_model = get_size(doc, "n_embd", where);
  c.n_blocks = get_size(doc, "n_layer", where);
  c.n_heads = get_size(doc, "n_head", where);
  if (c.d_model % c.n_heads != 0) {
    unsupported(where, "n_head", fmt::format("= {} does not divide n_embd = {}", c.n_heads, c.d_model));
  }
  if (present(doc, "n_inner") && bw::json::get_int(doc, "n_inner", where) != 4 * c.d_model) {
    unsupported(where, "n_inner", "other than null or 4 n_embd is not supported");
  }
  require_value(doc, "activation_function", "gelu_new", where);
  require_value(doc, "scale_attn_weights", true, where);
  require_value(doc, "scale_attn_by_inverse_layer_idx", false, where);
  require_value(doc, "reorder_and_upcast_attn", false, where);
  require_value(doc, "add_cross_attention", false, where);
  c.norm_eps = present(doc, "layer_norm_epsilon")
                   ? bw::json::get_number(doc, "layer_norm_epsilon", where)
                   : 1e-5;
  // GPT2LMHeadModel ties unless the config says otherwise.
  c.tie_embeddings = !present(doc, "tie_word_embeddings") || doc.at("tie_word_embeddings") == true;
  return c;
}

// Llama's RoPE: transformers 5 writes rope_parameters {rope_type, rope_theta, ...}; earlier
// versions (and the published checkpoints) write rope_theta and rope_scaling.
void llama_rope(const json& doc, GptConfig& c, const std::string& where) {
  json params = json::object();
  std::string field = "rope_scaling";
  if (present(doc, "rope_parameters")) {
    field = "rope_parameters";
    params = doc.at("rope_parameters");
  } else if (present(doc, "rope_scaling")) {
    params = doc.at("rope_scaling");
  }
  if (!params.is_object()) unsupported(where, field, "must be an object or null");
  c.rope_theta = 10000.0;  // LlamaConfig's default
  if (present(doc, "rope_theta")) c.rope_theta = bw::json::get_number(doc, "rope_theta", where);
  if (params.contains("rope_theta")) {
    c.rope_theta = bw::json::get_number(params, "rope_theta", where + " " + field);
  }
  std::string type = "default";
  for (const char* k : {"rope_type", "type"}) {
    if (params.contains(k)) type = bw::json::get_string(params, k, where + " " + field);
  }
  const std::string sub = where + " " + field;
  for (auto it = params.begin(); it != params.end(); ++it) {
    static const std::set<std::string> known = {"rope_type", "type", "rope_theta", "factor",
                                                "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings"};
    if (!known.count(it.key())) unsupported(where, field + "." + it.key(), "is not supported");
  }
  if (params.contains("partial_rotary_factor") &&
      bw::json::get_number(params, "partial_rotary_factor", sub) != 1.0) {
    unsupported(where, field + ".partial_rotary_factor", "other than 1 is not supported");
  }
  if (type == "default") {
    c.rope = {};
    return;
  }
  if (type != "llama3") {
    unsupported(where, field + ".rope_type",
                fmt::format("= \"{}\" is not supported (only \"default\" and \"llama3\")", type));
  }
  c.rope.llama3 = true;
  c.rope.factor = bw::json::get_number(params, "factor", sub);
  c.rope.low_freq_factor = bw::json::get_number(params, "low_freq_factor", sub);
  c.rope.high_freq_factor = bw::json::get_number(params, "high_freq_factor", sub);
  c.rope.original_max_positions =
      bw::json::get_int_in(params, "original_max_position_embeddings", sub, 1, 1 << 30);
  if (!(c.rope.high_freq_factor > c.rope.low_freq_factor) || !(c.rope.factor > 0)) {
    unsupported(where, field, "needs factor > 0 and high_freq_factor > low_freq_factor");
  }
}

GptConfig llama_from(const json& doc, const std::string& where) {
  check_keys(doc, kLlamaKeys, where);
  GptConfig c;
  c.family = Family::kLlama;
  c.vocab_size = get_size(doc, "vocab_size", where);
  c.d_model = get_size(doc, "hidden_size", where);
  c.ffn_hidden = get_size(doc, "intermediate_size", where);
  c.n_blocks = get_size(doc, "num_hidden_layers", where);
  c.n_heads = get_size(doc, "num_attention_heads", where);
  c.n_kv_heads =
      present(doc, "num_key_value_heads") ? get_size(doc, "num_key_value_heads", where) : c.n_heads;
  c.max_positions = get_size(doc, "max_position_embeddings", where);
  c.seq_len = std::min(c.max_positions, 2048);
  c.norm_eps = bw::json::get_number(doc, "rms_norm_eps", where);
  if (c.d_model % c.n_heads != 0) {
    unsupported(where, "num_attention_heads",
                fmt::format("= {} does not divide hidden_size = {}", c.n_heads, c.d_model));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    unsupported(where, "num_key_value_heads",
                fmt::format("= {} does not divide num_attention_heads = {}", c.n_kv_heads, c.n_heads));
  }
  if (present(doc, "head_dim") &&
      bw::json::get_int(doc, "head_dim", where) != c.d_model / c.n_heads) {
    unsupported(where, "head_dim", "other than hidden_size / num_attention_heads is not supported");
  }
  require_value(doc, "hidden_act", "silu", where);
  require_value(doc, "attention_bias", false, where);
  require_value(doc, "mlp_bias", false, where);
  require_value(doc, "pretraining_tp", 1, where);
  llama_rope(doc, c, where);
  // LlamaConfig does not tie unless the config says so.
  c.tie_embeddings = present(doc, "tie_word_embeddings") && doc.at("tie_word_embeddings") == true;
  return c;
}

}  // namespace

GptConfig hf_config_from_json(const json& doc, const std::string& where) {
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  const std::string type = bw::json::get_string(doc, "model_type", where);
  GptConfig c;
  if (type == "gpt2") {
    c = gpt2_from(doc, where);
  } else if (type == "llama") {
    c = llama_from(doc, where);
  } else {
    unsupported(where, "model_type", fmt::format("= \"{}\" is not supported (gpt2 or llama)", type));
  }
  if (present(doc, "architectures")) {
    const auto& a = doc.at("architectures");
    const std::string want = type == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM";
    if (!a.is_array() || a.size() != 1 || a.front() != want) {
      unsupported(where, "architectures", fmt::format("= {} is not supported (only [\"{}\"])", a.dump(), want));
    }
  }
  c.bos_token_id = token_id(doc, "bos_token_id");
  c.eos_token_id = token_id(doc, "eos_token_id");
  return c;
}

GptConfig hf_config_from_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  GptConfig c = hf_config_from_json(bw::json::read_file(path), path);
  c.name = dir;
  c.init_from = dir;
  return c;
}

json hf_config_json(const GptConfig& c, const std::string& torch_dtype) {
  auto id = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  json doc;
  if (c.family == Family::kGpt2) {
    doc = {{"architectures", {"GPT2LMHeadModel"}},
           {"model_type", "gpt2"},
           {"vocab_size", c.vocab_size},
           {"n_positions", position_rows(c)},
           {"n_ctx", position_rows(c)},
           {"n_embd", c.d_model},
           {"n_layer", c.n_blocks},
           {"n_head", c.n_heads},
           {"n_inner", nullptr},
           {"activation_function", "gelu_new"},
           {"resid_pdrop", 0.0},
           {"embd_pdrop", 0.0},
           {"attn_pdrop", 0.0},
           {"layer_norm_epsilon", c.norm_eps},
           {"initializer_range", 0.02},
           {"scale_attn_weights", true},
           {"scale_attn_by_inverse_layer_idx", false},
           {"reorder_and_upcast_attn", false},
           {"tie_word_embeddings", c.tie_embeddings}};
  } else if (c.family == Family::kLlama) {
    json rope = nullptr;
    if (c.rope.llama3) {
      rope = {{"rope_type", "llama3"},
              {"factor", c.rope.factor},
              {"low_freq_factor", c.rope.low_freq_factor},
              {"high_freq_factor", c.rope.high_freq_factor},
              {"original_max_position_embeddings", c.rope.original_max_positions}};
    }
    doc = {{"architectures", {"LlamaForCausalLM"}},
           {"model_type", "llama"},
           {"vocab_size", c.vocab_size},
           {"hidden_size", c.d_model},
           {"intermediate_size", ffn_width(c)},
           {"num_hidden_layers", c.n_blocks},
           {"num_attention_heads", c.n_heads},
           {"num_key_value_heads", kv_heads(c)},
           {"head_dim", c.d_model / c.n_heads},
           {"hidden_act", "silu"},
           {"max_position_embeddings", c.max_positions > 0 ? c.max_positions : c.seq_len},
           {"rms_norm_eps", c.norm_eps},
           {"rope_theta", c.rope_theta},
           {"rope_scaling", rope},
           {"attention_bias", false},
           {"attention_dropout", 0.0},
           {"mlp_bias", false},
           {"pretraining_tp", 1},
           {"initializer_range", 0.02},
           {"tie_word_embeddings", c.tie_embeddings}};
  } else {
    throw ConfigError(fmt::format(
        "model '{}' is of family gpt, which has no Hugging Face architecture; train with "
        "model.family = \"gpt2\" or \"llama\" to export to Hugging Face",
        c.name));
  }
  doc["bos_token_id"] = id(c.bos_token_id);
  doc["eos_token_id"] = id(c.eos_token_id);
  doc["use_cache"] = true;
  doc["torch_dtype"] = torch_dtype;
  return doc;
}

json hf_generation_config_json(const GptConfig& c) {
  json doc = {{"_from_model_config", true}};
  if (c.bos_token_id >= 0) doc["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) doc["eos_token_id"] = c.eos_token_id;
  return doc;
}

std::vector<HfTensor> hf_tensors(const GptConfig& c) {
  const int head = num_layers(c) - 1;
  std::vector<HfTensor> out;
  auto add = [&](std::string name, int layer, std::string param, bool transposed = false) {
    out.push_back({std::move(name), {{layer, std::move(param)}}, transposed});
  };
  const bool gpt2 = c.family == Family::kGpt2;
  if (c.family == Family::kGpt) {
    throw ConfigError(fmt::format(
        "model '{}' is of family gpt, which has no Hugging Face names; use model.family = "
        "\"gpt2\" or \"llama\"",
        c.name));
  }
  add(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", 0, "wte.weight");
  if (c.tie_embeddings) out.back().targets.push_back({head, "lm_head.weight"});
  if (gpt2) add("transformer.wpe.weight", 0, "wpe.weight");
  for (int b = 0; b < c.n_blocks; ++b) {
    const int l = b + 1;
    if (gpt2) {
      const std::string p = fmt::format("transformer.h.{}.", b);
      add(p + "ln_1.weight", l, "ln1.weight");
      add(p + "ln_1.bias", l, "ln1.bias");
      add(p + "attn.c_attn.weight", l, "attn.qkv.weight", true);
      add(p + "attn.c_attn.bias", l, "attn.qkv.bias");
      add(p + "attn.c_proj.weight", l, "attn.proj.weight", true);
      add(p + "attn.c_proj.bias", l, "attn.proj.bias");
      add(p + "ln_2.weight", l, "ln2.weight");
      add(p + "ln_2.bias", l, "ln2.bias");
      add(p + "mlp.c_fc.weight", l, "mlp.fc.weight", true);
      add(p + "mlp.c_fc.bias", l, "mlp.fc.bias");
      add(p + "mlp.c_proj.weight", l, "mlp.proj.weight", true);
      add(p + "mlp.c_proj.bias", l, "mlp.proj.bias");
    } else {
      const std::string p = fmt::format("model.layers.{}.", b);
      add(p + "input_layernorm.weight", l, "ln1.weight");
      add(p + "self_attn.q_proj.weight", l, "attn.q.weight");
      add(p + "self_attn.k_proj.weight", l, "attn.k.weight");
      add(p + "self_attn.v_proj.weight", l, "attn.v.weight");
      add(p + "self_attn.o_proj.weight", l, "attn.proj.weight");
      add(p + "post_attention_layernorm.weight", l, "ln2.weight");
      add(p + "mlp.gate_proj.weight", l, "mlp.gate.weight");
      add(p + "mlp.up_proj.weight", l, "mlp.up.weight");
      add(p + "mlp.down_proj.weight", l, "mlp.proj.weight");
    }
  }
  add(gpt2 ? "transformer.ln_f.weight" : "model.norm.weight", head, "ln_f.weight");
  if (gpt2) add("transformer.ln_f.bias", head, "ln_f.bias");
  if (!c.tie_embeddings) add("lm_head.weight", head, "lm_head.weight");
  return out;
}

}  // namespace bw::model
