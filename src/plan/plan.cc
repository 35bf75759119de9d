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
    for (int n = 0; n < p.tmpl.num_nodes; ++n)
      BW_CHECK(used[n] == plan.devices_per_node, "pipeline {}: node {} uses {} of {} devices", i, n,
               used[n], plan.devices_per_node);
  }
  BW_CHECK(total == plan.global_microbatches, "microbatches add up to {}, expected {}", total,
           plan.global_microbatches);
}

void update_predictions(Plan& plan, const Cluster& cluster) {
  const int num_pipelines = static_cast<int>(plan.pipelines.size());
  plan.pipeline_ms = 0;
  plan.allreduce_ms = 0;
  for (auto& p : plan.pipelines) {
    p.iteration_ms = p.tmpl.iteration_ms(p.microbatches);
    plan.pipeline_ms = std::max(plan.pipeline_ms, p.iteration_ms);
    if (num_pipelines < 2) continue;
    // Ring all-reduce of each layer's gradients over its replicas: every node sends and
    // receives 2 (P - 1) / P of the parameter bytes it holds through its network link.
    std::vector<double> node_bytes(p.tmpl.num_nodes, 0);
    for (const auto& st : p.tmpl.stages) node_bytes[st.node] += st.param_bytes;
    for (double bytes : node_bytes) {
      double ms = cluster.transfer_ms(2.0 * (num_pipelines - 1) / num_pipelines * bytes, false);
      plan.allreduce_ms = std::max(plan.allreduce_ms, ms);
    }
  }
  plan.step_ms = plan.pipeline_ms + plan.allreduce_ms;
  plan.samples_per_s =
      plan.step_ms > 0 ? plan.global_microbatches * plan.microbatch_size / (plan.step_ms / 1e3) : 0;
}

json::Json to_json(const Template& t) {
  json::Json j;
  j["nodes"] = t.num_nodes;
  j["schedule"] = t.schedule;
  j["microbatches"] = t.microbatches;
  j["iteration_ms"] = t.iteration_ms(t.microbatches);
  j["fixed_ms"] = t.estimate.fixed_ms;
  j["per_microbatch_ms"] = t.estimate.per_microbatch_ms;
  j["bottleneck_stage"] = t.bottleneck;
  j["peak_memory_bytes"] = t.peak_memory_bytes;
  j["stages"] = json::Json::array();
  for (const auto& s : t.stages) {
    j["stages"].push_back({{"first_layer", s.first_layer},
                           {"num_layers", s.num_layers},
                           {"node", s.node},
                           {"first_device", s.first_device},
                           {"num_devices", s.num_devices},
                           {"stage_ms", s.stage_ms},
                           {"comm_ms", s.comm_ms},
                           {"memory_bytes", s.memory_bytes}});
  }
  return j;
}

json::Json to_json(const Plan& plan) {
  json::Json j;
  j["generation"] = plan.generation;
  j["num_layers"] = plan.num_layers;
  j["devices_per_node"] = plan.devices_per_node;
  j["microbatch_size"] = plan.microbatch_size;
  j["global_microbatches"] = plan.global_microbatches;
  j["pipeline_ms"] = plan.pipeline_ms;
  j["allreduce_ms"] = plan.allreduce_ms;
  j["step_ms"] = plan.step_ms;
  j["samples_per_s"] = plan.samples_per_s;
  j["pipelines"] = json::Json::array();
  for (const auto& p : plan.pipelines) {
    json::Json pj;
    pj["nodes"] = json::Json::array();
    for (NodeId n : p.nodes) pj["nodes"].push_back(n.value());
    pj["microbatches"] = p.microbatches;
    pj["iteration_ms"] = p.iteration_ms;
    pj["template"] = to_json(p.tmpl);
    j["pipelines"].push_back(std::move(pj));
  }
  return j;
}

}  // namespace bw::plan
