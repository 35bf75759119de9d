#include "forecast/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "plan/synth.h"

namespace bw::forecast {

ConstantModel::ConstantModel(double step_ms, double samples_per_step, int min_nodes,
                             double state_bytes_per_node)
    : step_ms_(step_ms),
      samples_(samples_per_step),
      min_nodes_(min_nodes),
      state_bytes_(state_bytes_per_node) {
  if (!(step_ms > 0) || !(samples_per_step > 0)) {
    throw ConfigError(fmt::format("a constant model needs step_ms > 0 and samples > 0 (got {}, {})",
                                  step_ms, samples_per_step));
  }
}

std::optional<double> ConstantModel::step_ms(int nodes, Arrangement) {
  if (nodes < std::max(min_nodes_, 1)) return std::nullopt;
  return step_ms_;
}

TableModel::TableModel(std::map<int, double> step_ms_by_nodes, double samples_per_step,
                       double state_bytes_per_node, int min_nodes)
    : table_(std::move(step_ms_by_nodes)),
      samples_(samples_per_step),
      state_bytes_(state_bytes_per_node),
      min_nodes_(min_nodes) {
  if (table_.empty()) throw ConfigError("a table model needs at least one entry");
  for (const auto& [n, ms] : table_) {
    if (n <= 0 || !(ms > 0)) {
      throw ConfigError(
          fmt::format("table model entry {} nodes -> {} ms: both must be > 0", n, ms));
    }
  }
}

std::optional<double> TableModel::step_ms(int nodes, Arrangement) {
  auto it = table_.upper_bound(nodes);
  if (it == table_.begin()) {
    if (min_nodes_ <= 0 || nodes < min_nodes_) return std::nullopt;
    it = std::next(it);
  }
  const double ms = std::prev(it)->second;
  if (std::isinf(ms)) return std::nullopt;
  return ms;
}

GptSpec gpt3_preset(const std::string& name) {
  // Brown et al., "Language Models are Few-Shot Learners", table 2.1, by parameter count; the
  // planner's table holds the shapes.
  static const std::vector<std::pair<std::string, std::string>> kPresets = {
      {"gpt3-125m", "gpt3-small"}, {"gpt3-350m", "gpt3-medium"}, {"gpt3-760m", "gpt3-large"},
      {"gpt3-1.3b", "gpt3-xl"},    {"gpt3-2.7b", "gpt3-2.7b"},   {"gpt3-6.7b", "gpt3-6.7b"},
      {"gpt3-13b", "gpt3-13b"},    {"gpt3-175b", "gpt3-175b"}};
  std::string known;
  for (const auto& [preset, planner_name] : kPresets) {
    if (name == preset || name == planner_name) {
      GptSpec spec = plan::find_model(planner_name);
      spec.name = preset;
      return spec;
    }
    known += (known.empty() ? "" : ", ") + preset;
  }
  throw ConfigError(fmt::format("unknown model '{}'; choose one of {}", name, known));
}

AnalyticGptModel::AnalyticGptModel(GptSpec spec, AnalyticCluster cluster)
    : spec_(std::move(spec)), cluster_(cluster) {
  spec_.validate();
  if (cluster_.devices_per_node <= 0 || !(cluster_.device_tflops > 0) ||
      !(cluster_.device_memory_gb > 0) || cluster_.microbatches <= 0 ||
      cluster_.microbatch_size <= 0) {
    throw ConfigError(
        "cluster: devices per node, device TFLOP/s, device memory, microbatches and microbatch "
        "size must all be > 0");
  }
  params_ = static_cast<double>(spec_.held_parameters());
  // Forward+backward model FLOPs of one sample (PaLM appendix B).
  const double s = static_cast<double>(spec_.seq_len);
  const double flops = spec_.flops_per_token() * s;
  microbatch_ms_ = flops * cluster_.microbatch_size / (cluster_.device_tflops * 1e12) * 1e3;
  // Memory: the state of the parameters a pipeline holds (the head's copy of the tied embedding
  // too) spread over its devices, plus the stashed block inputs (bf16, full recomputation) of the
  // microbatches in flight on stage 0.
  const shape::ActivationOptions stashed{shape::Precision::kBf16, shape::Recompute::kFull};
  const double act_bytes = static_cast<double>(spec_.n_blocks) *
                           spec_.activation_bytes_per_sample(1, stashed) * cluster_.microbatch_size;
  const double usable = 0.9 * cluster_.device_memory_gb * 1e9 - act_bytes;
  const int g = cluster_.devices_per_node;
  const double state = shape::state_bytes_per_parameter(shape::Precision::kBf16) * params_;
  n0_ = usable > 0 ? std::max(1, static_cast<int>(std::ceil(state / (usable * g)))) : -1;
}

double AnalyticGptModel::samples_per_step() const {
  return static_cast<double>(cluster_.microbatches) * cluster_.microbatch_size;
}

double AnalyticGptModel::pipeline_step_ms(int nodes, int microbatches) const {
  const double stages = static_cast<double>(nodes) * cluster_.devices_per_node;
  return (microbatches + stages - 1) * microbatch_ms_ / stages;
}

double AnalyticGptModel::state_bytes_per_node(int nodes) const {
  // A node of an average-sized pipeline: the model's state over that pipeline's nodes.
  const int per_pipeline = std::max(n0_, 1);
  (void)nodes;
  return shape::state_bytes_per_parameter(shape::Precision::kBf16) * params_ / per_pipeline;
}

std::optional<double> AnalyticGptModel::step_ms(int nodes, Arrangement arrangement) {
  const auto key = std::make_pair(nodes, static_cast<int>(arrangement));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::optional<double> result;
  if (n0_ > 0 && nodes >= n0_) result = step_for(nodes, arrangement);
  memo_[key] = result;
  return result;
}

double AnalyticGptModel::step_for(int nodes, Arrangement arrangement) const {
  const int g = cluster_.devices_per_node;
  // A pipeline has at most one device per layer.
  const int p_max = std::max(n0_, static_cast<int>(spec_.n_blocks) / g);
  const int B = cluster_.microbatches;
  double best = INFINITY;
  if (arrangement == Arrangement::kUniform) {
    for (int p = n0_; p <= std::min(p_max, nodes); ++p) {
      const int k = std::min(nodes / p, B);
      const int per = (B + k - 1) / k;
      best = std::min(best, pipeline_step_ms(p, per));
    }
    return best;
  }
  // Templates: k pipelines covering every node (sizes q and q+1); microbatches split so the
  // slowest pipeline is as fast as possible. A pipeline of P stages finishes b microbatches by
  // time T when (b + P - 1) * m / P <= T, so it takes floor(T * P / m - P + 1) of them; the
  // smallest T whose capacities sum to B is found by bisection.
  int k_min = std::max(1, (nodes + p_max - 1) / p_max);
  const int k_max = nodes / n0_;
  if (k_max >= cluster_.fault_tolerance + 1) k_min = std::max(k_min, cluster_.fault_tolerance + 1);
  for (int k = k_min; k <= k_max; ++k) {
    const int q = nodes / k, r = nodes % k;
    if (q < n0_ || (r > 0 && q + 1 > p_max) || q > p_max) continue;
    auto capacity = [&](double T) {
      auto cap = [&](int p) {
        const double P = static_cast<double>(p) * g;
        return std::max(0.0, std::floor(T * P / microbatch_ms_ - P + 1 + 1e-9));
      };
      return r * cap(q + 1) + (k - r) * cap(q);
    };
    double lo = 0, hi = pipeline_step_ms(q, B);
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      (capacity(mid) >= B ? hi : lo) = mid;
    }
    best = std::min(best, hi);
  }
  // No even cover (e.g. 5 nodes, pipelines of 3..4): leave nodes idle like kUniform does.
  if (!std::isfinite(best)) best = step_for(nodes, Arrangement::kUniform);
  return best;
}

}  // namespace bw::forecast
