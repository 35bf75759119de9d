#include "plan/templates.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "core/check.h"

namespace bw::plan {
namespace {

// A Pareto label of the suffix DP: a way to place layers [i, L) on the last u devices.
struct Label {
  double max_ms;  // bottleneck stage time of the suffix
  double sum_ms;  // sum of the suffix's stage times
  int stages;     // stages in the suffix, capped at m (only min(m, stages + 1) matters)
  int end;        // first stage's layers are [i, end)
  int devices;    // first stage's device count
  int prev;       // label index in state (end, u - devices)
};

bool dominates(const Label& a, const Label& b) {
  return a.max_ms <= b.max_ms && a.sum_ms <= b.sum_ms && a.stages <= b.stages;
}

// Keeps the non-dominated labels, in a deterministic order (max, sum, stages, end, devices).
void prune(std::vector<Label>& cand, std::vector<Label>& out) {
  std::sort(cand.begin(), cand.end(), [](const Label& a, const Label& b) {
    if (a.max_ms != b.max_ms) return a.max_ms < b.max_ms;
    if (a.sum_ms != b.sum_ms) return a.sum_ms < b.sum_ms;
    if (a.stages != b.stages) return a.stages < b.stages;
    if (a.end != b.end) return a.end < b.end;
    return a.devices < b.devices;
  });
  out.clear();
  for (const auto& c : cand) {
    bool dominated = false;
    // Kept labels have max_ms <= c.max_ms; scan from the most recent (closest in max).
    for (auto it = out.rbegin(); it != out.rend() && !dominated; ++it)
      dominated = dominates(*it, c);
    if (!dominated) out.push_back(c);
  }
}

}  // namespace

int Template::stage_of_layer(int layer) const {
  for (int s = 0; s < num_stages(); ++s)
    if (layer < stages[s].end_layer()) return s;
  BW_CHECK(false, "layer {} beyond the template's {} stages", layer, num_stages());
  return -1;
}

std::optional<int> TemplateSet::min_nodes() const {
  if (templates.empty()) return std::nullopt;
  return templates.front().num_nodes;
}

const Template* TemplateSet::find(int num_nodes) const {
  for (const auto& t : templates)
    if (t.num_nodes == num_nodes) return &t;
  return nullptr;
}

ScheduleEstimate one_f_one_b_estimate(const Template& t) {
  return {t.sum_stage_ms - t.max_stage_ms, t.max_stage_ms, t.peak_memory_bytes};
}

Template make_template(const CostModel& model, const std::vector<StageShape>& shape,
                       int num_nodes) {
  PipelineCost cost = model.evaluate(shape, num_nodes);
  const int g = model.devices_per_node();
  Template t;
  t.num_nodes = num_nodes;
  t.devices_per_node = g;
  t.microbatches = model.options().microbatches;
  int offset = 0;
  for (size_t s = 0; s < shape.size(); ++s) {
    const auto& sh = shape[s];
    Stage st;
    st.first_layer = sh.first_layer;
    st.num_layers = sh.num_layers;
    st.node = offset / g;
    st.first_device = offset % g;
    st.num_devices = sh.num_devices;
    st.forward_ms = model.forward_ms(sh.first_layer, sh.num_layers) / sh.num_devices;
    st.backward_ms = model.backward_ms(sh.first_layer, sh.num_layers) / sh.num_devices;
    st.stage_ms = cost.stage_ms[s];
    st.comm_ms =
        cost.stage_ms[s] - model.stage_compute_ms(sh.first_layer, sh.num_layers, sh.num_devices);
    st.param_bytes = model.param_bytes(sh.first_layer, sh.num_layers);
    st.memory_bytes = cost.stage_memory[s];
    t.stages.push_back(st);
    offset += sh.num_devices;
  }
  t.sum_stage_ms = cost.sum_ms;
  t.max_stage_ms = cost.max_ms;
  t.bottleneck = cost.bottleneck;
  t.peak_memory_bytes = cost.peak_memory_bytes;
  t.estimate = one_f_one_b_estimate(t);
  return t;
}

TemplateSet generate_templates(const Profile& profile, const Cluster& cluster,
                               const TemplateOptions& options) {
  validate(cluster);
  const CostModel model(profile, cluster, options.cost);
  const int L = profile.num_layers();
  const int g = cluster.devices_per_node;
  const int m = options.cost.microbatches;
  const int max_nodes = options.max_nodes > 0 ? options.max_nodes : cluster.num_nodes;
  const int min_nodes = std::max(1, options.min_nodes);
  BW_CHECK(min_nodes <= max_nodes, "node range [{}, {}] is empty", min_nodes, max_nodes);
  if (!options.schedule_kinds.empty())
    BW_CHECK(static_cast<bool>(options.evaluator), "schedule kinds given without an evaluator");
  const int U = max_nodes * g;
  const double mem_limit = cluster.device_memory_bytes();
  const double state = options.cost.state_bytes_per_param_byte;

  // labels[i * (U + 1) + u]: Pareto set for layers [i, L) on the last u devices.
  std::vector<std::vector<Label>> labels(static_cast<size_t>(L + 1) * (U + 1));
  auto at = [&](int i, int u) -> std::vector<Label>& {
    return labels[static_cast<size_t>(i) * (U + 1) + u];
  };
  at(L, 0).push_back({0, 0, 0, L, 0, -1});

  // State (i, u) depends only on states with a larger first layer, so all u of one i are
  // independent: they are split over threads, and each state's result is the same whatever
  // thread computes it (deterministic output).
  auto compute_state = [&](int i, int u, std::vector<Label>& cand) {
    cand.clear();
    // The first stage takes devices [u - d, u) counted from the end; it must not straddle
    // the node boundary below device u - 1.
    const int d_max = (u - 1) % g + 1;
    for (int d = 1; d <= d_max; ++d) {
      const int rest = u - d;
      const bool next_same_node = rest % g != 0;
      for (int e = i + 1; e <= L; ++e) {
        const int count = e - i;
        const double fixed_mem = state * model.param_bytes(i, count);
        const double act = model.activation_bytes(i, count) / d;
        if (fixed_mem + act > mem_limit) break;  // grows with e
        if ((e == L) != (rest == 0)) continue;
        if (rest > (L - e) * g) continue;
        const auto& next = at(e, rest);
        if (next.empty()) continue;
        double t = model.stage_compute_ms(i, count, d);
        if (e < L) t += model.comm_ms(e - 1, next_same_node);
        for (int k = 0; k < static_cast<int>(next.size()); ++k) {
          const Label& nl = next[k];
          const int in_flight = std::min(m, nl.stages + 1);
          if (fixed_mem + in_flight * act > mem_limit) continue;
          cand.push_back(
              {std::max(t, nl.max_ms), t + nl.sum_ms, std::min(m, nl.stages + 1), e, d, k});
        }
      }
    }
    if (!cand.empty()) prune(cand, at(i, u));
  };
  const int threads = std::max(1, options.threads);
  std::vector<std::vector<Label>> scratch(threads);
  for (int i = L - 1; i >= 0; --i) {
    const int u_max = std::min(U, (L - i) * g);
    if (threads == 1 || u_max < 4 * threads) {
      for (int u = 1; u <= u_max; ++u) compute_state(i, u, scratch[0]);
      continue;
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int u = 1 + t; u <= u_max; u += threads) compute_state(i, u, scratch[t]);
      });
    }
    for (auto& th : pool) th.join();
  }

  TemplateSet set;
  set.num_layers = L;
  set.devices_per_node = g;
  set.microbatch_size = profile.microbatch_size;
  for (int n = min_nodes; n <= max_nodes; ++n) {
    if (n * g > L * g) break;  // more nodes than layers: no stage for some node
    const auto& root = at(0, n * g);
    if (root.empty()) continue;
    int best = -1;
    double best_ms = std::numeric_limits<double>::infinity();
    for (int k = 0; k < static_cast<int>(root.size()); ++k) {
      double ms = root[k].sum_ms + (m - 1) * root[k].max_ms;
      if (ms < best_ms) best_ms = ms, best = k;
    }
    std::vector<StageShape> shape;
    int i = 0, u = n * g, k = best;
    while (i < L) {
      const Label& l = at(i, u)[k];
      shape.push_back({i, l.end - i, l.devices});
      i = l.end;
      u -= l.devices;
      k = l.prev;
    }
    BW_CHECK(u == 0, "reconstruction left {} devices", u);
    Template t = make_template(model, shape, n);
    if (!options.schedule_kinds.empty()) {
      // Schedule-aware: the kind the evaluator predicts fastest at m, among those that fit.
      std::optional<std::pair<std::string, ScheduleEstimate>> pick;
      for (const auto& kind : options.schedule_kinds) {
        auto est = options.evaluator(t, kind);
        if (!est || est->peak_memory_bytes > mem_limit) continue;
        double ms = est->fixed_ms + est->per_microbatch_ms * m;
        if (!pick || ms < pick->second.fixed_ms + pick->second.per_microbatch_ms * m)
          pick = std::make_pair(kind, *est);
      }
      if (!pick) continue;  // no kind fits this node count
      t.schedule = pick->first;
      t.estimate = pick->second;
      t.peak_memory_bytes = pick->second.peak_memory_bytes;
    }
    set.templates.push_back(std::move(t));
  }
  return set;
}

}  // namespace bw::plan
