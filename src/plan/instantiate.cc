#include "plan/instantiate.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <queue>

#include "core/check.h"

namespace bw::plan {

std::vector<int> split_batch(const std::vector<LinearTime>& times, int microbatches) {
  const int num = static_cast<int>(times.size());
  BW_CHECK(num >= 1, "no pipelines to split {} microbatches over", microbatches);
  if (microbatches < num) {
    throw ConfigError(
        fmt::format("{} microbatches cannot feed {} pipelines (each needs at least one); raise "
                    "--microbatches to >= {}",
                    microbatches, num, num));
  }
  std::vector<int> m(num, 1);
  // Min-heap on the time a pipeline would have with one more microbatch; ties to lower index.
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (int p = 0; p < num; ++p) heap.push({times[p].at(2), p});
  for (int left = microbatches - num; left > 0; --left) {
    auto [t, p] = heap.top();
    heap.pop();
    ++m[p];
    heap.push({times[p].at(m[p] + 1), p});
  }
  return m;
}

void resplit(Plan& plan, const Cluster& cluster) {
  std::vector<LinearTime> times;
  for (const auto& p : plan.pipelines)
    times.push_back({p.tmpl.estimate.fixed_ms, p.tmpl.estimate.per_microbatch_ms});
  std::vector<int> m = split_batch(times, plan.global_microbatches);
  for (size_t i = 0; i < m.size(); ++i) plan.pipelines[i].microbatches = m[i];
  update_predictions(plan, cluster);
}

namespace {

// Unbounded knapsack over node counts for a target time: can templates cover exactly N nodes
// with enough pipelines and at least `microbatches` capacity?
class Knapsack {
 public:
  // Only templates whose busiest node holds <= max_node_bytes of parameters are used.
  Knapsack(const TemplateSet& set, int num_nodes, int fault_tolerance, int microbatches,
           double max_node_bytes, PlanWork* work)
      : set_(set), n_(num_nodes), need_(fault_tolerance + 1), b_(microbatches), work_(work) {
    for (const auto& t : set.templates)
      if (t.num_nodes <= num_nodes && max_node_param_bytes(t) <= max_node_bytes)
        usable_.push_back(&t);
    // When there are at least as many microbatches as pipelines could ever be, only "enough
    // pipelines" matters (count capped at f + 1); otherwise the count is tracked exactly so it
    // never exceeds the microbatches.
    const int min_size = usable_.empty() ? 1 : usable_.front()->num_nodes;
    exact_count_ = microbatches < num_nodes / min_size;
    width_ = exact_count_ ? microbatches + 1 : need_ + 1;
  }

  // Capacity of one pipeline of template t within time tau (0: cannot take even one).
  long long capacity(const Template& t, double tau) const {
    const double a = t.estimate.fixed_ms, b = t.estimate.per_microbatch_ms;
    if (b <= 0) return tau >= a + b ? b_ : 0;
    double k = std::floor((tau - a) / b);
    if (!(k >= 1)) return 0;
    return static_cast<long long>(std::min<double>(k, b_));
  }

