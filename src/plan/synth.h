// Analytic profiles for paper-scale models (GPT-3 family, BERT-large) on named devices.
//
// A transformer block of hidden size h at sequence length s and microbatch b does
// 24*b*s*h^2 + 4*b*s^2*h forward FLOPs (Narayanan et al., SC'21), backward twice that; time is
// FLOPs / (peak rate * efficiency). Parameters 12*h^2 + 13*h per block; activations kept for
// backward s*b*h*(34 + 5*a*s/h) bytes in fp16 (Korthikanti et al., 2022); the block's output
// s*b*h*2 bytes. Embedding and head layers are added at the ends. Formulas in docs/profiles.md.
#pragma once

#include <string>
#include <vector>

#include "plan/profile.h"

namespace bw::plan {

struct ModelSpec {
  std::string name;
  int num_blocks = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
};

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
