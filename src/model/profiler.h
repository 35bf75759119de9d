// The layer profiler behind `breakwater profile measure`: times each GPT layer's forward and
// backward on this machine and measures the memory it keeps, producing the profile JSON the
// planner reads (docs/profiles.md; docs/design.md "Inputs"). The planner and the simulator then
// predict step times from these per-layer figures (Oobleck §4.1 profiles layers the same way).
//
// What is measured, per layer, at one microbatch size (docs/profiles.md gives the definitions):
//   forward_ms          median wall time of forward (with autograd recording); the head layer's
//                       forward includes the loss, as the last chunk of a pipeline computes it
//   backward_ms         median wall time of the full backward (input and weight gradients)
//   backward_input_ms   median wall time of the backward for the input gradient only (0 for the
//                       embedding, whose input is token ids)
//   backward_weight_ms  max(0, backward_ms - backward_input_ms): the zero-bubble W pass
//   activation_bytes    kept per microbatch until backward: measured from the allocator (bytes
//                       allocated by forward and still held when it returns, minus its output,
//                       plus its input, which every layer here saves), so a chunk's activation
//                       memory is the sum over its layers; with no allocator statistics, the
//                       analytic count of saved tensors (activation_bytes_formula)
//   output_bytes        bytes of the activation sent to the next layer (0 for the head)
//   param_bytes         bytes of the layer's parameters (float32)
// Times are medians over `repeats` runs after `warmup` unrecorded runs, on one thread unless
// told otherwise (a worker runs train.threads_per_worker threads).
//
// Thread-safety: measure_profile sets torch's intra-op thread count; run one at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/placement.h"

namespace bw::model {

struct ProfileOptions {
  std::string model = "small";  // named_config name
  int vocab_size = 256;         // 256 for byte-level text, 50257 for GPT-2 .bin tokens
  int microbatch_size = 4;
  int seq_len = 0;  // 0 = the model's
  int repeats = 5;
  int warmup = 2;
  int threads = 1;
  uint64_t seed = 1234;
  // fp32, or bf16 mixed precision as the runtime runs it (model/placement.h): each layer under
  // autocast, bf16 activations between layers, fp32 parameters.
  Precision precision = Precision::kFp32;
};

struct LayerMeasurement {
  std::string name;  // "embedding", "block1", ..., "head"
  double forward_ms = 0;
  double backward_ms = 0;
  double backward_input_ms = 0;
  double backward_weight_ms = 0;
  int64_t activation_bytes = 0;
  int64_t output_bytes = 0;
  int64_t param_bytes = 0;
};

struct MeasuredProfile {
  std::string model;
  int microbatch_size = 0;
  int seq_len = 0;
  std::string device;                // "cpu (1 thread)"
  bool activation_measured = false;  // false: activation_bytes from the formula
  std::vector<LayerMeasurement> layers;
};

// ConfigError for a bad option (unknown model, sizes < 1).
MeasuredProfile measure_profile(const ProfileOptions& options);

// Bytes of the tensors layer `layer_index` saves for backward for one microbatch, counted from
// the layer's ops (float32; no dropout): embedding 8*b*s (token ids); block
// 4*(16*b*s*h + a*b*s^2) (LayerNorm inputs 2bsh, attention input bsh, q/k/v 3bsh, softmax
// a*b*s^2, projection input bsh, MLP input bsh, GELU input and output 8bsh; after Korthikanti et
// al., MLSys'23, §4.1, without dropout masks); head 4*(2*b*s*h + b*s*V) + 8*b*s (LayerNorm and
// LM-head inputs, log-softmax of the loss, targets).
int64_t activation_bytes_formula(const GptConfig& config, int layer_index, int microbatch_size,
                                 Precision precision = Precision::kFp32);

// The planner's profile JSON: {"model", "microbatch_size", "device", "layers": [{"name",
// "forward_ms", "backward_ms", "backward_input_ms", "backward_weight_ms", "activation_bytes",
// "output_bytes", "param_bytes"}]}.
nlohmann::json to_profile_json(const MeasuredProfile& profile);

}  // namespace bw::model
