#include "plan/cost_model.h"

#include <algorithm>

#include "core/check.h"

namespace bw::plan {

CostModel::CostModel(const Profile& profile, const Cluster& cluster, CostOptions options)
    : num_layers_(profile.num_layers()), cluster_(cluster), options_(options) {
  BW_CHECK(num_layers_ >= 1, "profile has {} layers", num_layers_);
  BW_CHECK(options_.microbatches >= 1, "microbatches {} < 1", options_.microbatches);
  fwd_.assign(num_layers_ + 1, 0);
  bwd_ = param_ = act_ = fwd_;
  for (int i = 0; i < num_layers_; ++i) {
    const auto& l = profile.layers[i];
    fwd_[i + 1] = fwd_[i] + l.forward_ms;
    bwd_[i + 1] = bwd_[i] + l.backward_ms;
    param_[i + 1] = param_[i] + l.param_bytes;
    act_[i + 1] = act_[i] + l.activation_bytes;
    output_bytes_.push_back(l.output_bytes);
  }
}

double CostModel::forward_ms(int first, int count) const {
  return fwd_[first + count] - fwd_[first];
}
double CostModel::backward_ms(int first, int count) const {
  return bwd_[first + count] - bwd_[first];
}
double CostModel::compute_ms(int first, int count) const {
  return forward_ms(first, count) + backward_ms(first, count);
}
double CostModel::param_bytes(int first, int count) const {
  return param_[first + count] - param_[first];
}
double CostModel::activation_bytes(int first, int count) const {
  return act_[first + count] - act_[first];
}

double CostModel::comm_ms(int last_layer, bool next_same_node) const {
  return 2 * cluster_.transfer_ms(output_bytes_[last_layer], next_same_node);
}

double CostModel::stage_memory(int first, int count, int devices, int in_flight) const {
  return options_.state_bytes_per_param_byte * param_bytes(first, count) +
         static_cast<double>(in_flight) * activation_bytes(first, count) / devices;
}

PipelineCost CostModel::evaluate(const std::vector<StageShape>& stages, int num_nodes) const {
  const int g = cluster_.devices_per_node;
  const int num_stages = static_cast<int>(stages.size());
  BW_CHECK(num_stages >= 1, "pipeline without stages");
  std::vector<int> node(num_stages);
  int layer = 0, offset = 0;
  for (int s = 0; s < num_stages; ++s) {
    const auto& st = stages[s];
    BW_CHECK(st.first_layer == layer, "stage {} starts at layer {}, expected {}", s, st.first_layer,
             layer);
    BW_CHECK(st.num_layers >= 1 && st.num_devices >= 1 && st.num_devices <= g,
             "stage {}: {} layers on {} devices (g = {})", s, st.num_layers, st.num_devices, g);
    BW_CHECK(offset / g == (offset + st.num_devices - 1) / g,
             "stage {} straddles a node boundary (devices {}..{}, g = {})", s, offset,
             offset + st.num_devices - 1, g);
    node[s] = offset / g;
    layer += st.num_layers;
    offset += st.num_devices;
  }
  BW_CHECK(layer == num_layers_, "stages cover {} of {} layers", layer, num_layers_);
  BW_CHECK(offset == num_nodes * g, "stages use {} of {} devices", offset, num_nodes * g);

  PipelineCost c;
  const int m = options_.microbatches;
  for (int s = 0; s < num_stages; ++s) {
    const auto& st = stages[s];
    double t = stage_compute_ms(st.first_layer, st.num_layers, st.num_devices);
    if (s + 1 < num_stages)
      t += comm_ms(st.first_layer + st.num_layers - 1, node[s + 1] == node[s]);
    double mem =
        stage_memory(st.first_layer, st.num_layers, st.num_devices, std::min(m, num_stages - s));
    c.stage_ms.push_back(t);
    c.stage_memory.push_back(mem);
    c.sum_ms += t;
    if (t > c.max_ms) {
      c.max_ms = t;
      c.bottleneck = s;
    }
    c.peak_memory_bytes = std::max(c.peak_memory_bytes, mem);
  }
  c.iteration_ms = c.sum_ms + (m - 1) * c.max_ms;
  c.fits = c.peak_memory_bytes <= cluster_.device_memory_bytes();
  return c;
}

}  // namespace bw::plan
