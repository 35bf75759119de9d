#include "plan/synth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bw::plan {

const std::vector<ModelSpec>& known_models() {
  // GPT-3 sizes from Brown et al. 2020, table 2.1 (sequence 2048, GPT-2 vocabulary); BERT-large
  // from Devlin et al. 2019 (sequence 512), costed as a stack of GPT-shaped blocks of its size.
  // The table gives GPT-3 13B d_model 5140, which its 40 heads of d_head 128 contradict: 5120.
  static const std::vector<ModelSpec> models = [] {
    std::vector<ModelSpec> m;
    const struct {
      const char* name;
      int64_t blocks, hidden, heads, seq_len, vocab;
    } table[] = {
        {"gpt3-small", 12, 768, 12, 2048, 50257},  {"gpt3-medium", 24, 1024, 16, 2048, 50257},
        {"gpt3-large", 24, 1536, 16, 2048, 50257}, {"gpt3-xl", 24, 2048, 16, 2048, 50257},
        {"gpt3-2.7b", 32, 2560, 32, 2048, 50257},  {"gpt3-6.7b", 32, 4096, 32, 2048, 50257},
        {"gpt3-13b", 40, 5120, 40, 2048, 50257},   {"gpt3-175b", 96, 12288, 96, 2048, 50257},
        {"bert-large", 24, 1024, 16, 512, 30522},
    };
    for (const auto& r : table)
      m.push_back(shape::gpt2_shape(r.name, r.vocab, r.seq_len, r.hidden, r.heads, r.blocks));
    return m;
  }();
  return models;
}

const std::vector<DeviceSpec>& known_devices() {
  // Dense fp16/bf16 tensor peak from the vendors' data sheets; CPUs fp32 for a few cores.
  static const std::vector<DeviceSpec> devices = {
      {"v100", 125, 0.45, 32},    {"a100", 312, 0.5, 80},   {"a100-40gb", 312, 0.5, 40},
      {"h100", 989, 0.45, 80},    {"h200", 989, 0.45, 141}, {"cpu-4core", 0.5, 0.5, 16},
      {"cpu-1core", 0.1, 0.5, 8},
  };
  return devices;
}

namespace {
template <typename T>
std::string names_of(const std::vector<T>& v) {
  std::vector<std::string> names;
  for (const auto& x : v) names.push_back(x.name);
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

ModelSpec find_model(const std::string& name) {
  for (const auto& m : known_models())
    if (m.name == name) return m;
  throw ConfigError(
      fmt::format("unknown model '{}'; known models: {}", name, names_of(known_models())));
}

DeviceSpec find_device(const std::string& name) {
  for (const auto& d : known_devices())
    if (d.name == name) return d;
  throw ConfigError(
      fmt::format("unknown device '{}'; known devices: {}", name, names_of(known_devices())));
}

Profile synthesize_profile(const ModelSpec& m, const DeviceSpec& dev, int microbatch_size) {
  if (microbatch_size < 1)
    throw ConfigError(fmt::format("microbatch size must be >= 1, got {}", microbatch_size));
  m.validate();
  const double b = microbatch_size, tokens = b * static_cast<double>(m.seq_len);
  const double flops_per_ms = dev.peak_tflops * 1e12 * dev.efficiency / 1e3;
  // As Megatron trained these models: fp16 activations, dropout, attention scores written out.
  const shape::ActivationOptions megatron{shape::Precision::kBf16, shape::Recompute::kNone,
                                          shape::Attention::kWrittenOut, /*dropout=*/true};
  Profile p;
  p.model = m.name;
  p.microbatch_size = microbatch_size;
  p.device = dev.name;
  for (int l = 0; l < m.num_layers(); ++l) {
    LayerProfile layer;
    const shape::LayerKind kind = m.layer_kind(l);
    layer.name = kind == shape::LayerKind::kEmbedding ? "embedding"
                 : kind == shape::LayerKind::kHead    ? "head"
                                                      : fmt::format("block{}", l - 1);
    // A third of the model FLOPs is forward; the embedding has none and is costed as one pass
    // over its output.
    const double forward_flops = kind == shape::LayerKind::kEmbedding
                                     ? 2 * tokens * static_cast<double>(m.d_model)
                                     : m.layer_flops_per_token(l) / 3 * tokens;
    layer.forward_ms = forward_flops / flops_per_ms;
    layer.backward_ms = 2 * layer.forward_ms;
    layer.backward_input_ms = layer.forward_ms;
    layer.backward_weight_ms = layer.forward_ms;
    layer.activation_bytes = b * m.activation_bytes_per_sample(l, megatron);
    layer.output_bytes = b * m.output_bytes_per_sample(l, megatron.precision);
    layer.param_bytes = shape::kParameterBytes * static_cast<double>(m.layer_parameters(l));
    p.layers.push_back(layer);
  }
  return p;
}

}  // namespace bw::plan
