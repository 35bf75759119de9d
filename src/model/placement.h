// Where a worker's tensors live and in which dtypes (docs/runtime.md "Precision"): one value that
// the model state, the stage shards and the executor share, so no code creates a tensor with its
// device or dtype implied.
//
// Precisions (train.precision):
//   fp32  everything in float32.
//   bf16  mixed precision as PyTorch's autocast defines it: the layers hold float32 parameters
//         (the master weights), matmuls and attention run in bfloat16 under autocast, the
//         activations at every layer boundary are bfloat16 (so what travels between stages, and
//         what a microbatch in flight keeps, is half the bytes), the loss and its softmax
//         cross-entropy are float32, parameter gradients arrive, accumulate and are reduced in
//         float32, and AdamW's moments, checkpoints and state transfer are float32. The single
//         process runs the same casts at the same layer boundaries, so a pipeline computes the
//         same function as one process whatever its cut.
//
// Thread-safety: Placement is a plain value. AutocastGuard sets thread-local state: use it on
// the thread that runs the forward.
#pragma once

#include <torch/types.h>

#include <string>

#include "shape/shape.h"

namespace bw::model {

// The precision is the shape's (shape/shape.h): "fp32" | "bf16", parse_precision throws
// ConfigError naming the choices.
using shape::Precision;
using shape::parse_precision;
using shape::precision_name;

struct Placement {
  torch::Device device = torch::kCPU;
  Precision precision = Precision::kFp32;
  torch::ScalarType compute_dtype = torch::kFloat;  // autocast dtype; activations between layers
  torch::ScalarType param_dtype = torch::kFloat;    // parameters the layers hold
  torch::ScalarType master_dtype = torch::kFloat;   // master weights, AdamW moments, the wire

  static Placement cpu(Precision precision = Precision::kFp32);
  // On `device` (cpu or cuda:i): the same dtypes as on the CPU for each precision.
  static Placement on(torch::Device device, Precision precision);
  bool cuda() const { return device.is_cuda(); }
  bool mixed() const { return compute_dtype != param_dtype; }
  torch::TensorOptions master() const { return torch::TensorOptions(device).dtype(master_dtype); }
  torch::TensorOptions params() const { return torch::TensorOptions(device).dtype(param_dtype); }
  torch::TensorOptions activations() const {
    return torch::TensorOptions(device).dtype(compute_dtype);
  }
  // Bytes of one activation element at a layer boundary.
  int64_t activation_element_bytes() const;
};

// Whether this machine's CPU has native bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16).
// Without them bf16 still runs, emulated, and slower than fp32: the runtime says so.
bool cpu_has_native_bf16();

// Autocast on for the placement's device at its compute dtype while alive; nothing for fp32.
// Nested guards are allowed; the weight-cast cache is cleared when the outermost one ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(const Placement& placement);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace bw::model
