#include "plan/synth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bw::plan {

const std::vector<ModelSpec>& known_models() {
  // GPT-3 sizes from Brown et al. 2020, table 2.1 (sequence 2048, GPT-2 vocabulary); BERT-large
  // from Devlin et al. 2019 (sequence 512).
  static const std::vector<ModelSpec> models = {
      {"gpt3-small", 12, 768, 12, 2048, 50257},  {"gpt3-medium", 24, 1024, 16, 2048, 50257},
      {"gpt3-large", 24, 1536, 16, 2048, 50257}, {"gpt3-xl", 24, 2048, 16, 2048, 50257},
      {"gpt3-2.7b", 32, 2560, 32, 2048, 50257},  {"gpt3-6.7b", 32, 4096, 32, 2048, 50257},
      {"gpt3-13b", 40, 5140, 40, 2048, 50257},   {"gpt3-175b", 96, 12288, 96, 2048, 50257},
      {"bert-large", 24, 1024, 16, 512, 30522},
  };
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
  const double b = microbatch_size, s = m.seq_len, h = m.hidden, a = m.heads, v = m.vocab;
  const double flops_per_ms = dev.peak_tflops * 1e12 * dev.efficiency / 1e3;
  const double fp16 = 2, fp32 = 4;
  Profile p;
  p.model = m.name;
  p.microbatch_size = microbatch_size;
  p.device = dev.name;

  // Token + position embedding: a gather, costed as one pass over its output.
  LayerProfile emb;
  emb.name = "embedding";
  emb.forward_ms = 2 * b * s * h / flops_per_ms;
  emb.backward_ms = 2 * emb.forward_ms;
  emb.backward_input_ms = emb.forward_ms;
  emb.backward_weight_ms = emb.forward_ms;
  emb.activation_bytes = b * s * 8;  // token ids
  emb.output_bytes = b * s * h * fp16;
  emb.param_bytes = (v + s) * h * fp32;
  p.layers.push_back(emb);

  for (int i = 0; i < m.num_blocks; ++i) {
    LayerProfile blk;
    blk.name = fmt::format("block{}", i);
    const double fwd_flops = 24 * b * s * h * h + 4 * b * s * s * h;
    blk.forward_ms = fwd_flops / flops_per_ms;
    blk.backward_ms = 2 * blk.forward_ms;
    blk.backward_input_ms = blk.forward_ms;
    blk.backward_weight_ms = blk.forward_ms;
    blk.activation_bytes = s * b * h * (34 + 5 * a * s / h);
    blk.output_bytes = b * s * h * fp16;
    blk.param_bytes = (12 * h * h + 13 * h) * fp32;
    p.layers.push_back(blk);
  }

  // Final layer norm + language-model head + loss.
  LayerProfile head;
  head.name = "head";
  head.forward_ms = 2 * b * s * h * v / flops_per_ms;
  head.backward_ms = 2 * head.forward_ms;
  head.backward_input_ms = head.forward_ms;
  head.backward_weight_ms = head.forward_ms;
  head.activation_bytes = b * s * h * fp16 + b * s * v * (fp16 + fp32);
  head.output_bytes = 0;
  head.param_bytes = (v * h + 2 * h) * fp32;
  p.layers.push_back(head);
  return p;
}

}  // namespace bw::plan
