#include "forecast/planned.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "core/error.h"

namespace bw::forecast {
namespace {

// instantiate with f, f-1, ..., 0 until one works.
std::optional<plan::Plan> instantiate_relaxed(const plan::TemplateSet& templates,
                                              const std::vector<NodeId>& nodes, int f,
                                              int microbatches, const plan::Cluster& cluster) {
  if (nodes.empty()) return std::nullopt;
  for (int ft = f; ft >= 0; --ft) {
    try {
      return plan::instantiate(templates, nodes, ft, microbatches, cluster);
    } catch (const ConfigError&) {
    }
  }
  return std::nullopt;
}

std::vector<NodeId> first_nodes(int n) {
  std::vector<NodeId> v;
  for (int i = 0; i < n; ++i) v.push_back(NodeId(i));
  return v;
}

}  // namespace

PlannerModel::PlannerModel(PlannerSetup setup) : setup_(std::move(setup)) {
  plan::validate(setup_.cluster);
  // Templates once, for the largest membership; a fault tolerance the cluster cannot give is
  // relaxed (make_plan says why in the error of the last try).
  for (int f = setup_.fault_tolerance;; --f) {
    try {
      templates_ = plan::make_plan(setup_.profile, setup_.cluster, f, setup_.microbatches,
                                   setup_.planner_options)
                       .templates;
      break;
    } catch (const ConfigError&) {
      if (f == 0) throw;
    }
  }
  for (const auto& l : setup_.profile.layers) layer_param_bytes_.push_back(l.param_bytes);
}

double PlannerModel::samples_per_step() const {
  return static_cast<double>(setup_.microbatches) * setup_.profile.microbatch_size;
}

std::optional<plan::Plan> PlannerModel::plan_for(int nodes) {
  if (auto it = plans_.find(nodes); it != plans_.end()) return it->second;
  auto p = instantiate_relaxed(templates_, first_nodes(nodes), setup_.fault_tolerance,
                               setup_.microbatches, setup_.cluster);
  plans_[nodes] = p;
  return p;
}

std::optional<double> PlannerModel::step_ms(int nodes, Arrangement arrangement) {
  if (nodes <= 0) return std::nullopt;
  if (arrangement == Arrangement::kTemplates) {
    const auto p = plan_for(nodes);
    if (!p) return std::nullopt;
    return p->step_ms;
  }
  if (auto it = uniform_.find(nodes); it != uniform_.end()) return it->second;
  // Identical pipelines: one template size p, floor(n / p) of them, the rest idle. At least
  // f + 1 of them when some size allows it, as for kTemplates.
  std::optional<double> best;
  for (int pass = 0; pass < 2 && !best; ++pass) {
    for (const auto& t : templates_.templates) {
      const int k = std::min(nodes / t.num_nodes, setup_.microbatches);
      if (k == 0 || (pass == 0 && k < setup_.fault_tolerance + 1)) continue;
      plan::TemplateSet only = templates_;
      only.templates = {t};
      const auto p = instantiate_relaxed(only, first_nodes(k * t.num_nodes),
                                         pass == 0 ? setup_.fault_tolerance : 0,
                                         setup_.microbatches, setup_.cluster);
      if (p && (!best || p->step_ms < *best)) best = p->step_ms;
    }
  }
  uniform_[nodes] = best;
  return best;
}

double PlannerModel::state_bytes_per_node(int nodes) const {
  // Weights and two AdamW moments of a node's share in the smallest template.
  const auto n0 = templates_.min_nodes().value_or(1);
  double total = 0;
  for (double b : layer_param_bytes_) total += b;
  (void)nodes;
  return 3.0 * total / n0;
}

double PlannerModel::copy_bytes(const std::vector<plan::LayerCopy>& copies) const {
  double bytes = 0;
  for (const auto& c : copies) bytes += 3.0 * layer_param_bytes_[c.layer.value()];
  return bytes;
}

double PlannerModel::copy_ms(const std::vector<plan::LayerCopy>& copies) const {
  // A layer crosses the network once per receiving node (then fans out to that node's devices
  // over the intra-node link); each node link carries its inbound and outbound bytes.
  std::set<std::tuple<int, int, int>> crossings;  // (from node, to node, layer)
  std::map<int, double> intra;                    // per receiving node, fan-out bytes
  for (const auto& c : copies) {
    const double bytes = 3.0 * layer_param_bytes_[c.layer.value()];
    intra[c.to.node.value()] += bytes;
    if (c.to.node != c.from.node) {
      crossings.insert({c.from.node.value(), c.to.node.value(), c.layer.value()});
    }
  }
  std::map<int, double> in, out;
  for (const auto& [from, to, layer] : crossings) {
    const double bytes = 3.0 * layer_param_bytes_[layer];
    in[to] += bytes;
    out[from] += bytes;
  }
  double busiest = 0, fan_out = 0;
  for (const auto& [n, b] : in) busiest = std::max(busiest, b);
  for (const auto& [n, b] : out) busiest = std::max(busiest, b);
  for (const auto& [n, b] : intra) fan_out = std::max(fan_out, b);
  const double inter_ms = busiest > 0 ? setup_.cluster.transfer_ms(busiest, false) : 0.0;
  const double intra_ms = fan_out > 0 ? setup_.cluster.transfer_ms(fan_out, true) : 0.0;
  return inter_ms + intra_ms;
}

double PlannerModel::full_state_ms(const plan::Plan& p) const {
  // Per node: the distinct layers its devices hold cross its link once; all its devices' copies
  // fan out inside it.
  double busiest = 0, fan_out = 0;
  for (const auto& pl : p.pipelines) {
    std::map<int, double> in, intra;
    for (const auto& st : pl.tmpl.stages) {
      double bytes = 0;
      for (int l = st.first_layer; l < st.end_layer(); ++l) bytes += 3.0 * layer_param_bytes_[l];
      in[st.node] += bytes;
      intra[st.node] += bytes * st.num_devices;
    }
    for (const auto& [n, b] : in) busiest = std::max(busiest, b);
    for (const auto& [n, b] : intra) fan_out = std::max(fan_out, b);
  }
  return (busiest > 0 ? setup_.cluster.transfer_ms(busiest, false) : 0.0) +
         (fan_out > 0 ? setup_.cluster.transfer_ms(fan_out, true) : 0.0);
}

PlannedBreakwaterPolicy::PlannedBreakwaterPolicy(const PolicyCosts& costs, PlannerModel& model)
    : costs_(costs), model_(model) {}

NodeId PlannedBreakwaterPolicy::id_of(const std::string& name) {
  auto [it, fresh] = ids_.try_emplace(name, NodeId(next_id_));
  if (fresh) ++next_id_;
  return it->second;
}

void PlannedBreakwaterPolicy::replan() {
  const auto& s = model_.setup();
  plan_ =
      instantiate_relaxed(model_.templates(), live_, s.fault_tolerance, s.microbatches, s.cluster);
}

void PlannedBreakwaterPolicy::on_start(const std::vector<std::string>& nodes) {
  live_.clear();
  for (const auto& n : nodes) live_.push_back(id_of(n));
  std::sort(live_.begin(), live_.end());
  replan();
}

std::optional<RunParams> PlannedBreakwaterPolicy::run_params(int nodes) {
  if (!plan_ || nodes <= 0) return std::nullopt;
  return RunParams{plan_->step_ms, 1.0, 0, 0.0};
}

int PlannedBreakwaterPolicy::smallest_pipeline(const plan::Plan& p) {
  int smallest = std::numeric_limits<int>::max();
  for (const auto& pl : p.pipelines) smallest = std::min(smallest, pl.tmpl.num_nodes);
  return smallest;
}

double PlannedBreakwaterPolicy::adopt(plan::Plan next, const std::vector<plan::LayerCopy>& copies,
                                      const std::vector<NodeId>& dead) {
  (void)dead;
  const double copy_ms = model_.copy_ms(copies);
  const double horizon = costs_.breakwater.replan_horizon_ms;
  if (horizon > 0 && plan_) {
    // The fresh plan for this many nodes, rounded down to a multiple of 1/64 of the cluster so
    // that large clusters instantiate only a few node counts (memoised); the nodes it leaves
    // out wait as spares.
    const int grid = std::max(1, model_.setup().cluster.num_nodes / 64);
    const int count = static_cast<int>(live_.size()) / grid * grid;
    auto fresh = count > 0 ? model_.plan_for(count) : std::nullopt;
    if (fresh) {
      for (auto& p : fresh->pipelines) {
        for (auto& n : p.nodes) n = live_[static_cast<std::size_t>(n.value())];
      }
      // Its transfer, bounded as if every node received all the state it holds: exact copy
      // lists between two large plans cost more to compute than the rest of the replay.
      const double fresh_copy_ms = model_.full_state_ms(*fresh);
      const double kept_steps = std::max(0.0, horizon - copy_ms) / next.step_ms;
      const double fresh_steps = std::max(0.0, horizon - fresh_copy_ms) / fresh->step_ms;
      if (fresh_steps > kept_steps) {
        fresh->generation = next.generation;
        plan_ = std::move(*fresh);
        spares_.assign(live_.begin() + count, live_.end());
        return fresh_copy_ms;
      }
    }
  }
  plan_ = std::move(next);
  return copy_ms;
}

Reaction PlannedBreakwaterPolicy::on_change(const Change& change) {
  const auto& b = costs_.breakwater;
  const auto& s = model_.setup();
  const NodeId id = id_of(change.node);
  Reaction r;
  r.cause = Cause::kReconfigure;
  if (change.kind == EventKind::kRemove) {
    if (std::find(spares_.begin(), spares_.end(), id) != spares_.end()) {
      // A spare left: nothing ran on it.
      std::erase(spares_, id);
      std::erase(live_, id);
      r.rollback = Rollback::kNone;
      r.no_op = true;
      return r;
    }
    std::erase(live_, id);
    r.rollback = Rollback::kStep;
    double copy_ms = 0;
    if (plan_) {
      try {
        auto next = plan::reconfigure(*plan_, model_.templates(), {id}, s.cluster);
        std::vector<plan::LayerCopy> copies = std::move(next.copies);
        if (!spares_.empty() && static_cast<int>(spares_.size()) >= smallest_pipeline(next.plan)) {
          // Enough spares for a pipeline: they join in the same reconfiguration.
          auto joined = plan::join(next.plan, model_.templates(), spares_, s.cluster);
          copies.insert(copies.end(), joined.copies.begin(), joined.copies.end());
          next.plan = std::move(joined.plan);
          spares_.clear();
        }
        copy_ms = adopt(std::move(next.plan), copies, {id});
      } catch (const ConfigError&) {
        // No live replica of some layer (or too few survivors): checkpoint the last committed
        // step and restart on a fresh plan.
        ++fatal_restarts_;
        spares_.clear();
        replan();
        r.cause = Cause::kRestart;
        r.downtime_ms = costs_.restart.restart_ms;
        return r;
      }
    } else {
      spares_.clear();
      replan();
    }
    r.downtime_ms =
        b.fixed_reconfigure_ms ? *b.fixed_reconfigure_ms : b.detection_ms + copy_ms + b.regroup_ms;
    return r;
  }
  live_.push_back(id);
  std::sort(live_.begin(), live_.end());
  r.rollback = Rollback::kNone;
  r.at_step_boundary = true;
  if (!plan_) {
    // Stalled: the join may make training possible again, from its stop checkpoint.
    spares_.clear();
    replan();
    r.cause = Cause::kRestart;
    r.downtime_ms = costs_.restart.restart_ms;
    return r;
  }
  spares_.push_back(id);
  if (static_cast<int>(spares_.size()) < smallest_pipeline(*plan_)) {
    r.no_op = true;  // wait for the next reconfiguration
    return r;
  }
  double copy_ms = 0;
  const std::vector<NodeId> joining = std::exchange(spares_, {});
  try {
    auto next = plan::join(*plan_, model_.templates(), joining, s.cluster);
    copy_ms = adopt(std::move(next.plan), next.copies, {});
  } catch (const ConfigError&) {
    replan();
  }
  r.downtime_ms = b.fixed_reconfigure_ms ? *b.fixed_reconfigure_ms : copy_ms + b.regroup_ms;
  return r;
}

}  // namespace bw::forecast