  // Returns the chosen (template index into usable_) list, or empty if infeasible.
  std::vector<int> solve(double tau) const {
    const long long kNone = -1;
    const size_t cells = static_cast<size_t>(n_ + 1) * width_;
    std::vector<long long> best(cells, kNone);
    std::vector<int> choice(cells, -1);
    auto idx = [&](int k, int c) { return static_cast<size_t>(k) * width_ + c; };
    best[idx(0, 0)] = 0;
    std::vector<long long> cap(usable_.size());
    for (size_t t = 0; t < usable_.size(); ++t) cap[t] = capacity(*usable_[t], tau);
    int64_t pairs = 0;
    for (int k = 0; k < n_; ++k) {
      for (int c = 0; c < width_; ++c) {
        const long long cur = best[idx(k, c)];
        if (cur == kNone) continue;
        for (size_t t = 0; t < usable_.size(); ++t) {
          ++pairs;
          if (cap[t] == 0) continue;
          const int nk = k + usable_[t]->num_nodes;
          if (nk > n_) break;  // ascending node counts
          int nc = c + 1;
          if (exact_count_) {
            if (nc >= width_) continue;
          } else {
            nc = std::min(nc, need_);
          }
          const long long v = std::min<long long>(cur + cap[t], b_);
          if (v > best[idx(nk, nc)]) {
            best[idx(nk, nc)] = v;
            choice[idx(nk, nc)] = static_cast<int>(t);
          }
        }
      }
    }
    if (work_) {
      work_->compose_cells += static_cast<int64_t>(n_) * width_;
      work_->compose_pairs += pairs;
    }
    int end_c = -1;
    for (int c = exact_count_ ? need_ : need_; c < width_; ++c) {
      if (best[idx(n_, c)] >= b_) {
        end_c = c;
        break;
      }
      if (!exact_count_) break;
    }
    if (end_c < 0) return {};
    // Walk back; the count coordinate is recovered by searching the predecessor cell whose value
    // produced this one.
    std::vector<int> picked;
    int k = n_, c = end_c;
    while (k > 0) {
      const int t = choice[idx(k, c)];
      BW_CHECK(t >= 0, "knapsack backtrack lost at ({}, {})", k, c);
      picked.push_back(t);
      const int pk = k - usable_[t]->num_nodes;
      int pc = -1;
      for (int cc = 0; cc < width_ && pc < 0; ++cc) {
        const long long prev = best[idx(pk, cc)];
        if (prev == kNone) continue;
        const int nc = exact_count_ ? cc + 1 : std::min(cc + 1, need_);
        if (nc == c && std::min<long long>(prev + cap[t], b_) == best[idx(k, c)]) pc = cc;
      }
      BW_CHECK(pc >= 0, "knapsack backtrack found no predecessor at ({}, {})", k, c);
      k = pk;
      c = pc;
    }
    return picked;
  }

  const Template& tmpl(int i) const { return *usable_[i]; }
  bool empty() const { return usable_.empty(); }

