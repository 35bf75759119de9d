// How far a template search that keeps one best sub-pipeline per state (the memo of Oobleck's
// planner, SOSP'23 section 4.1) lands from the exact search, on the same cost model.
//
//   build-pure/bench/plan/bw_plan_one_best_gap
//
// The one-best search is the suffix DP of templates.cc with a single label per state (least
// sum + (m - 1) max, memory checked with its own stage count). Prints, per profile and cluster,
// how many node counts it gets wrong (worse or infeasible) and the largest relative gap.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "plan/synth.h"
#include "plan/templates.h"

namespace bw::plan {
namespace {

// Least T(m) found per node count n = 1..N (inf when none), one label per state.
std::vector<double> one_best(const Profile& p, const Cluster& c, int m) {
  const CostModel model(p, c, CostOptions{m, 4});
  const int L = p.num_layers(), g = c.devices_per_node, U = c.num_nodes * g;
  const double inf = std::numeric_limits<double>::infinity();
  struct Best {
    double max_ms = 0, sum_ms = 0;
    int stages = 0;
    bool ok = false;
  };
  std::vector<Best> best(static_cast<size_t>(L + 1) * (U + 1));
  auto at = [&](int i, int u) -> Best& { return best[static_cast<size_t>(i) * (U + 1) + u]; };
  at(L, 0) = {0, 0, 0, true};
  for (int i = L - 1; i >= 0; --i)
    for (int u = 1; u <= std::min(U, (L - i) * g); ++u) {
      Best& b = at(i, u);
      double b_cost = inf;
      for (int d = 1; d <= std::min((u - 1) % g + 1, model.max_stage_devices()); ++d)
        for (int e = i + 1; e <= L; ++e) {
          const int rest = u - d;
          if ((e == L) != (rest == 0)) continue;
          const Best& nb = at(e, rest);
          if (!nb.ok) continue;
          const int in_flight = std::min(m, nb.stages + 1);
          if (model.stage_memory(i, e - i, d, in_flight) > c.device_memory_bytes()) continue;
          double t = model.stage_local_ms(i, e - i, d);  // compute share + shard collectives
          if (e < L) t += model.comm_ms(e - 1, rest % g != 0);
          const double mx = std::max(t, nb.max_ms), sm = t + nb.sum_ms;
          const double cost = sm + (m - 1) * mx;
          if (cost < b_cost) b_cost = cost, b = {mx, sm, nb.stages + 1, true};
        }
    }
  std::vector<double> out;
  for (int n = 1; n <= c.num_nodes; ++n) {
    const Best& b = at(0, n * g);
    out.push_back(b.ok ? b.sum_ms + (m - 1) * b.max_ms : inf);
  }
  return out;
}

void row(const std::string& name, const Profile& p, const Cluster& c, int m) {
  TemplateOptions opt;
  opt.cost.microbatches = m;
  TemplateSet exact = generate_templates(p, c, opt);
  std::vector<double> ob = one_best(p, c, m);
  int feasible = 0, wrong = 0, missed = 0;
  double worst = 0;
  for (int n = 1; n <= c.num_nodes; ++n) {
    const Template* t = exact.find(n);
    if (t == nullptr) continue;
    ++feasible;
    const double want = t->iteration_ms(m), got = ob[n - 1];
    if (got == std::numeric_limits<double>::infinity()) {
      ++missed;
    } else if (got > want * (1 + 1e-9)) {
      ++wrong;
      worst = std::max(worst, got / want - 1);
    }
  }
  fmt::print("{:<34} {:>4} {:>9} {:>6} {:>8} {:>9.2f}%\n", name, m, feasible, wrong, missed,
             100 * worst);
}

}  // namespace
}  // namespace bw::plan

int main() {
  using namespace bw::plan;
  fmt::print("{:<34} {:>4} {:>9} {:>6} {:>8} {:>10}\n", "profile on cluster", "m", "templates",
             "worse", "missed", "worst gap");
  for (const char* model : {"gpt3-2.7b", "gpt3-6.7b", "gpt3-13b"})
    for (double mem : {80.0, 40.0})
      for (int m : {8, 64}) {
        // 8-sample microbatches, so stages may shard over a node's 8 devices.
        Profile p = synthesize_profile(find_model(model), find_device("a100"), 8);
        Cluster c;
        c.num_nodes = 16;
        c.devices_per_node = 8;
        c.device_memory_gb = mem;
        row(fmt::format("{} on 16x8 x {:.0f} GB", model, mem), p, c, m);
      }
  return 0;
}
