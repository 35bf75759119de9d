// A Hugging Face config.json (model/hf_config.h): input = the JSON. What parses must give a
// model whose shape the rest of breakwater accepts (parameter counts and the state-dict names
// computed without error), and must write back a config.json that reads as the same model.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = bw::fuzz::text(data, size);
  const auto doc = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    const auto config = bw::model::hf_config_from_json(doc, "config.json");
    for (int i = 0; i < bw::model::num_layers(config); ++i) {
      (void)bw::model::num_parameters(config, i);
    }
    (void)bw::model::hf_tensors(config);
    const auto back = bw::model::hf_config_from_json(
        bw::model::hf_config_json(config, "float32"), "config.json (written back)");
    if (back.d_model != config.d_model || back.n_blocks != config.n_blocks ||
        back.vocab_size != config.vocab_size || back.family != config.family ||
        back.tie_embeddings != config.tie_embeddings || kv_heads(back) != kv_heads(config)) {
      __builtin_trap();  // export then import changed the model
    }
  });
  return 0;
}