 private:
  const TemplateSet& set_;
  int n_, need_, b_;
  PlanWork* work_;
  bool exact_count_ = false;
  int width_ = 0;
  std::vector<const Template*> usable_;
};

double from_bits(std::uint64_t b) { return std::bit_cast<double>(b); }
std::uint64_t to_bits(double d) { return std::bit_cast<std::uint64_t>(d); }

}  // namespace

namespace {

// The min-max pipeline composition among templates holding <= max_node_bytes per node; nullopt
// when there is none.
std::optional<Composition> min_max_composition(const TemplateSet& templates, int num_nodes,
                                               int fault_tolerance, int microbatches,
                                               double max_node_bytes, PlanWork* work) {
  Knapsack ks(templates, num_nodes, fault_tolerance, microbatches, max_node_bytes, work);
  const double kHuge = 1e300;
  if (ks.empty() || ks.solve(kHuge).empty()) return std::nullopt;
  // Smallest feasible tau: feasibility is monotone, so bisect on the ordered bit patterns of
  // positive doubles (at most 64 probes, exact to the last bit).
  std::uint64_t lo = to_bits(0.0), hi = to_bits(kHuge);
  while (hi - lo > 1) {
    std::uint64_t mid = lo + (hi - lo) / 2;
    if (ks.solve(from_bits(mid)).empty()) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  std::vector<int> picked = ks.solve(from_bits(hi));
  std::map<int, int> counts;
  for (int t : picked) ++counts[ks.tmpl(t).num_nodes];
  Composition c;
  c.counts.assign(counts.begin(), counts.end());
  // The min-max time of the best split on these pipelines.
  std::vector<LinearTime> times;
  for (auto [n, k] : c.counts) {
    const Template* t = templates.find(n);
    c.max_node_param_bytes = std::max(c.max_node_param_bytes, max_node_param_bytes(*t));
    for (int i = 0; i < k; ++i)
      times.push_back({t->estimate.fixed_ms, t->estimate.per_microbatch_ms});
  }
  std::vector<int> m = split_batch(times, microbatches);
  for (size_t i = 0; i < m.size(); ++i) c.pipeline_ms = std::max(c.pipeline_ms, times[i].at(m[i]));
  c.step_ms = c.pipeline_ms;
  return c;
}

}  // namespace

Composition choose_composition(const TemplateSet& templates, int num_nodes, int fault_tolerance,
                               int microbatches, const Cluster* cluster, PlanWork* work) {
  if (fault_tolerance < 0)
    throw ConfigError(fmt::format("fault tolerance must be >= 0, got {}", fault_tolerance));
  if (templates.templates.empty())
    throw ConfigError("no pipeline template fits the model; add nodes or device memory");
  const int n0 = *templates.min_nodes();
  const int need = fault_tolerance + 1;
  if (static_cast<long long>(need) * n0 > num_nodes) {
    throw ConfigError(fmt::format(
        "fault tolerance {} needs {} pipelines of >= {} node(s) each ({} nodes), but there "
        "are {} nodes; lower --fault-tolerance to {} or add nodes",
        fault_tolerance, need, n0, static_cast<long long>(need) * n0, num_nodes,
        std::max(0, num_nodes / n0 - 1)));
  }
  if (microbatches < need) {
    throw ConfigError(
        fmt::format("{} microbatches cannot feed the {} pipelines fault tolerance {} needs; raise "
                    "--microbatches to >= {}",
                    microbatches, need, fault_tolerance, need));
  }
  const double kAll = std::numeric_limits<double>::infinity();
  std::optional<Composition> best =
      min_max_composition(templates, num_nodes, fault_tolerance, microbatches, kAll, work);
  if (!best) {
    throw ConfigError(fmt::format(
        "the templates ({} .. {} nodes) cannot cover exactly {} nodes with >= {} pipelines "
        "and <= {} microbatches' worth of pipelines; change --nodes or --fault-tolerance",
        n0, templates.templates.back().num_nodes, num_nodes, need, microbatches));
  }
  if (cluster == nullptr) return *best;
  // With the all-reduce: for each bound on the parameter bytes of the busiest node, the min-max
  // composition under it, scored by pipeline time + all-reduce; the best score wins.
  auto score = [&](Composition& c) {
    int pipelines = 0;
    for (auto [n, k] : c.counts) pipelines += k;
    c.allreduce_ms = allreduce_ms(pipelines, c.max_node_param_bytes, *cluster);
    c.step_ms = c.pipeline_ms + c.allreduce_ms;
  };
  score(*best);
  std::vector<double> bounds;
  for (const auto& t : templates.templates) bounds.push_back(max_node_param_bytes(t));
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  // One pipeline on every node has no all-reduce at all; the bound argument needs P >= 2, so
  // this candidate is scored on its own.
  if (fault_tolerance == 0) {
    if (const Template* whole = templates.find(num_nodes)) {
      Composition c;
      c.counts = {{num_nodes, 1}};
      c.max_node_param_bytes = max_node_param_bytes(*whole);
      c.pipeline_ms = whole->iteration_ms(microbatches);
      score(c);
      if (c.step_ms < best->step_ms) best = c;
    }
  }
  const double unconstrained = best->max_node_param_bytes;
  for (double q : bounds) {
    if (q >= unconstrained) break;  // the unconstrained optimum is already scored
    auto c = min_max_composition(templates, num_nodes, fault_tolerance, microbatches, q, work);
    if (!c) continue;
    score(*c);
    if (c->step_ms < best->step_ms) best = c;
  }
  return *best;
}

Plan instantiate(const TemplateSet& templates, const std::vector<NodeId>& nodes,
                 int fault_tolerance, int microbatches, const Cluster& cluster, PlanWork* work) {
  const int num_nodes = static_cast<int>(nodes.size());
  Composition comp =
      choose_composition(templates, num_nodes, fault_tolerance, microbatches, &cluster, work);
  Plan plan;
  plan.num_layers = templates.num_layers;
  plan.devices_per_node = templates.devices_per_node;
  plan.microbatch_size = templates.microbatch_size;
  plan.global_microbatches = microbatches;
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  size_t next = 0;
  // Largest pipelines first, on consecutive nodes.
  for (auto it = comp.counts.rbegin(); it != comp.counts.rend(); ++it) {
    for (int k = 0; k < it->second; ++k) {
      Pipeline p;
      p.tmpl = *templates.find(it->first);
      p.nodes.assign(sorted.begin() + next, sorted.begin() + next + it->first);
      next += it->first;
      plan.pipelines.push_back(std::move(p));
    }
  }
  BW_CHECK(next == sorted.size(), "composition used {} of {} nodes", next, sorted.size());
  resplit(plan, cluster);
  validate_plan(plan);
  return plan;
}

Plan instantiate(const TemplateSet& templates, int num_nodes, int fault_tolerance, int microbatches,
                 const Cluster& cluster, PlanWork* work) {
  std::vector<NodeId> nodes;
  for (int i = 0; i < num_nodes; ++i) nodes.emplace_back(i);
  return instantiate(templates, nodes, fault_tolerance, microbatches, cluster, work);
}

}  // namespace bw::plan
