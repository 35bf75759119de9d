#include "plan/plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/check.h"

namespace bw::plan {

int Plan::num_nodes() const {
  int n = 0;
  for (const auto& p : pipelines) n += static_cast<int>(p.nodes.size());
  return n;
}

std::vector<NodeId> Plan::nodes() const {
  std::vector<NodeId> all;
  for (const auto& p : pipelines) all.insert(all.end(), p.nodes.begin(), p.nodes.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::optional<Placement> Plan::locate(const DeviceRef& device) const {
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const Pipeline& pl = pipelines[p];
    for (int s = 0; s < pl.tmpl.num_stages(); ++s) {
      const Stage& st = pl.tmpl.stages[s];
      if (pl.node_of_stage(s) == device.node && device.device >= st.first_device &&
          device.device < st.first_device + st.num_devices)
        return Placement{static_cast<int>(p), s};
    }
  }
  return std::nullopt;
}

std::vector<DeviceRef> Plan::replicas(int layer) const {
  std::vector<DeviceRef> out;
  for (const auto& p : pipelines) {
    const int s = p.tmpl.stage_of_layer(layer);
    const Stage& st = p.tmpl.stages[s];
    for (int d = 0; d < st.num_devices; ++d)
      out.push_back({p.node_of_stage(s), st.first_device + d});
  }
  return out;
}

void validate_plan(const Plan& plan) {
  std::set<NodeId> seen;
  int total = 0;
  for (size_t i = 0; i < plan.pipelines.size(); ++i) {
    const Pipeline& p = plan.pipelines[i];
    BW_CHECK(static_cast<int>(p.nodes.size()) == p.tmpl.num_nodes,
             "pipeline {} has {} nodes, its template {}", i, p.nodes.size(), p.tmpl.num_nodes);
    BW_CHECK(p.microbatches >= 1, "pipeline {} has {} microbatches", i, p.microbatches);
    total += p.microbatches;
    for (NodeId n : p.nodes) BW_CHECK(seen.insert(n).second, "node {} used twice", n);
    int layer = 0;
    std::vector<int> used(p.tmpl.num_nodes, 0);
    for (const auto& st : p.tmpl.stages) {
      BW_CHECK(st.first_layer == layer, "pipeline {}: stage starts at {}, expected {}", i,
               st.first_layer, layer);
      BW_CHECK(st.node >= 0 && st.node < p.tmpl.num_nodes, "pipeline {}: stage on node {}", i,
               st.node);
      BW_CHECK(st.first_device == used[st.node], "pipeline {}: devices not packed", i);
      used[st.node] += st.num_devices;
      layer = st.end_layer();
    }
    BW_CHECK(layer == plan.num_layers, "pipeline {} covers {} of {} layers", i, layer,
             plan.num_layers);
    int chunk_layer = 0;
    for (const auto& c : p.tmpl.chunks) {
      BW_CHECK(c.first_layer == chunk_layer && c.num_layers >= 1,
               "pipeline {}: chunk [{}, {}) does not follow layer {}", i, c.first_layer,
               c.end_layer(), chunk_layer);
      BW_CHECK(c.stage >= 0 && c.stage < p.tmpl.num_stages(), "pipeline {}: chunk on stage {}", i,
               c.stage);
      chunk_layer = c.end_layer();
    }
    BW_CHECK(chunk_layer == plan.num_layers, "pipeline {}: chunks cover {} of {} layers", i,
             chunk_layer, plan.num_layers);
    for (int n = 0; n < p.tmpl.num_nodes; ++n)
      BW_CHECK(used[n] == plan.devices_per_node, "pipeline {}: node {} uses {} of {} devices", i, n,
               used[n], plan.devices_per_node);
  }
  BW_CHECK(total == plan.global_microbatches, "microbatches add up to {}, expected {}", total,
           plan.global_microbatches);
}

double max_node_param_bytes(const Template& t) {
  std::vector<double> node_bytes(t.num_nodes, 0);
  for (const auto& st : t.stages) node_bytes[st.node] += st.param_bytes;
  return *std::max_element(node_bytes.begin(), node_bytes.end());
}

double allreduce_ms(int pipelines, double node_param_bytes, const Cluster& cluster) {
  if (pipelines < 2) return 0;
  return cluster.transfer_ms(2.0 * (pipelines - 1) / pipelines * node_param_bytes, false);
}

void update_predictions(Plan& plan, const Cluster& cluster) {
  const int num_pipelines = static_cast<int>(plan.pipelines.size());
  plan.pipeline_ms = 0;
  double node_bytes = 0;
  for (auto& p : plan.pipelines) {
    p.iteration_ms = p.tmpl.iteration_ms(p.microbatches);
    plan.pipeline_ms = std::max(plan.pipeline_ms, p.iteration_ms);
    node_bytes = std::max(node_bytes, max_node_param_bytes(p.tmpl));
  }
  plan.allreduce_ms = allreduce_ms(num_pipelines, node_bytes, cluster);
  plan.step_ms = plan.pipeline_ms + plan.allreduce_ms;
  plan.samples_per_s =
      plan.step_ms > 0 ? plan.global_microbatches * plan.microbatch_size / (plan.step_ms / 1e3) : 0;
}

}  // namespace bw::plan
