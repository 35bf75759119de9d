#include "runtime/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "runtime/optimizer.h"

namespace bw::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The parameter's storage gets room again (after release) and `values` are written into it
// without touching its version counter, so autograd's saved references stay valid.
void materialize(const torch::Tensor& p, const torch::Tensor& values) {
  auto* impl = p.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(p.numel()) * p.element_size();
  if (impl->nbytes() < bytes) {
    impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
    impl->set_nbytes(bytes);
  }
  auto raw = torch::from_blob(p.data_ptr(), p.sizes(), p.options().requires_grad(false));
  raw.copy_(values.view(p.sizes()));
}

// The parameter's storage becomes the `numel` floats of `flat` at `offset`, without a copy and
// without touching its version counter (autograd's saved references stay valid): the storage
// keeps `flat`'s memory alive until it is released.
void point_into(const torch::Tensor& p, const torch::Tensor& flat, int64_t offset) {
  auto* impl = p.storage().unsafeGetStorageImpl();
  auto* keep = new c10::Storage(flat.storage());
  void* data = static_cast<float*>(flat.data_ptr()) + offset;
  impl->set_data_ptr_noswap(c10::DataPtr(
      data, keep, [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, flat.device()));
  impl->set_nbytes(static_cast<size_t>(p.numel()) * p.element_size());
}

void free_storage(const torch::Tensor& p) { p.storage().unsafeGetStorageImpl()->reset(); }

torch::Tensor flat_grad(const model::Layer& layer) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, p] : layer.parameter_list()) {
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}));
  }
  return torch::cat(parts);
}

}  // namespace

