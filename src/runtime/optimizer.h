// The optimizer of a worker: AdamW (Loshchilov & Hutter, ICLR'19; torch::optim::AdamW) over the
// named parameters of the layers this worker holds, with the learning-rate schedule (linear
// warm-up, then cosine decay to min_lr) and global-norm gradient clipping of docs/design.md "Runtime".
//
// Weight decay applies to matrices (dim >= 2) only; biases, LayerNorm parameters and other
// vectors get none (GPT-2 / nanoGPT practice). The global gradient norm needs a reduction over
// every layer of the model counted once; the runtime computes it (grad_sq_norm per worker, summed
// across devices) and passes clip_scale() of the total to step(), so replicas of a layer apply
// bit-identical updates.
//
// State (exp_avg, exp_avg_sq, step per parameter name) can be read and written, for checkpoints
// and state transfer: an optimizer restored from get_state() continues bitwise like the original.
//
// Thread-safety: none; one worker thread owns an Optimizer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config.h"

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace bw::runtime {

inline constexpr double kAdamEps = 1e-8;
inline constexpr double kClipEps = 1e-6;  // as in torch.nn.utils.clip_grad_norm_

// Learning rate for 0-based step `step`: lr * (step + 1) / warmup_steps during warm-up, then
// min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2 with p = (step - warmup) / (steps - warmup)
// clamped to [0, 1]; min_lr from `steps` on.
double lr_at(int step, const TrainConfig& config);

// Factor to multiply every gradient by: min(1, max_norm / (sqrt(total_sq_norm) + 1e-6)); 1 when
// max_norm is 0 (no clipping).
double clip_scale(double total_sq_norm, double max_norm);

// Sum of the squares of t's entries in double: each square exact (a float's square fits a
// double's mantissa), summed in a fixed order whatever the thread count. A contiguous float32
// tensor on the CPU is read once, with no copy; any other goes through t.to(double).pow(2).sum().
double sum_of_squares(const at::Tensor& t);

// Sum of squared gradient entries of `params` (undefined gradients count 0; sum_of_squares of
// each, in order): a worker's share of the global squared norm.
double grad_sq_norm(const std::vector<at::Tensor>& params);

struct ParamState {
  at::Tensor exp_avg;     // same shape as the parameter, float
  at::Tensor exp_avg_sq;  // same shape as the parameter, float
  int64_t step = 0;          // updates applied so far (0 = no state yet)
};

class Optimizer {
 public:
  // Names must be unique; the tensors are the live parameters (requires_grad).
  Optimizer(std::vector<std::pair<std::string, at::Tensor>> params, const TrainConfig& config);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Multiplies gradients by grad_scale (skipped when it is exactly 1), sets the learning rate to
  // lr_at(step) and applies one AdamW update. Returns the learning rate used.
  double step(int step, double grad_scale = 1.0);
  void zero_grad();

  const std::vector<std::pair<std::string, at::Tensor>>& params() const { return params_; }

  // Deep copies of the state by parameter name (parameters never updated are absent).
  std::map<std::string, ParamState> get_state() const;
  // Replaces the state of the named parameters (deep copies). ConfigError for a name this
  // optimizer does not hold or a shape that differs from the parameter's.
  void set_state(const std::map<std::string, ParamState>& state);

  // The state as flat tensors for a safetensors file: "{name}.exp_avg", "{name}.exp_avg_sq" and
  // "{name}.step" (int64 scalar), in parameter order.
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Inverse of state_tensors(); tensors of parameters this optimizer does not hold are ignored
  // (a checkpoint holds every layer), a held parameter missing from `tensors` is a ConfigError.
  void load_state_tensors(const std::map<std::string, at::Tensor>& tensors);

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  TrainConfig train_;
  std::unique_ptr<torch::optim::AdamW> adamw_;  // null when there are no parameters
};

}  // namespace bw::runtime
