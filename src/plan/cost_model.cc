#include "plan/cost_model.h"

#include <algorithm>

#include "core/check.h"

namespace bw::plan {
namespace {

// Sparse table for O(1) range maxima: table[k][i] = max of values over [i, i + 2^k).
std::vector<std::vector<double>> sparse_max(std::vector<double> values) {
  std::vector<std::vector<double>> table{std::move(values)};
  const size_t n = table[0].size();
  for (int k = 1; (static_cast<size_t>(1) << k) <= n; ++k) {
    const auto& prev = table[k - 1];
    std::vector<double> row(n - (static_cast<size_t>(1) << k) + 1);
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = std::max(prev[i], prev[i + (static_cast<size_t>(1) << (k - 1))]);
    table.push_back(std::move(row));
  }
  return table;
}

double range_max(const std::vector<std::vector<double>>& table, int first, int count) {
  int k = 0;
  while ((2 << k) <= count) ++k;
  return std::max(table[k][first], table[k][first + count - (1 << k)]);
}

}  // namespace

CostModel::CostModel(const Profile& profile, const Cluster& cluster, CostOptions options)
    : num_layers_(profile.num_layers()),
      microbatch_size_(profile.microbatch_size),
      cluster_(cluster),
      options_(options) {
  BW_CHECK(num_layers_ >= 1, "profile has {} layers", num_layers_);
  BW_CHECK(options_.microbatches >= 1, "microbatches {} < 1", options_.microbatches);
  BW_CHECK(microbatch_size_ >= 1, "microbatch size {} < 1", microbatch_size_);
  BW_CHECK(options_.max_stage_devices >= 0, "max stage devices {} < 0", options_.max_stage_devices);
  max_stage_devices_ = std::min(cluster_.devices_per_node, microbatch_size_);
  if (options_.max_stage_devices > 0)
    max_stage_devices_ = std::min(max_stage_devices_, options_.max_stage_devices);
  fwd_.assign(num_layers_ + 1, 0);
  bwd_ = param_ = act_ = in_ = fwd_;
  std::vector<double> params, acts;
  for (int i = 0; i < num_layers_; ++i) {
    const auto& l = profile.layers[i];
    fwd_[i + 1] = fwd_[i] + l.forward_ms;
    bwd_[i + 1] = bwd_[i] + l.backward_ms;
    param_[i + 1] = param_[i] + l.param_bytes;
    act_[i + 1] = act_[i] + l.activation_bytes;
    // A layer's input is the previous layer's output; the first layer's is the token ids, which
    // are its activations.
    in_[i + 1] = in_[i] + (i == 0 ? l.activation_bytes : profile.layers[i - 1].output_bytes);
    output_bytes_.push_back(l.output_bytes);
    params.push_back(l.param_bytes);
    acts.push_back(l.activation_bytes);
  }
  max_param_ = sparse_max(std::move(params));
  max_act_ = sparse_max(std::move(acts));
}

double CostModel::max_layer_param_bytes(int first, int count) const {
  return range_max(max_param_, first, count);
}

double CostModel::max_layer_activation_bytes(int first, int count) const {
  return range_max(max_act_, first, count);
}

double CostModel::input_bytes(int first, int count) const {
  return in_[first + count] - in_[first];
}

double CostModel::sample_share(int devices) const {
  if (devices <= 1) return 1.0;
  const int per_device = (microbatch_size_ + devices - 1) / devices;
  return static_cast<double>(per_device) / microbatch_size_;
}

double CostModel::shard_comm_ms(int first, int count, int devices) const {
  if (devices <= 1) return 0;
  // Ring all-gather of P bytes: (d - 1) steps of latency + (P / d) / bw; the all-reduce twice
  // that. Summed over the stage's layers: 2 all-gathers + 1 all-reduce = 4 (d - 1) per layer.
  const double bytes_ms = 8.0 / (cluster_.intra_node_gbps * 1e9) * 1e3;
  const double steps =
      count * cluster_.latency_us * 1e-3 + param_bytes(first, count) / devices * bytes_ms;
  return 4.0 * (devices - 1) * steps;
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

double CostModel::stage_state_bytes(int first, int count, int devices) const {
  return options_.state_bytes_per_param_byte * param_bytes(first, count) / devices;
}

double CostModel::stage_transient_bytes(int first, int count, int devices) const {
  const double gathered = devices <= 1 ? 0 : 2 * max_layer_param_bytes(first, count);
  const double recomputed =
      recompute() ? max_layer_activation_bytes(first, count) * sample_share(devices) : 0;
  return gathered + recomputed;
}

double CostModel::stage_memory(int first, int count, int devices, int in_flight) const {
  return stage_state_bytes(first, count, devices) + stage_transient_bytes(first, count, devices) +
         static_cast<double>(in_flight) * stage_activation_bytes(first, count, devices);
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
  bool allowed = true;  // no stage wider than the runtime can run
  for (int s = 0; s < num_stages; ++s) {
    const auto& st = stages[s];
    allowed = allowed && st.num_devices <= max_stage_devices_;
    double t = stage_local_ms(st.first_layer, st.num_layers, st.num_devices);
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
  c.fits = allowed && c.peak_memory_bytes <= cluster_.device_memory_bytes();
  return c;
}

}  // namespace bw::plan