void adamw_update(torch::Tensor param, const torch::Tensor& grad, torch::Tensor exp_avg,
                  torch::Tensor exp_avg_sq, int64_t step, double lr, double weight_decay,
                  const TrainConfig& train) {
  torch::NoGradGuard no_grad;
  if (weight_decay != 0) param.mul_(1 - lr * weight_decay);
  const double bias_correction1 = 1 - std::pow(train.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(train.beta2, static_cast<double>(step));
  exp_avg.mul_(train.beta1).add_(grad, 1 - train.beta1);
  exp_avg_sq.mul_(train.beta2).addcmul_(grad, grad, 1 - train.beta2);
  auto denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(kAdamEps);
  const double step_size = lr / bias_correction1;
  param.addcdiv_(exp_avg, denom, -step_size);
}

StageShards::StageShards(const RunLayout& layout, int rank, ModelState& state,
                         const std::vector<int>& layers, uint64_t seed, Transport* group)
    : layout_(layout), rank_(rank), state_(state), group_(group) {
  const auto& model = state_.model();
  for (int l : layers) {
    BW_CHECK(state_.holds_shard(l), "rank {} runs segmented layer {} but holds no shard of it",
             rank, l);
    const int64_t n = model::num_parameters(model, l);
    const auto want = layout.shard_range(rank, n);
    const auto& sh = state_.shard(l);
    BW_CHECK(sh.begin == want.first && sh.end == want.second,
             "rank {} holds [{}, {}) of layer {} but runs [{}, {})", rank, sh.begin, sh.end, l,
             want.first, want.second);
    auto layer = model::build_layer(model, l, seed);
    for (const auto& [name, p] : layer->parameter_list()) {
      if (group_ != nullptr) {
        free_storage(p);
      }
    }
    compute_[l] = layer;
    if (group_ == nullptr) gather(l);
    for (auto& seg : layout.segments(l, n)) {
      if (std::find(seg.ranks.begin(), seg.ranks.end(), rank) == seg.ranks.end()) continue;
      int64_t offset = 0;
      for (const auto& [name, p] : layer->parameter_list()) {
        const int64_t b = std::max(offset, seg.begin), e = std::min(offset + p.numel(), seg.end);
        if (b < e) pieces_.push_back({l, b, e, p.dim() >= 2});
        offset += p.numel();
      }
      segments_.push_back(std::move(seg));
    }
  }
}

torch::Tensor StageShards::gather_flat(const torch::Tensor& slice, int layer) {
  const int64_t n = model::num_parameters(state_.model(), layer);
  if (group_ == nullptr) return slice;
  const int w = group_->size();
  const int64_t max = split_range(n, w, 0).second;  // the first pieces are the largest
  if (n % w == 0) {  // equal pieces: gathered straight into the result
    auto out = torch::empty({n}, state_.placement().master());
    group_->allgather(slice.contiguous(), out);
    return out;
  }
  auto in = torch::zeros({max}, state_.placement().master());
  in.narrow(0, 0, slice.numel()).copy_(slice);
  auto out = torch::empty({max * w}, state_.placement().master());
  group_->allgather(in, out);
  std::vector<torch::Tensor> parts;
  for (int j = 0; j < w; ++j) {
    auto [b, e] = split_range(n, w, j);
    parts.push_back(out.narrow(0, j * max, e - b));
  }
  return torch::cat(parts);
}

std::pair<double, double> StageShards::take_comm_ms() {
  const std::pair<double, double> out{gather_ms_, reduce_ms_};
  gather_ms_ = reduce_ms_ = 0;
  return out;
}

void StageShards::gather(int layer) {
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  const auto& params = compute_.at(layer)->parameter_list();
  if (group_ == nullptr) {
    const auto& flat = state_.shard(layer).param;
    int64_t offset = 0;
    for (const auto& [name, p] : params) {
      materialize(p, flat.narrow(0, offset, p.numel()));
      offset += p.numel();
    }
    return;
  }
  // All-gathered into one buffer that the parameters then point into: the layer exists once.
  // Uneven pieces arrive padded to the largest and are closed up in place, in rank order (each
  // piece moves towards the front, so memmove never overwrites what is still to move).
  const int64_t n = model::num_parameters(state_.model(), layer);
  const int w = group_->size();
  const int64_t max = split_range(n, w, 0).second;
  auto flat = torch::empty({max * w}, state_.placement().master());
  const auto& slice = state_.shard(layer).param;
  if (slice.numel() == max) {
    group_->allgather(slice.contiguous(), flat);
  } else {
    auto in = torch::zeros({max}, state_.placement().master());
    in.narrow(0, 0, slice.numel()).copy_(slice);
    group_->allgather(in, flat);
  }
  if (n % w != 0 && !flat.device().is_cpu()) {
    for (int j = 1; j < w; ++j) {  // on a GPU: device copies (the ranges may overlap)
      const auto [b, e] = split_range(n, w, j);
      flat.narrow(0, b, e - b).copy_(flat.narrow(0, j * max, e - b).clone());
    }
  } else if (n % w != 0) {
    float* data = flat.data_ptr<float>();
    for (int j = 1; j < w; ++j) {
      const auto [b, e] = split_range(n, w, j);
      std::memmove(data + b, data + j * max, static_cast<size_t>(e - b) * sizeof(float));
    }
  }
  int64_t offset = 0;
  for (const auto& [name, p] : params) {
    point_into(p, flat, offset);
    offset += p.numel();
  }
  gather_ms_ += ms_since(t0);
}

void StageShards::prepare_gradients(int layer) {
  BW_CHECK(group_ != nullptr, "gradient buffer on a stage of one rank");
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  const int64_t n = model::num_parameters(state_.model(), layer);
  auto& flat = grad_buffer_[layer];
  flat = torch::zeros({n}, state_.placement().master());
  int64_t offset = 0;
  for (const auto& [name, p] : compute_.at(layer)->parameter_list()) {
    p.mutable_grad() = flat.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  reduce_ms_ += ms_since(t0);
}

void StageShards::release(int layer) {
  if (group_ == nullptr) return;
  for (const auto& [name, p] : compute_.at(layer)->parameter_list()) free_storage(p);
}

void StageShards::reduce_gradients(int layer) {
  BW_CHECK(group_ != nullptr, "gradient reduction on a stage of one rank");
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  auto& layer_ref = *compute_.at(layer);
  auto it = grad_buffer_.find(layer);
  BW_CHECK(it != grad_buffer_.end(), "layer {}: gradients reduced before prepare_gradients", layer);
  // Autograd accumulated into the buffer in place, unless it replaced a parameter's gradient.
  int64_t offset = 0;
  for (const auto& [name, p] : layer_ref.parameter_list()) {
    const auto& g = p.grad();
    if (g.defined() && g.data_ptr() != it->second.data_ptr<float>() + offset) {
      it->second.narrow(0, offset, p.numel()).copy_(g.reshape({-1}));
    }
    offset += p.numel();
    p.mutable_grad() = torch::Tensor();
  }
  auto flat = std::move(it->second);
  grad_buffer_.erase(it);
  group_->allreduce_sum(flat);
  auto& sh = state_.shard(layer);
  sh.grad.add_(flat.narrow(0, sh.begin, sh.size()));
  reduce_ms_ += ms_since(t0);
}

void StageShards::zero_gradients() {
  for (auto& [l, layer] : compute_) {
    state_.shard(l).grad.zero_();
    for (const auto& [name, p] : layer->parameter_list()) {
      if (group_ != nullptr) {
        p.mutable_grad() = torch::Tensor();
      } else if (p.grad().defined()) {
        p.mutable_grad().zero_();
      } else {
        p.mutable_grad() = torch::zeros_like(p);
      }
    }
  }
}

void StageShards::collect_gradients() {
  if (group_ != nullptr) return;
  torch::NoGradGuard no_grad;
  for (auto& [l, layer] : compute_) state_.shard(l).grad.copy_(flat_grad(*layer));
}

double StageShards::counted_sq_norm() const {
  double sq = 0;
  for (const auto& seg : segments_) {
    if (seg.ranks.front() != rank_) continue;
    const auto& sh = state_.shards().at(seg.layer);
    sq += sum_of_squares(sh.grad.narrow(0, seg.begin - sh.begin, seg.end - seg.begin));
  }
  return sq;
}

void StageShards::apply(double clip, double lr, const TrainConfig& train) {
  torch::NoGradGuard no_grad;
  if (clip != 1.0) {
    for (auto& [l, layer] : compute_) state_.shard(l).grad.mul_(clip);
  }
  for (const auto& piece : pieces_) {
    auto& sh = state_.shard(piece.layer);
    const int64_t at = piece.begin - sh.begin, k = piece.end - piece.begin;
    adamw_update(sh.param.narrow(0, at, k), sh.grad.narrow(0, at, k), sh.exp_avg.narrow(0, at, k),
                 sh.exp_avg_sq.narrow(0, at, k), sh.step + 1, lr,
                 piece.decay ? train.weight_decay : 0.0, train);
  }
  for (auto& [l, layer] : compute_) {
    ++state_.shard(l).step;
    if (group_ == nullptr) gather(l);
  }
}

NamedTensors StageShards::full_parameters(int layer) {
  auto flat = gather_flat(state_.shard(layer).param, layer);
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& [name, p] : compute_.at(layer)->parameter_list()) {
    out.emplace_back(checkpoint_tensor_name(layer, name),
                     flat.narrow(0, offset, p.numel()).view(p.sizes()).clone());
    offset += p.numel();
  }
  return out;
}

NamedTensors StageShards::full_optimizer_state(int layer) {
  const auto& sh = state_.shard(layer);
  auto avg = gather_flat(sh.exp_avg, layer);
  auto avg_sq = gather_flat(sh.exp_avg_sq, layer);
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& [name, p] : compute_.at(layer)->parameter_list()) {
    const auto base = checkpoint_tensor_name(layer, name);
    out.emplace_back(base + ".exp_avg", avg.narrow(0, offset, p.numel()).view(p.sizes()).clone());
    out.emplace_back(base + ".exp_avg_sq",
                     avg_sq.narrow(0, offset, p.numel()).view(p.sizes()).clone());
    out.emplace_back(base + ".step", torch::tensor(sh.step, torch::kInt64));
    offset += p.numel();
  }
  return out;
}

