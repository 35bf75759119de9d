// Analytic profiles for paper-scale models (GPT-3 family, BERT-large) on named devices.
//
// Every number comes from the model's shape (shape/shape.h): a layer's forward FLOPs are a third
// of its model FLOPs (PaLM appendix B; a block of hidden size h at sequence s and microbatch b
// does 24bsh^2 + 26bsh + 4bs^2h, Narayanan et al.'s SC'21 count plus the norms and biases),
// backward twice that; time is FLOPs / (peak rate * efficiency). Parameters as the layers hold
// them (the head holds its copy of the tied embedding); activations as Megatron trained these
// models, fp16 with dropout and the attention scores written out, which for a block is
// s*b*h*(34 + 5*a*s/h) bytes (Korthikanti et al., 2022); a layer's output s*b*h*2 bytes. The
// embedding, a gather, is costed as one pass over its output. Formulas in docs/profiles.md.
#pragma once

#include <string>
#include <vector>

#include "plan/profile.h"
#include "shape/shape.h"

namespace bw::plan {

// A model of the table below: its shape (gpt2 family: learned positions, LayerNorm, biases,
// GELU MLP of 4 h, tied embeddings).
using ModelSpec = shape::TransformerShape;

struct DeviceSpec {
  std::string name;
  double peak_tflops = 0;   // dense fp16/bf16 (fp32 for CPUs)
  double efficiency = 0.5;  // achieved fraction of peak
  double memory_gb = 0;
};

const std::vector<ModelSpec>& known_models();
const std::vector<DeviceSpec>& known_devices();
// Throw ConfigError listing the known names.
ModelSpec find_model(const std::string& name);
DeviceSpec find_device(const std::string& name);

Profile synthesize_profile(const ModelSpec& model, const DeviceSpec& device, int microbatch_size);

}  // namespace bw::plan
