// AdamW wrapper, LR schedule and clipping (see optimizer.h).
#include "runtime/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <torch/torch.h>

#include "core/check.h"
#include "core/error.h"

namespace bw::runtime {
namespace {

// torch::optim keys its per-parameter state by the parameter's TensorImpl.
void* state_key(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

std::string shape_of(const torch::Tensor& t) {
  if (!t.defined()) return "none";
  return fmt::format("[{}]", fmt::join(t.sizes().vec(), ", "));
}

}  // namespace

double lr_at(int step, const TrainConfig& c) {
  if (step < c.warmup_steps) return c.lr * (step + 1) / c.warmup_steps;
  if (step >= c.steps) return c.min_lr;
  double span = std::max(1, c.steps - c.warmup_steps);
  double progress = std::clamp((step - c.warmup_steps) / span, 0.0, 1.0);
  return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double clip_scale(double total_sq_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  double norm = std::sqrt(std::max(0.0, total_sq_norm));
  return std::min(1.0, max_norm / (norm + kClipEps));
}

double sum_of_squares(const torch::Tensor& t) {
  if (!t.is_cpu() || t.scalar_type() != torch::kFloat || !t.is_contiguous()) {
    return t.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  // t.to(double).pow(2).sum() wrote two double copies of every gradient and read them back: 16
  // ms a step for the 2-block Llama at gpt2-124m's width, where eager PyTorch's clip_grad_norm_
  // (fp32 foreach norm) takes 2 ms. This reads the floats once. Fixed blocks, each summed in
  // kLanes independent lanes (which the compiler vectorises without reassociating), then added
  // in block order: the same bits on any number of threads.
  constexpr int64_t kBlock = int64_t{1} << 16;
  constexpr int kLanes = 16;
  const float* data = t.const_data_ptr<float>();
  const int64_t n = t.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const float* p = data + b * kBlock;
      const int64_t m = std::min(kBlock, n - b * kBlock);
      double lane[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= m; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const double x = p[i + j];
          lane[j] += x * x;
        }
      }
      for (; i < m; ++i) {
        const double x = p[i];
        lane[i % kLanes] += x * x;
      }
      for (int width = kLanes / 2; width > 0; width /= 2) {
        for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
      }
      partial[static_cast<size_t>(b)] = lane[0];
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

double grad_sq_norm(const std::vector<torch::Tensor>& params) {
  double total = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) total += sum_of_squares(p.grad());
  }
  return total;
}

Optimizer::Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params,
                     const TrainConfig& config)
    : params_(std::move(params)), train_(config) {
  std::set<std::string> names;
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& [name, p] : params_) {
    BW_CHECK(names.insert(name).second, "duplicate parameter name '{}'", name);
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  if (params_.empty()) return;
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(config.lr)
            .betas(std::make_tuple(config.beta1, config.beta2))
            .eps(kAdamEps)
            .weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, options(config.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  adamw_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(config.lr));
}

Optimizer::~Optimizer() = default;

double Optimizer::step(int step, double grad_scale) {
  double lr = lr_at(step, train_);
  if (!adamw_) return lr;
  torch::NoGradGuard no_grad;
  if (grad_scale != 1.0) {
    for (auto& [name, p] : params_) {
      if (p.grad().defined()) p.mutable_grad().mul_(grad_scale);
    }
  }
  for (auto& group : adamw_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  adamw_->step();
  return lr;
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

std::map<std::string, ParamState> Optimizer::get_state() const {
  std::map<std::string, ParamState> out;
  if (!adamw_) return out;
  const auto& state = adamw_->state();
  for (const auto& [name, p] : params_) {
    auto it = state.find(state_key(p));
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out[name] = ParamState{s.exp_avg().clone(), s.exp_avg_sq().clone(), s.step()};
  }
  return out;
}

void Optimizer::set_state(const std::map<std::string, ParamState>& state) {
  std::map<std::string, torch::Tensor> by_name(params_.begin(), params_.end());
  for (const auto& [name, s] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw ConfigError(
          fmt::format("optimizer state for '{}', a parameter this worker does not "
                      "hold ({} parameters)",
                      name, params_.size()));
    }
    for (const auto* t : {&s.exp_avg, &s.exp_avg_sq}) {
      if (!t->defined() || t->sizes() != it->second.sizes()) {
        throw ConfigError(
            fmt::format("optimizer state of '{}' has shape {} but the parameter "
                        "has shape {}",
                        name, shape_of(*t), shape_of(it->second)));
      }
    }
    if (s.step < 0) {
      throw ConfigError(fmt::format("optimizer state of '{}' has step {} < 0", name, s.step));
    }
    auto& map = adamw_->state();
    auto key = state_key(it->second);
    if (s.step == 0) {
      map.erase(key);
      continue;
    }
    auto ps = std::make_unique<torch::optim::AdamWParamState>();
    ps->step(s.step);
    ps->exp_avg(s.exp_avg.detach().clone().to(it->second.options()));
    ps->exp_avg_sq(s.exp_avg_sq.detach().clone().to(it->second.options()));
    map[key] = std::move(ps);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto state = get_state();
  for (const auto& [name, p] : params_) {
    auto it = state.find(name);
    ParamState s = it != state.end() ? it->second
                                     : ParamState{torch::zeros_like(p).detach(),
                                                  torch::zeros_like(p).detach(), 0};
    out.emplace_back(name + ".exp_avg", s.exp_avg);
    out.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq);
    out.emplace_back(name + ".step", torch::tensor(s.step, torch::kInt64));
  }
  return out;
}

void Optimizer::load_state_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  std::map<std::string, ParamState> state;
  for (const auto& [name, p] : params_) {
    auto get = [&](const std::string& suffix) {
      auto it = tensors.find(name + suffix);
      if (it == tensors.end()) {
        throw ConfigError(fmt::format("optimizer state has no tensor '{}{}'", name, suffix));
      }
      return it->second;
    };
    torch::Tensor step = get(".step");
    if (step.numel() != 1 || step.scalar_type() != torch::kInt64) {
      throw ConfigError(fmt::format("optimizer state tensor '{}.step' must be one int64", name));
    }
    state[name] = ParamState{get(".exp_avg"), get(".exp_avg_sq"), step.item<int64_t>()};
  }
  set_state(state);
}

}  // namespace bw::runtime
