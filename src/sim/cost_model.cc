#include "sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace bw::sim {

const LinkModel& CostModel::link_between(int src_device, int dst_device) const {
  if (devices_per_node > 0 && src_device / devices_per_node != dst_device / devices_per_node)
    return inter_node_link;
  return link;
}

CostModel uniform_costs(int num_chunks, double forward_ms, double backward_ms,
                        double activation_bytes, double output_bytes) {
  CostModel m;
  ChunkCost c;
  c.forward_ms = forward_ms;
  c.backward_ms = backward_ms;
  c.backward_input_ms = backward_ms / 2;
  c.backward_weight_ms = backward_ms / 2;
  c.activation_bytes = activation_bytes;
  c.output_bytes = output_bytes;
  m.chunks.assign(num_chunks, c);
  return m;
}

CostModel stage_costs(const schedule::Schedule& s, const StageCost& stage, const LinkModel& link) {
  const int stages = s.num_stages();
  if (stages < 1 || s.num_devices < 1)
    throw ConfigError("stage_costs: the schedule has no chunks or no devices");
  // One replica's S chunks replace the P stages of a 1F1B pipeline on the same devices.
  const double share = static_cast<double>(s.num_devices) / stages;
  ChunkCost c;
  c.forward_ms = stage.forward_ms * share;
  c.backward_ms = stage.backward_ms * share;
  c.backward_input_ms =
      (stage.backward_input_ms >= 0 ? stage.backward_input_ms : stage.backward_ms / 2) * share;
  c.backward_weight_ms =
      (stage.backward_weight_ms >= 0 ? stage.backward_weight_ms : stage.backward_ms / 2) * share;
  c.activation_bytes = stage.activation_bytes * share;
  c.output_bytes = stage.output_bytes;
  c.param_bytes = stage.param_bytes * share;
  CostModel m;
  m.chunks.assign(s.num_chunks, c);
  m.link = link;
  return m;
}

CostModel layer_costs(const std::vector<LayerCost>& layers, const std::vector<int>& stage_begin,
                      const std::vector<int>& chunk_stage, const LinkModel& link) {
  const int L = static_cast<int>(layers.size());
  const int S = static_cast<int>(stage_begin.size()) - 1;
  if (S < 1 || stage_begin.front() != 0 || stage_begin.back() != L)
    throw ConfigError(
        fmt::format("layer partition must start at 0 and end at {} layers (got {} boundaries)", L,
                    stage_begin.size()));
  std::vector<ChunkCost> stages(S);
  for (int k = 0; k < S; ++k) {
    if (stage_begin[k + 1] <= stage_begin[k])
      throw ConfigError(fmt::format("stage {} of the layer partition is empty (layers [{}, {}))", k,
                                    stage_begin[k], stage_begin[k + 1]));
    ChunkCost& c = stages[k];
    for (int l = stage_begin[k]; l < stage_begin[k + 1]; ++l) {
      const LayerCost& x = layers[l];
      const double bi = x.backward_input_ms >= 0 ? x.backward_input_ms : x.backward_ms / 2;
      const double bw = x.backward_weight_ms >= 0 ? x.backward_weight_ms : x.backward_ms - bi;
      c.forward_ms += x.forward_ms;
      c.backward_ms += x.backward_ms;
      c.backward_input_ms += bi;
      c.backward_weight_ms += bw;
      c.activation_bytes += x.activation_bytes;
      c.param_bytes += x.param_bytes;
    }
    c.output_bytes = layers[stage_begin[k + 1] - 1].output_bytes;
  }
  CostModel m;
  m.link = link;
  if (chunk_stage.empty()) {
    m.chunks = stages;
  } else {
    for (int st : chunk_stage) {
      if (st < 0 || st >= S)
        throw ConfigError(fmt::format("chunk holds stage {} but the partition has {}", st, S));
      m.chunks.push_back(stages[st]);
    }
  }
  return m;
}

std::vector<int> balanced_partition(const std::vector<LayerCost>& layers, int num_stages) {
  const int L = static_cast<int>(layers.size());
  if (num_stages < 1 || L < num_stages)
    throw ConfigError(fmt::format(
        "cannot split {} layers into {} non-empty chunks; use fewer chunks (devices, v or W)", L,
        num_stages));
  std::vector<double> prefix(L + 1, 0);
  for (int l = 0; l < L; ++l)
    prefix[l + 1] = prefix[l] + layers[l].forward_ms + layers[l].backward_ms;
  // Exact min-max by DP over (stages, layers): best[k][l] = min over j of max(best[k-1][j],
  // cost(j, l)). O(S L^2) is fine for hundreds of layers and chunks; beyond that use the greedy
  // bound below.
  const double inf = std::numeric_limits<double>::infinity();
  auto cost = [&](int a, int b) { return prefix[b] - prefix[a]; };
  if (static_cast<long long>(num_stages) * L * L <= 50'000'000LL) {
    std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(L + 1, inf));
    std::vector<std::vector<int>> cut(num_stages + 1, std::vector<int>(L + 1, -1));
    best[0][0] = 0;
    for (int k = 1; k <= num_stages; ++k)
      for (int l = k; l <= L - (num_stages - k); ++l)
        for (int j = k - 1; j < l; ++j) {
          const double v = std::max(best[k - 1][j], cost(j, l));
          if (v < best[k][l]) {
            best[k][l] = v;
            cut[k][l] = j;
          }
        }
    std::vector<int> begin(num_stages + 1);
    begin[num_stages] = L;
    for (int k = num_stages, l = L; k > 0; --k) {
      l = cut[k][l];
      begin[k - 1] = l;
    }
    return begin;
  }
  // Large: binary search on the bottleneck with greedy packing, then split to exactly S stages.
  double lo = 0, hi = prefix[L];
  for (int l = 0; l < L; ++l) lo = std::max(lo, cost(l, l + 1));
  auto pack = [&](double cap) {
    std::vector<int> begin{0};
    for (int l = 0; l < L; ++l)
      if (cost(begin.back(), l + 1) > cap) begin.push_back(l);
    return begin;
  };
  for (int it = 0; it < 100; ++it) {
    const double mid = (lo + hi) / 2;
    if (static_cast<int>(pack(mid).size()) <= num_stages)
      hi = mid;
    else
      lo = mid;
  }
  std::vector<int> begin = pack(hi);
  begin.push_back(L);
  // Split the widest stages until there are exactly num_stages (never raises the bottleneck).
  while (static_cast<int>(begin.size()) - 1 < num_stages) {
    size_t widest = 0;
    for (size_t k = 0; k + 1 < begin.size(); ++k)
      if (begin[k + 1] - begin[k] > begin[widest + 1] - begin[widest]) widest = k;
    begin.insert(begin.begin() + widest + 1, (begin[widest] + begin[widest + 1]) / 2);
  }
  return begin;
}

}  // namespace bw::sim