void StageShards::load(int layer, const std::map<std::string, torch::Tensor>& params,
                       const std::map<std::string, torch::Tensor>* optimizer_state) {
  torch::NoGradGuard no_grad;
  auto& sh = state_.shard(layer);
  auto find = [&](const std::map<std::string, torch::Tensor>& m, const std::string& name,
                  const torch::Tensor& like) {
    auto it = m.find(name);
    if (it == m.end()) throw ConfigError(fmt::format("the checkpoint has no tensor '{}'", name));
    if (it->second.numel() != like.numel()) {
      throw ConfigError(fmt::format("checkpoint tensor '{}' has {} values, the model needs {}",
                                    name, it->second.numel(), like.numel()));
    }
    return it->second.reshape({-1});
  };
  std::vector<torch::Tensor> ps, ms, vs;
  int64_t step = 0;
  for (const auto& [name, p] : compute_.at(layer)->parameter_list()) {
    const auto base = checkpoint_tensor_name(layer, name);
    ps.push_back(find(params, base, p));
    if (optimizer_state != nullptr) {
      ms.push_back(find(*optimizer_state, base + ".exp_avg", p));
      vs.push_back(find(*optimizer_state, base + ".exp_avg_sq", p));
      auto it = optimizer_state->find(base + ".step");
      if (it == optimizer_state->end() || it->second.numel() != 1 ||
          it->second.scalar_type() != torch::kInt64) {
        throw ConfigError(fmt::format("optimizer state tensor '{}.step' must be one int64", base));
      }
      step = it->second.item<int64_t>();
    }
  }
  sh.param.copy_(torch::cat(ps).narrow(0, sh.begin, sh.size()));
  if (optimizer_state != nullptr) {
    sh.exp_avg.copy_(torch::cat(ms).narrow(0, sh.begin, sh.size()));
    sh.exp_avg_sq.copy_(torch::cat(vs).narrow(0, sh.begin, sh.size()));
    sh.step = step;
  }
  if (group_ == nullptr) gather(layer);
}

std::map<std::string, std::pair<uint64_t, uint64_t>> StageShards::segment_checksums() const {
  std::map<std::string, std::pair<uint64_t, uint64_t>> out;
  for (const auto& seg : segments_) {
    const auto& sh = state_.shards().at(seg.layer);
    const int64_t at = seg.begin - sh.begin, k = seg.end - seg.begin;
    out[fmt::format("{}/{}-{}", seg.layer, seg.begin, seg.end)] = {
        fnv1a({sh.param.narrow(0, at, k)}),
        fnv1a({sh.exp_avg.narrow(0, at, k), sh.exp_avg_sq.narrow(0, at, k),
               torch::tensor(sh.step, torch::kInt64)})};
  }
  return out;
}

}  // namespace bw::runtime
