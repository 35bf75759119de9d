#include "plan/reconfigure.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "core/check.h"

namespace bw::plan {
namespace {

std::string layer_list(const std::vector<int>& layers) {
  // Compact ranges: 3-7, 9.
  std::vector<std::string> parts;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    parts.push_back(j == i ? fmt::format("{}", layers[i])
                           : fmt::format("{}-{}", layers[i], layers[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string node_list(const std::vector<NodeId>& nodes) {
  std::vector<int> v;
  for (NodeId n : nodes) v.push_back(n.value());
  return fmt::format("{}", fmt::join(v, ","));
}

// Pipelines (as node groups) to a plan from templates only.
Plan build_plan(const Plan& old, const TemplateSet& templates,
                const std::vector<std::vector<NodeId>>& groups, const Cluster& cluster) {
  Plan next;
  next.generation = old.generation + 1;
  next.num_layers = old.num_layers;
  next.devices_per_node = old.devices_per_node;
  next.microbatch_size = old.microbatch_size;
  next.global_microbatches = old.global_microbatches;
  for (const auto& g : groups) {
    const Template* t = templates.find(static_cast<int>(g.size()));
    if (t == nullptr) {
      throw RecoveryUnavailable(
          fmt::format("no pipeline template for {} nodes (templates cover {} .. {} nodes); "
                      "regenerate templates for this cluster size",
                      g.size(), templates.templates.front().num_nodes,
                      templates.templates.back().num_nodes),
          {});
    }
    Pipeline p;
    p.tmpl = *t;
    p.nodes = g;
    next.pipelines.push_back(std::move(p));
  }
  resplit(next, cluster);
  validate_plan(next);
  return next;
}

long long key(const DeviceRef& d, int g) {
  return static_cast<long long>(d.node.value()) * g + d.device;
}

}  // namespace

std::vector<LayerCopy> layer_copies(const Plan& prev, const Plan& next,
                                    const std::vector<NodeId>& dead) {
  const int g = prev.devices_per_node;
  const std::set<NodeId> dead_set(dead.begin(), dead.end());
  // What each device held before: the chunks of its stage.
  std::unordered_map<long long, std::vector<std::pair<int, int>>> held;
  for (const auto& p : prev.pipelines)
    for (int s = 0; s < p.tmpl.num_stages(); ++s) {
      const Stage& st = p.tmpl.stages[s];
      for (int d = 0; d < st.num_devices; ++d)
        held[key({p.node_of_stage(s), st.first_device + d}, g)] = p.tmpl.layers_of_stage(s);
    }
  // Live sources per layer, in plan order; used round-robin to spread the transfers.
  std::vector<std::vector<DeviceRef>> sources(prev.num_layers);
  for (int l = 0; l < prev.num_layers; ++l)
    for (const auto& r : prev.replicas(l))
      if (!dead_set.count(r.node)) sources[l].push_back(r);
  std::vector<size_t> turn(prev.num_layers, 0);

  std::vector<LayerCopy> copies;
  std::vector<int> lost;
  for (const auto& p : next.pipelines)
    for (int s = 0; s < p.tmpl.num_stages(); ++s) {
      const Stage& st = p.tmpl.stages[s];
      for (int d = 0; d < st.num_devices; ++d) {
        DeviceRef to{p.node_of_stage(s), st.first_device + d};
        auto it = held.find(key(to, g));
        for (auto [first, end] : p.tmpl.layers_of_stage(s))
          for (int l = first; l < end; ++l) {
            bool had = false;
            if (it != held.end())
              for (auto [a, b] : it->second) had = had || (l >= a && l < b);
            if (had) continue;
            if (sources[l].empty()) {
              lost.push_back(l);
              continue;
            }
            copies.push_back({LayerId(l), to, sources[l][turn[l]++ % sources[l].size()]});
          }
      }
    }
  if (!lost.empty()) {
    std::sort(lost.begin(), lost.end());
    lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
    throw RecoveryUnavailable(
        fmt::format("layers {} lost every replica; restart from the last checkpoint",
                    layer_list(lost)),
        lost);
  }
  std::sort(copies.begin(), copies.end(), [](const LayerCopy& a, const LayerCopy& b) {
    if (a.to != b.to) return a.to < b.to;
    return a.layer < b.layer;
  });
  return copies;
}

Reconfiguration reconfigure(const Plan& plan, const TemplateSet& templates,
                            const std::vector<NodeId>& failed, const Cluster& cluster) {
  BW_CHECK(!templates.templates.empty(), "reconfigure without templates");
  std::set<NodeId> in_plan;
  for (NodeId n : plan.nodes()) in_plan.insert(n);
  std::set<NodeId> dead(failed.begin(), failed.end());
  for (NodeId n : dead)
    if (!in_plan.count(n))
      throw ConfigError(fmt::format("failed node {} is not part of the plan (nodes: {})", n,
                                    node_list(plan.nodes())));

  // Every layer needs a live replica somewhere.
  std::vector<int> lost;
  for (int l = 0; l < plan.num_layers; ++l) {
    bool live = false;
    for (const auto& p : plan.pipelines)
      live = live || !dead.count(p.node_of_stage(p.tmpl.stage_of_layer(l)));
    if (!live) lost.push_back(l);
  }
  std::vector<NodeId> dead_list(dead.begin(), dead.end());
  if (!lost.empty()) {
    throw RecoveryUnavailable(
        fmt::format("layers {} lost every replica when nodes {} failed; restart from the last "
                    "checkpoint",
                    layer_list(lost), node_list(dead_list)),
        lost);
  }

  const int n0 = *templates.min_nodes();
  std::vector<std::vector<NodeId>> groups;
  for (const auto& p : plan.pipelines) {
    std::vector<NodeId> alive;
    for (NodeId n : p.nodes)
      if (!dead.count(n)) alive.push_back(n);
    if (!alive.empty()) groups.push_back(std::move(alive));
  }
  int survivors = 0;
  for (const auto& g : groups) survivors += static_cast<int>(g.size());
  if (survivors < n0) {
    throw RecoveryUnavailable(
        fmt::format("{} surviving nodes cannot hold the model (a pipeline needs {}); restart "
                    "from the last checkpoint with more nodes",
                    survivors, n0),
        {});
  }

  // Oobleck's policy: borrow from the largest pipeline that can spare nodes, else merge.
  std::vector<size_t> short_ids;
  for (size_t i = 0; i < groups.size(); ++i)
    if (static_cast<int>(groups[i].size()) < n0) short_ids.push_back(i);
  std::vector<NodeId> merge_pool;
  std::vector<bool> drop(groups.size(), false);
  for (size_t i : short_ids) {
    const int need = n0 - static_cast<int>(groups[i].size());
    int lender = -1;
    for (size_t j = 0; j < groups.size(); ++j) {
      if (j == i || static_cast<int>(groups[j].size()) < n0) continue;
      if (static_cast<int>(groups[j].size()) - need < n0) continue;
      if (lender < 0 || groups[j].size() > groups[lender].size()) lender = static_cast<int>(j);
    }
    if (lender >= 0) {
      auto& from = groups[lender];
      groups[i].insert(groups[i].end(), from.end() - need, from.end());
      from.erase(from.end() - need, from.end());
    } else {
      merge_pool.insert(merge_pool.end(), groups[i].begin(), groups[i].end());
      drop[i] = true;
    }
  }
  std::vector<std::vector<NodeId>> result;
  for (size_t i = 0; i < groups.size(); ++i)
    if (!drop[i]) result.push_back(groups[i]);
  // Merge the pooled short pipelines into pipelines of n0 nodes; a remainder joins the
  // smallest pipeline.
  size_t pos = 0;
  while (merge_pool.size() - pos >= static_cast<size_t>(n0)) {
    result.emplace_back(merge_pool.begin() + pos, merge_pool.begin() + pos + n0);
    pos += n0;
  }
  if (pos < merge_pool.size()) {
    BW_CHECK(!result.empty(), "{} survivors but no pipeline formed", survivors);
    size_t smallest = 0;
    for (size_t i = 1; i < result.size(); ++i)
      if (result[i].size() < result[smallest].size()) smallest = i;
    result[smallest].insert(result[smallest].end(), merge_pool.begin() + pos, merge_pool.end());
  }

  Reconfiguration r;
  r.plan = build_plan(plan, templates, result, cluster);
  r.copies = layer_copies(plan, r.plan, dead_list);
  return r;
}

Reconfiguration join(const Plan& plan, const TemplateSet& templates,
                     const std::vector<NodeId>& new_nodes, const Cluster& cluster) {
  BW_CHECK(!templates.templates.empty(), "join without templates");
  std::set<NodeId> in_plan;
  for (NodeId n : plan.nodes()) in_plan.insert(n);
  std::set<NodeId> fresh;
  for (NodeId n : new_nodes) {
    if (in_plan.count(n))
      throw ConfigError(fmt::format("joining node {} is already part of the plan", n));
    if (!fresh.insert(n).second) throw ConfigError(fmt::format("node {} joins twice", n));
  }
  const int n0 = *templates.min_nodes();
  std::vector<std::vector<NodeId>> groups;
  for (const auto& p : plan.pipelines) groups.push_back(p.nodes);
  std::vector<NodeId> add(fresh.begin(), fresh.end());
  const int k = static_cast<int>(add.size());
  // New pipelines from the new nodes: each as large as a template allows while what is left is
  // none or again >= n0; nodes left over (fewer than n0) grow the smallest pipelines.
  size_t pos = 0;
  while (k - static_cast<int>(pos) >= n0) {
    const int left = k - static_cast<int>(pos);
    int size = 0;
    for (const auto& t : templates.templates) {
      const int rest = left - t.num_nodes;
      if (t.num_nodes <= left && (rest == 0 || rest >= n0)) size = t.num_nodes;
    }
    if (size == 0) break;
    groups.emplace_back(add.begin() + pos, add.begin() + pos + size);
    pos += size;
  }
  for (; pos < add.size(); ++pos) {
    const NodeId n = add[pos];
    int target = -1;
    for (size_t i = 0; i < groups.size(); ++i) {
      if (templates.find(static_cast<int>(groups[i].size()) + 1) == nullptr) continue;
      if (target < 0 || groups[i].size() < groups[target].size()) target = static_cast<int>(i);
    }
    if (target < 0)
      throw ConfigError(fmt::format(
          "no template can take node {}: every pipeline is at the largest template size", n));
    groups[target].push_back(n);
  }
  Reconfiguration r;
  r.plan = build_plan(plan, templates, groups, cluster);
  r.copies = layer_copies(plan, r.plan, {});
  return r;
}

}  // namespace bw::plan
