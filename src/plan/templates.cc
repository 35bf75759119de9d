#include "plan/templates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "core/check.h"

namespace bw::plan {
namespace {

// A Pareto label of the suffix DP: a way to place layers [i, L) on the last u devices.
struct Label {
  double max_ms;  // bottleneck stage time of the suffix
  double sum_ms;  // sum of the suffix's stage times
  int stages;     // stages in the suffix, capped at stage_cap (see generate_templates)
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

// Iteration time of one feasible pipeline on n nodes: each node split into stages of w devices
// (g / w of them, and one of the remainder), layers split so the largest stage compute is minimal
// (bisection + greedy), then extra splits to make exactly that many stages. +inf when it does not
// fit or there are too few layers.
double balanced_bound(const CostModel& model, int n, int w) {
  const int L = model.num_layers(), g = model.devices_per_node();
  std::vector<int> node_widths(g / w, w);
  if (g % w != 0) node_widths.push_back(g % w);
  const int num_stages = n * static_cast<int>(node_widths.size());
  if (num_stages > L) return std::numeric_limits<double>::infinity();
  auto greedy = [&](double cap, std::vector<int>& starts) {
    starts.assign(1, 0);
    int first = 0;
    for (int l = 0; l < L; ++l) {
      if (l > first && model.compute_ms(first, l - first + 1) > cap) {
        starts.push_back(l);
        first = l;
      }
    }
    return static_cast<int>(starts.size());
  };
  double lo = 0, hi = model.compute_ms(0, L);
  std::vector<int> starts;
  for (int it = 0; it < 60; ++it) {
    const double mid = (lo + hi) / 2;
    if (greedy(mid, starts) <= num_stages) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  greedy(hi, starts);
  // Split the longest stages until there are exactly num_stages.
  while (static_cast<int>(starts.size()) < num_stages) {
    int best = -1, best_len = 1;
    for (size_t k = 0; k < starts.size(); ++k) {
      const int end = k + 1 < starts.size() ? starts[k + 1] : L;
      if (end - starts[k] > best_len) best_len = end - starts[k], best = static_cast<int>(k);
    }
    if (best < 0) return std::numeric_limits<double>::infinity();
    starts.insert(starts.begin() + best + 1, starts[best] + best_len / 2);
  }
  if (static_cast<int>(starts.size()) > num_stages) return std::numeric_limits<double>::infinity();
  std::vector<StageShape> shape;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int end = k + 1 < starts.size() ? starts[k + 1] : L;
    shape.push_back({starts[k], end - starts[k], node_widths[k % node_widths.size()]});
  }
  PipelineCost c = model.evaluate(shape, n);
  return c.fits ? c.iteration_ms : std::numeric_limits<double>::infinity();
}

}  // namespace

int Template::stage_of_layer(int layer) const {
  for (const auto& c : chunks)
    if (layer >= c.first_layer && layer < c.end_layer()) return c.stage;
  BW_CHECK(false, "layer {} is in none of the template's {} chunks", layer, chunks.size());
  return -1;
}

std::vector<std::pair<int, int>> Template::layers_of_stage(int stage) const {
  std::vector<std::pair<int, int>> out;
  for (const auto& c : chunks)
    if (c.stage == stage) out.emplace_back(c.first_layer, c.end_layer());
  return out;
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
  ScheduleEstimate e;
  e.fixed_ms = t.sum_stage_ms - t.max_stage_ms;
  e.per_microbatch_ms = t.max_stage_ms;
  e.peak_memory_bytes = t.peak_memory_bytes;
  return e;
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
    const double share = model.sample_share(sh.num_devices);
    st.forward_ms = model.forward_ms(sh.first_layer, sh.num_layers) * share;
    st.backward_ms = (model.backward_ms(sh.first_layer, sh.num_layers) +
                      (model.recompute() ? model.forward_ms(sh.first_layer, sh.num_layers) : 0)) *
                     share;
    st.shard_comm_ms = model.shard_comm_ms(sh.first_layer, sh.num_layers, sh.num_devices);
    st.stage_ms = cost.stage_ms[s];
    st.comm_ms =
        cost.stage_ms[s] - model.stage_local_ms(sh.first_layer, sh.num_layers, sh.num_devices);
    st.param_bytes = model.param_bytes(sh.first_layer, sh.num_layers);
    st.memory_bytes = cost.stage_memory[s];
    t.stages.push_back(st);
    t.chunks.push_back({sh.first_layer, sh.num_layers, static_cast<int>(s)});
    offset += sh.num_devices;
  }
  t.sum_stage_ms = cost.sum_ms;
  t.max_stage_ms = cost.max_ms;
  t.bottleneck = cost.bottleneck;
  t.peak_memory_bytes = cost.peak_memory_bytes;
  t.estimate = one_f_one_b_estimate(t);
  return t;
}

void set_schedule(Template& t, const std::string& kind, ScheduleEstimate estimate,
                  const CostModel& model) {
  t.schedule = kind;
  t.estimate = std::move(estimate);
  t.peak_memory_bytes = t.estimate.peak_memory_bytes;
  if (!t.estimate.chunks.empty()) {
    t.chunks = t.estimate.chunks;
    for (auto& st : t.stages) st.param_bytes = 0;
    for (const auto& c : t.chunks)
      t.stages[c.stage].param_bytes += model.param_bytes(c.first_layer, c.num_layers);
  }
  if (t.estimate.stage_memory_bytes.size() == t.stages.size())
    for (size_t k = 0; k < t.stages.size(); ++k)
      t.stages[k].memory_bytes = t.estimate.stage_memory_bytes[k];
  // The template carries them; the estimate keeps only the time and peak.
  t.estimate.chunks.clear();
  t.estimate.stage_memory_bytes.clear();
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
  // A node needs at least one layer, so no pipeline spans more than L nodes.
  const int top_nodes = std::min(max_nodes, L);
  const int U = top_nodes * g;
  const double mem_limit = cluster.device_memory_bytes();
  const int w_max = model.max_stage_devices();  // widest stage: min(g, --max-stage-devices, b)
  // Per-device memory of a stage [i, i + count) on d devices is fixed(i, count, d) +
  // in_flight * act(i, count, d) (cost_model.h); both parts are non-decreasing in count.
  auto fixed_bytes = [&](int i, int count, int d) {
    return model.stage_state_bytes(i, count, d) + model.stage_transient_bytes(i, count, d);
  };

  // Stage counts in labels only matter through memory checks "in flight <= K" of stage shapes
  // whose tolerance K = floor((M - fixed) / act) is below min(m, L) (others always fit once
  // they fit with one microbatch). Counts >= the largest such K fail all of those checks alike,
  // so they are merged into one (stage_cap); with no memory pressure the count drops out.
  int stage_cap = 0;
  for (int i = 0; i < L; ++i)
    for (int d = 1; d <= w_max; ++d)
      for (int count = 1; i + count <= L; ++count) {
        const double fixed = fixed_bytes(i, count, d);
        if (fixed > mem_limit) break;  // grows with count
        const double act = model.stage_activation_bytes(i, count, d);
        if (act <= 0) continue;
        const double k = std::floor((mem_limit - fixed) / act);
        if (k >= 1 && k < std::min(m, L)) stage_cap = std::max(stage_cap, static_cast<int>(k));
      }

  // labels[i * (U + 1) + u]: Pareto set for layers [i, L) on the last u devices.
  std::vector<std::vector<Label>> labels(static_cast<size_t>(L + 1) * (U + 1));
  auto at = [&](int i, int u) -> std::vector<Label>& {
    return labels[static_cast<size_t>(i) * (U + 1) + u];
  };
  at(L, 0).push_back({0, 0, 0, L, 0, -1});

  // State (i, u) depends only on states with a larger first layer, so all u of one i are
  // independent: they are split over threads, and each state's result is the same whatever
  // thread computes it (deterministic output).
  // Upper bounds on each root's optimum from simple feasible pipelines (every node split into
  // stages of one width w, for each allowed w; layers split to balance compute). A label at (i, u)
  // can only end in roots n >= ceil(u / g), and extending it never lowers (m - 1) max + sum, so a
  // label above every such root's bound is never part of an optimum and is dropped (a small
  // relative slack keeps rounding from dropping an optimum equal to its bound).
  std::vector<double> bound_from(top_nodes + 2, std::numeric_limits<double>::infinity());
  {
    double running = 0;
    for (int n = top_nodes; n >= 1; --n) {
      if (n >= min_nodes) {
        // The best of the simple pipelines over every allowed stage width.
        double best = std::numeric_limits<double>::infinity();
        for (int w = 1; w <= w_max; ++w) best = std::min(best, balanced_bound(model, n, w));
        running = std::max(running, best);
      }
      bound_from[n] = running * (1 + 1e-9);
    }
  }

  auto compute_state = [&](int i, int u, std::vector<Label>& cand) {
    cand.clear();
    const double bound = bound_from[(u + g - 1) / g];
    // The first stage takes devices [u - d, u) counted from the end; it must not straddle
    // the node boundary below device u - 1.
    // It is at most w_max wide (wider stages cannot run).
    const int d_max = std::min((u - 1) % g + 1, w_max);
    for (int d = 1; d <= d_max; ++d) {
      const int rest = u - d;
      const bool next_same_node = rest % g != 0;
      for (int e = i + 1; e <= L; ++e) {
        const int count = e - i;
        const double fixed_mem = fixed_bytes(i, count, d);
        const double act = model.stage_activation_bytes(i, count, d);
        if (fixed_mem + act > mem_limit) break;  // grows with e
        if ((e == L) != (rest == 0)) continue;
        if (rest > (L - e) * g) continue;
        const auto& next = at(e, rest);
        if (next.empty()) continue;
        // Compute share + shard collectives; grows with e.
        const double compute = model.stage_local_ms(i, count, d);
        if (m * compute > bound) break;  // cost >= (m - 1) t + t
        double t = compute;
        if (e < L) t += model.comm_ms(e - 1, next_same_node);
        // `next` is sorted by max_ms. Labels with max_ms <= t all give bottleneck t, so among
        // them one dominated in (stages, sum) by an earlier one is dropped right away (pruning
        // would drop it anyway); the rest are kept for prune().
        const size_t first_big = static_cast<size_t>(
            std::upper_bound(next.begin(), next.end(), t,
                             [](double v, const Label& l) { return v < l.max_ms; }) -
            next.begin());
        const size_t before = cand.size();
        for (size_t k = 0; k < next.size(); ++k) {
          const Label& nl = next[k];
          const int in_flight = std::min(m, nl.stages + 1);
          if (fixed_mem + in_flight * act > mem_limit) continue;
          const Label c{
              std::max(t, nl.max_ms), t + nl.sum_ms, std::min(stage_cap, nl.stages + 1), e, d,
              static_cast<int>(k)};
          if ((m - 1) * c.max_ms + c.sum_ms > bound) continue;
          if (k < first_big) {
            bool dominated = false;
            for (size_t q = before; q < cand.size() && !dominated; ++q)
              dominated = dominates(cand[q], c);
            if (dominated) continue;
          }
          cand.push_back(c);
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
  for (int n = min_nodes; n <= top_nodes; ++n) {
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
    set.templates.push_back(make_template(model, shape, n));
  }
  choose_schedules(set, profile, cluster, options);
  return set;
}

void choose_schedules(TemplateSet& set, const Profile& profile, const Cluster& cluster,
                      const TemplateOptions& options) {
  if (options.schedule_kinds.empty()) return;
  BW_CHECK(static_cast<bool>(options.evaluator), "schedule kinds given without an evaluator");
  const CostModel model(profile, cluster, options.cost);
  const double mem_limit = cluster.device_memory_bytes();
  const int m = options.cost.microbatches;
  const int threads = std::max(1, options.threads);
  // Schedule-aware: the kind the evaluator predicts fastest at m, among those that fit. Node
  // counts are independent, so they are spread over threads (same result on any thread).
  auto choose_schedule = [&](Template& t) {
    std::optional<std::pair<std::string, ScheduleEstimate>> pick;
    for (const auto& kind : options.schedule_kinds) {
      auto est = options.evaluator(t, kind);
      if (!est || est->peak_memory_bytes > mem_limit) continue;
      double ms = est->fixed_ms + est->per_microbatch_ms * m;
      if (!pick || ms < pick->second.fixed_ms + pick->second.per_microbatch_ms * m)
        pick = std::make_pair(kind, *est);
    }
    // When no simulated kind fits, the closed-form 1F1B template (which fits under the
    // closed-form model) stays, so that node counts have no gaps.
    if (pick) set_schedule(t, pick->first, pick->second, model);
  };
  const int count = static_cast<int>(set.templates.size());
  if (threads == 1 || count < 2) {
    for (auto& t : set.templates) choose_schedule(t);
  } else {
    std::vector<std::thread> pool;
    for (int w = 0; w < std::min(threads, count); ++w) {
      pool.emplace_back([&, w] {
        for (int k = w; k < count; k += threads) choose_schedule(set.templates[k]);
      });
    }
    for (auto& th : pool) th.join();
  }
}

}  // namespace bw::plan
