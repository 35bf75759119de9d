// Layer profiler (see profiler.h).
#include "model/profiler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/check.h"
#include "core/error.h"

namespace bw::model {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  BW_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Bytes in use by malloc (all arenas, including mmapped chunks), or -1 without glibc.
int64_t heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = ::mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
#else
  return -1;
#endif
}

std::string layer_name(const GptConfig& c, int i) {
  switch (layer_kind(c, i)) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kBlock:
      return fmt::format("block{}", i);
    case LayerKind::kHead:
      return "head";
  }
  return "?";
}

int64_t nbytes(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

class LayerBench {
 public:
  LayerBench(const GptConfig& c, int index, int mbs, uint64_t seed, const Placement& placement)
      : kind_(layer_kind(c, index)), layer_(build_layer(c, index, seed)), placement_(placement) {
    torch::NoGradGuard no_grad;
    auto gen_tokens = [&] { return torch::randint(c.vocab_size, {mbs, c.seq_len}, torch::kInt64); };
    if (kind_ == LayerKind::kEmbedding) {
      input_ = gen_tokens();
    } else {
      // What arrives from the previous layer: activations in the compute dtype.
      input_ = torch::randn({mbs, c.seq_len, c.d_model}, placement_.activations())
                   .set_requires_grad(true);
    }
    if (kind_ == LayerKind::kHead) targets_ = gen_tokens();
    for (auto& [name, p] : named_parameters(*layer_)) params_.push_back(p);
    torch::Tensor out = run_forward();
    grad_out_ = torch::randn_like(out);
  }

  // Forward as the runtime runs it (runtime::Executor::run_layer): under autocast, a non-head
  // output in the compute dtype; the head's includes the loss.
  torch::Tensor run_forward() {
    torch::Tensor out;
    {
      AutocastGuard autocast(placement_);
      out = layer_->forward(input_);
    }
    if (kind_ == LayerKind::kHead) return lm_loss(out, targets_);
    if (out.scalar_type() != placement_.compute_dtype) out = out.to(placement_.compute_dtype);
    return out;
  }

  void backward_all(const torch::Tensor& out) { out.backward(grad_out_); }

  void backward_input(const torch::Tensor& out) {
    torch::autograd::grad({out}, {input_}, {grad_out_}, /*retain_graph=*/false);
  }

  bool has_input_grad() const { return kind_ != LayerKind::kEmbedding; }

  void zero_grads() {
    for (auto& p : params_) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    if (input_.requires_grad() && input_.grad().defined()) input_.mutable_grad().zero_();
  }

  // Allocator bytes held after forward, minus the output, plus the (saved) input; -1 if the
  // allocator gives no statistics.
  int64_t measured_activation_bytes() {
    zero_grads();
    int64_t before = heap_in_use();
    if (before < 0) return -1;
    torch::Tensor out = run_forward();
    int64_t after = heap_in_use();
    int64_t kept = after - before - nbytes(out) + nbytes(input_);
    backward_all(out);
    return std::max<int64_t>(kept, 0);
  }

  int64_t output_bytes() const { return kind_ == LayerKind::kHead ? 0 : nbytes(grad_out_); }
  int64_t param_bytes() const {
    int64_t b = 0;
    for (const auto& p : params_) b += nbytes(p);
    return b;
  }

 private:
  LayerKind kind_;
  std::shared_ptr<Layer> layer_;
  Placement placement_;
  torch::Tensor input_, targets_, grad_out_;
  std::vector<torch::Tensor> params_;
};

}  // namespace

int64_t activation_bytes_formula(const GptConfig& c, int layer_index, int microbatch_size,
                                 Precision precision) {
  // The model's shape (shape/shape.h), fused attention (no score matrix is kept).
  const auto bytes = shape_of(c).activation_bytes_per_sample(
      layer_index, {precision, shape::Recompute::kNone, shape::Attention::kFused});
  return static_cast<int64_t>(microbatch_size * bytes);
}

MeasuredProfile measure_profile(const ProfileOptions& o) {
  if (o.microbatch_size < 1 || o.repeats < 1 || o.warmup < 0 || o.threads < 1 || o.seq_len < 0) {
    throw ConfigError(
        fmt::format("profile options must have microbatch size >= 1 (got {}), "
                    "repeats >= 1 (got {}), warm-up >= 0 (got {}), threads >= 1 "
                    "(got {}) and seq_len >= 0 (got {})",
                    o.microbatch_size, o.repeats, o.warmup, o.threads, o.seq_len));
  }
  GptConfig c = named_config(o.model, o.vocab_size);
  if (o.seq_len > 0) c.seq_len = o.seq_len;
  torch::set_num_threads(o.threads);

  MeasuredProfile result;
  result.model = o.model;
  result.microbatch_size = o.microbatch_size;
  result.seq_len = c.seq_len;
  const Placement placement = Placement::cpu(o.precision);
  result.device = fmt::format("cpu ({} thread{}, {})", o.threads, o.threads == 1 ? "" : "s",
                              precision_name(o.precision));
  result.activation_measured = heap_in_use() >= 0;
  for (int i = 0; i < num_layers(c); ++i) {
    LayerBench bench(c, i, o.microbatch_size, o.seed, placement);
    for (int w = 0; w < o.warmup; ++w) bench.backward_all(bench.run_forward());
    std::vector<double> fwd, bwd, bwd_in;
    for (int r = 0; r < o.repeats; ++r) {
      bench.zero_grads();
      auto t0 = Clock::now();
      torch::Tensor out = bench.run_forward();
      fwd.push_back(ms_since(t0));
      t0 = Clock::now();
      bench.backward_all(out);
      bwd.push_back(ms_since(t0));
      if (bench.has_input_grad()) {
        out = bench.run_forward();
        t0 = Clock::now();
        bench.backward_input(out);
        bwd_in.push_back(ms_since(t0));
      }
    }
    LayerMeasurement m;
    m.name = layer_name(c, i);
    m.forward_ms = median(fwd);
    m.backward_ms = median(bwd);
    m.backward_input_ms = bwd_in.empty() ? 0.0 : median(bwd_in);
    m.backward_weight_ms = std::max(0.0, m.backward_ms - m.backward_input_ms);
    int64_t act = result.activation_measured ? bench.measured_activation_bytes() : -1;
    m.activation_bytes = act >= 0 ? act : activation_bytes_formula(c, i, o.microbatch_size, o.precision);
    m.output_bytes = bench.output_bytes();
    m.param_bytes = bench.param_bytes();
    result.layers.push_back(m);
  }
  return result;
}

nlohmann::json to_profile_json(const MeasuredProfile& p) {
  nlohmann::json doc;
  doc["model"] = p.model;
  doc["microbatch_size"] = p.microbatch_size;
  doc["device"] = p.device;
  doc["layers"] = nlohmann::json::array();
  for (const auto& l : p.layers) {
    doc["layers"].push_back({{"name", l.name},
                             {"forward_ms", l.forward_ms},
                             {"backward_ms", l.backward_ms},
                             {"backward_input_ms", l.backward_input_ms},
                             {"backward_weight_ms", l.backward_weight_ms},
                             {"activation_bytes", l.activation_bytes},
                             {"output_bytes", l.output_bytes},
                             {"param_bytes", l.param_bytes}});
  }
  return doc;
}

}  // namespace bw::model
