// Hugging Face model folders, the pure part: config.json to and from a GptConfig, and the name
// map between breakwater's (layer, parameter) and transformers' state-dict names
// (docs/models.md, "Hugging Face"). The weights themselves are read and written in
// runtime/hf.h (safetensors lives there).
//
// config.json is read strictly: model_type must be "gpt2" or "llama"; the shape fields are
// required; an option whose value breakwater does not implement (activation_function other than
// gelu_new, an attention or MLP bias on llama, a rope type other than llama3, ...) and any key
// not in the table of known keys are a ConfigError naming the file and the field. Keys that do
// not change the forward pass (dropout probabilities, token ids, use_cache, dtype, ...) are
// accepted and named in docs/models.md.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace bw::model {

// DIR/config.json through json::read_file (its size limit); the config's name is DIR.
GptConfig hf_config_from_dir(const std::string& dir);
// `where` names the file in messages.
GptConfig hf_config_from_json(const nlohmann::json& doc, const std::string& where);

// config.json for `config` (family gpt2 or llama; "gpt" is a ConfigError: it has no Hugging Face
// architecture), every field transformers reads; torch_dtype "float32" or "bfloat16".
nlohmann::json hf_config_json(const GptConfig& config, const std::string& torch_dtype);
nlohmann::json hf_generation_config_json(const GptConfig& config);

// One tensor of the Hugging Face state dict and the breakwater parameters it fills: one, or two
// for a tied matrix (the embedding and the head's copy). GPT-2's Conv1D weights are stored
// transposed ([in, out]).
struct HfTensor {
  std::string name;  // "transformer.h.0.attn.c_attn.weight", "model.layers.0.mlp.up_proj.weight"
  std::vector<TiedParameter> targets;
  bool transposed = false;
};
// Every tensor of the model's Hugging Face state dict, in layer order (a tied model's lm_head is
// not one: it is stored once, as the embedding).
std::vector<HfTensor> hf_tensors(const GptConfig& config);

}  // namespace bw::model
