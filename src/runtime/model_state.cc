#include "runtime/model_state.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "runtime/device.h"
#include "runtime/hf.h"

namespace bw::runtime {

uint64_t fnv1a(const std::vector<torch::Tensor>& tensors, uint64_t h) {
  for (const auto& t : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

ModelState::ModelState(const TrainConfig& train, model::GptConfig model, uint64_t seed)
    : ModelState(train, std::move(model), seed,
                 model::Placement::cpu(run_precision(train, ClusterConfig{}))) {}

ModelState::ModelState(const TrainConfig& train, model::GptConfig model, uint64_t seed,
                       model::Placement placement)
    : train_(train), model_(std::move(model)), seed_(seed), placement_(placement) {
  for (const auto& tie : model::tied_groups(model_)) {
    for (size_t i = 1; i < tie.members.size(); ++i) {
      tied_copies_.insert(checkpoint_tensor_name(tie.members[i].layer, tie.members[i].name));
    }
  }
}

std::vector<int> ModelState::layers() const {
  std::vector<int> out;
  for (const auto& [l, layer] : layers_) out.push_back(l);
  for (const auto& [l, s] : shards_) out.push_back(l);
  std::sort(out.begin(), out.end());
  return out;
}

std::pair<int64_t, int64_t> ModelState::held_range(int layer) const {
  if (holds(layer)) return {0, model::num_parameters(model_, layer)};
  if (auto it = shards_.find(layer); it != shards_.end()) return {it->second.begin, it->second.end};
  return {0, 0};
}

Shard& ModelState::shard(int layer) {
  auto it = shards_.find(layer);
  BW_CHECK(it != shards_.end(), "layer {} is not held as a shard", layer);
  return it->second;
}

LayerState ModelState::export_range(int layer, int64_t begin, int64_t end) const {
  auto [hb, he] = held_range(layer);
  BW_CHECK(hb <= begin && begin < end && end <= he,
           "export of [{}, {}) of layer {}, which holds [{}, {})", begin, end, layer, hb, he);
  if (holds(layer)) {
    const auto full = export_layer(layer);
    const int64_t k = end - begin;
    return LayerState::join(full.part(LayerState::kParam, begin, k),
                            full.part(LayerState::kExpAvg, begin, k),
                            full.part(LayerState::kExpAvgSq, begin, k), full.adam_step);
  }
  const Shard& s = shards_.at(layer);
  const int64_t off = begin - s.begin, k = end - begin;
  return {torch::cat({s.param.narrow(0, off, k), s.exp_avg.narrow(0, off, k),
                      s.exp_avg_sq.narrow(0, off, k)}),
          s.step};
}

void ModelState::assemble(int layer, int64_t begin, int64_t end, bool whole,
                          const std::vector<std::pair<int64_t, LayerState>>& pieces) {
  const int64_t n = model::num_parameters(model_, layer);
  BW_CHECK(0 <= begin && begin < end && end <= n, "range [{}, {}) of layer {} ({} values)", begin,
           end, layer, n);
  const int64_t k = end - begin;
  auto out = LayerState::empty(k, placement_);
  std::vector<char> covered(static_cast<size_t>(k), 0);
  int64_t step = -1;
  auto put = [&](int64_t at, const LayerState& piece) {
    const int64_t len = piece.values();
    const int64_t b = std::max(at, begin), e = std::min(at + len, end);
    if (b >= e) return;
    for (auto part : {LayerState::kParam, LayerState::kExpAvg, LayerState::kExpAvgSq}) {
      out.part(part, b - begin, e - b).copy_(piece.part(part, b - at, e - b));
    }
    std::fill(covered.begin() + (b - begin), covered.begin() + (e - begin), 1);
    BW_CHECK(step < 0 || step == piece.adam_step, "layer {}: pieces at AdamW steps {} and {}",
             layer, step, piece.adam_step);
    step = piece.adam_step;
  };
  for (const auto& [at, piece] : pieces) put(at, piece);
  auto [hb, he] = held_range(layer);
  if (hb < he && std::max(hb, begin) < std::min(he, end)) {
    const int64_t b = std::max(hb, begin), e = std::min(he, end);
    put(b, export_range(layer, b, e));
  }
  BW_CHECK(std::all_of(covered.begin(), covered.end(), [](char c) { return c != 0; }),
           "layer {}: the pieces do not cover [{}, {})", layer, begin, end);
  if (whole) {
    BW_CHECK(begin == 0 && end == n, "layer {}: a whole layer from [{}, {})", layer, begin, end);
    shards_.erase(layer);
    out.adam_step = step;
    import_layer(layer, out);
    return;
  }
  drop(layer);
  Shard s;
  s.begin = begin;
  s.end = end;
  s.param = out.part(LayerState::kParam).clone();
  s.exp_avg = out.part(LayerState::kExpAvg).clone();
  s.exp_avg_sq = out.part(LayerState::kExpAvgSq).clone();
  s.grad = torch::zeros({k}, placement_.master());
  s.step = step;
  shards_[layer] = std::move(s);
}

void ModelState::invalidate() {
  if (!optimizer_) return;
  for (auto& [name, s] : optimizer_->get_state()) pending_state_[name] = std::move(s);
  optimizer_.reset();
}

void ModelState::add_initial(int layer) {
  if (holds(layer) || holds_shard(layer)) return;
  BW_CHECK(layer >= 0 && layer < model::num_layers(model_), "layer {} out of range", layer);
  invalidate();
  // Built on the CPU from (seed, layer), so every device starts from the same bytes, then moved.
  auto built = initial_layer(model_, layer, seed_);
  if (!placement_.device.is_cpu()) built->to(placement_.device);
  layers_[layer] = std::move(built);
}

void ModelState::add_initial_shard(int layer, int64_t begin, int64_t end) {
  if (holds(layer) || holds_shard(layer)) return;
  BW_CHECK(layer >= 0 && layer < model::num_layers(model_), "layer {} out of range", layer);
  BW_CHECK(0 <= begin && begin < end && end <= model::num_parameters(model_, layer),
           "range [{}, {}) of layer {}", begin, end, layer);
  // The slice is allocated before the whole layer is built and is copied straight from its
  // parameters, with no flat copy of the layer: the layer's memory, freed at the end, is then
  // the top of the heap, where the next layer's slice goes.
  Shard s;
  s.begin = begin;
  s.end = end;
  s.param = torch::empty({end - begin}, placement_.master());
  s.exp_avg = torch::zeros({end - begin}, placement_.master());
  s.exp_avg_sq = torch::zeros({end - begin}, placement_.master());
  s.grad = torch::zeros({end - begin}, placement_.master());
  {
    torch::NoGradGuard no_grad;
    auto full = initial_layer(model_, layer, seed_);
    int64_t offset = 0;
    for (const auto& [name, p] : full->parameter_list()) {
      const int64_t b = std::max(offset, begin), e = std::min(offset + p.numel(), end);
      if (b < e)
        s.param.narrow(0, b - begin, e - b).copy_(p.reshape({-1}).narrow(0, b - offset, e - b));
      offset += p.numel();
    }
  }
  shards_[layer] = std::move(s);
}

void ModelState::drop(int layer) {
  shards_.erase(layer);
  auto it = layers_.find(layer);
  if (it == layers_.end()) return;
  invalidate();
  for (const auto& [name, p] : it->second->parameter_list()) {
    pending_state_.erase(checkpoint_tensor_name(layer, name));
  }
  layers_.erase(it);
}

void ModelState::keep_only(const std::vector<int>& keep) {
  for (int l : layers()) {
    if (std::find(keep.begin(), keep.end(), l) == keep.end()) drop(l);
  }
  for (int l : keep) add_initial(l);
}

int64_t ModelState::flat_numel(int layer) const {
  return LayerState::kParts * model::num_parameters(model_, layer);
}

Optimizer& ModelState::optimizer() {
  if (!optimizer_) {
    NamedTensors params;
    for (const auto& [l, layer] : layers_) {
      for (const auto& [name, p] : layer->parameter_list()) {
        params.emplace_back(checkpoint_tensor_name(l, name), p);
      }
    }
    optimizer_ = std::make_unique<Optimizer>(std::move(params), train_);
    if (!pending_state_.empty()) optimizer_->set_state(pending_state_);
    pending_state_.clear();
  }
  return *optimizer_;
}

LayerState ModelState::export_layer(int layer) const {
  BW_CHECK(holds(layer), "export of layer {}, which this worker does not hold", layer);
  auto& self = const_cast<ModelState&>(*this);
  const auto state = self.optimizer().get_state();
  std::vector<torch::Tensor> params, avg, avg_sq;
  int64_t step = -1;
  for (const auto& [name, p] : layers_.at(layer)->parameter_list()) {
    params.push_back(p.detach().reshape({-1}));
    auto it = state.find(checkpoint_tensor_name(layer, name));
    if (it == state.end()) {
      avg.push_back(torch::zeros({p.numel()}, placement_.master()));
      avg_sq.push_back(torch::zeros({p.numel()}, placement_.master()));
      BW_CHECK(step <= 0, "layer {}: parameter {} has no AdamW state, others do", layer, name);
      step = 0;
    } else {
      avg.push_back(it->second.exp_avg.reshape({-1}));
      avg_sq.push_back(it->second.exp_avg_sq.reshape({-1}));
      BW_CHECK(step < 0 || step == it->second.step, "layer {}: AdamW steps differ ({} vs {})",
               layer, step, it->second.step);
      step = it->second.step;
    }
  }
  return LayerState::join(torch::cat(params), torch::cat(avg), torch::cat(avg_sq),
                          std::max<int64_t>(step, 0));
}

void ModelState::import_layer(int layer, const LayerState& s) {
  BW_CHECK(s.flat.numel() == flat_numel(layer), "layer {}: {} values received, {} expected", layer,
           s.flat.numel(), flat_numel(layer));
  add_initial(layer);
  invalidate();
  torch::NoGradGuard no_grad;
  const auto& plist = layers_.at(layer)->parameter_list();
  int64_t offset = 0;
  for (const auto& [name, p] : plist) {
    const int64_t k = p.numel();
    p.copy_(s.part(LayerState::kParam, offset, k).view_as(p));
    const auto key = checkpoint_tensor_name(layer, name);
    if (s.adam_step > 0) {
      pending_state_[key] =
          ParamState{s.part(LayerState::kExpAvg, offset, k).view_as(p).clone(),
                     s.part(LayerState::kExpAvgSq, offset, k).view_as(p).clone(), s.adam_step};
    } else {
      pending_state_.erase(key);
    }
    offset += k;
  }
}

NamedTensors ModelState::parameters_of(const std::vector<int>& layers) const {
  NamedTensors out;
  for (int l : layers) {
    BW_CHECK(holds(l), "parameters of layer {}, which this worker does not hold", l);
    for (const auto& [name, p] : layers_.at(l)->parameter_list()) {
      const auto key = checkpoint_tensor_name(l, name);
      if (tied_copies_.count(key) == 0) out.emplace_back(key, p.detach());
    }
  }
  return out;
}

NamedTensors ModelState::optimizer_state_of(const std::vector<int>& layers) {
  NamedTensors out;
  for (auto& [name, t] : optimizer().state_tensors()) {
    const int layer = std::stoi(name.substr(7));  // "layers.{i}...."
    if (std::find(layers.begin(), layers.end(), layer) == layers.end()) continue;
    const auto param = name.substr(0, name.rfind('.'));  // without ".exp_avg", ...
    if (tied_copies_.count(param) == 0) out.emplace_back(name, t);
  }
  return out;
}

std::map<int, uint64_t> ModelState::parameter_checksums() const {
  std::map<int, uint64_t> out;
  for (const auto& [l, layer] : layers_) {
    std::vector<torch::Tensor> ts;
    for (const auto& [name, p] : layer->parameter_list()) ts.push_back(p);
    out[l] = fnv1a(ts);
  }
  return out;
}

std::map<int, uint64_t> ModelState::optimizer_checksums() {
  std::map<int, uint64_t> out;
  for (const auto& [l, layer] : layers_) {
    const auto s = export_layer(l);
    out[l] = fnv1a({s.part(LayerState::kExpAvg), s.part(LayerState::kExpAvgSq),
                    torch::tensor(s.adam_step, torch::kInt64)});
  }
  return out;
}

std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>>
ModelState::tied_copy_checksums() {
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> out;
  const auto state = optimizer().get_state();
  for (const auto& tie : model::tied_groups(model_)) {
    for (const auto& m : tie.members) {
      if (!holds(m.layer)) continue;
      for (const auto& [name, p] : layers_.at(m.layer)->parameter_list()) {
        if (name != m.name) continue;
        uint64_t adam = fnv1a({});
        if (auto it = state.find(checkpoint_tensor_name(m.layer, name)); it != state.end()) {
          adam = fnv1a({it->second.exp_avg, it->second.exp_avg_sq,
                        torch::tensor(it->second.step, torch::kInt64)});
        }
        out[tie.name].emplace_back(fnv1a({p}), adam);
      }
    }
  }
  return out;
}

}  // namespace bw::runtime
