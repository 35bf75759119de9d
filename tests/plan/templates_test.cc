// Templates equal exhaustive search: every contiguous partition into stages, every device count
// per stage and every packing of stages onto nodes, on a grid of small instances including
// memory-infeasible ones.
#include "plan/templates.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "plan/plan.h"
#include "test_util.h"

namespace bw::plan {
namespace {

// Exhaustive: the best feasible iteration time on exactly n nodes, or +inf. Every width 1..g is
// tried; CostModel::evaluate rejects stages wider than the runtime can run (d > b).
double brute_force(const CostModel& model, int n) {
  const int L = model.num_layers(), g = model.devices_per_node();
  double best = std::numeric_limits<double>::infinity();
  std::vector<StageShape> cur;
  std::function<void(int, int)> rec = [&](int layer, int offset) {
    if (layer == L) {
      if (offset != n * g) return;
      PipelineCost c = model.evaluate(cur, n);
      if (c.fits) best = std::min(best, c.iteration_ms);
      return;
    }
    for (int e = layer + 1; e <= L; ++e) {
      for (int d = 1; d <= g; ++d) {
        if (offset + d > n * g || offset / g != (offset + d - 1) / g) continue;
        cur.push_back({layer, e - layer, d});
        rec(e, offset + d);
        cur.pop_back();
      }
    }
  };
  rec(0, 0);
  return best;
}

struct Case {
  int layers, nodes, g, m;
  double memory_gb;
  unsigned seed;
  bool heavy_comm;
  int microbatch_size;  // b: stages may shard over at most b devices
  bool recompute;       // activation recomputation (CostOptions::recompute)
};

struct Coverage {
  int feasible = 0, infeasible = 0, more_stages_than_nodes = 0;
  int sharded = 0;            // the optimum has a sharded stage
  int fits_only_sharded = 0;  // feasible, but not with one device per stage
  int uneven_share = 0;       // the optimum has a stage with d not dividing b
  int fits_only_recompute = 0;  // feasible recomputing, not without
};

// Returns "" or the first problem with one case.
std::string check_case(const Case& c, Coverage& cov) {
  Profile p = random_profile(c.layers, c.seed, c.heavy_comm, c.microbatch_size);
  Cluster cl = small_cluster(c.nodes, c.g, c.memory_gb);
  TemplateOptions opt;
  opt.cost.microbatches = c.m;
  opt.cost.recompute = c.recompute;
  TemplateSet set = generate_templates(p, cl, opt);
  CostModel model(p, cl, opt.cost);
  CostOptions unsharded = opt.cost;
  unsharded.max_stage_devices = 1;
  CostModel plain(p, cl, unsharded);
  CostOptions keep_all = opt.cost;
  keep_all.recompute = false;
  CostModel no_recompute(p, cl, keep_all);
  for (int n = 1; n <= c.nodes; ++n) {
    double want = brute_force(model, n);
    const Template* t = set.find(n);
    if (std::isinf(want)) {
      ++cov.infeasible;
      if (t != nullptr) return fmt::format("n={}: search found a template, brute force none", n);
      continue;
    }
    ++cov.feasible;
    if (t == nullptr) return fmt::format("n={}: no template, brute force {}", n, want);
    if (t->num_stages() > n) ++cov.more_stages_than_nodes;
    bool sharded = false, uneven = false;
    for (const auto& s : t->stages) {
      if (s.num_devices > c.microbatch_size)
        return fmt::format("n={}: a stage on {} devices with microbatch size {}", n, s.num_devices,
                           c.microbatch_size);
      sharded = sharded || s.sharded();
      uneven = uneven || c.microbatch_size % s.num_devices != 0;
    }
    cov.sharded += sharded;
    cov.uneven_share += uneven;
    if (c.g > 1 && std::isinf(brute_force(plain, n))) ++cov.fits_only_sharded;
    if (c.recompute && std::isinf(brute_force(no_recompute, n))) ++cov.fits_only_recompute;
    double got = t->iteration_ms(c.m);
    if (std::abs(got - want) > 1e-9 * want)
      return fmt::format("n={}: search {} brute force {}", n, got, want);
    // The template itself re-evaluates to what it claims and fits.
    std::vector<StageShape> shape;
    for (const auto& s : t->stages) shape.push_back({s.first_layer, s.num_layers, s.num_devices});
    PipelineCost re = model.evaluate(shape, n);
    if (!re.fits) return fmt::format("n={}: template does not fit", n);
    if (std::abs(re.iteration_ms - got) > 1e-9 * want)
      return fmt::format("n={}: template re-evaluates to {} not {}", n, re.iteration_ms, got);
  }
  return "";
}

std::vector<Case> grid() {
  std::vector<Case> cases;
  unsigned seed = 1;
  for (int layers : {1, 2, 3, 5, 7, 9})
    for (int nodes : {1, 2, 3, 4})
      for (int g : {1, 2, 3, 4})
        for (int m : {1, 4, 16}) {
          if (nodes * g > 10 && layers > 7) continue;  // keep the oracle fast
          // Memory from roomy to tight (some node counts and some instances infeasible).
          for (double mem : {100.0, 3.0, 2.0, 1.5, 1.2, 0.9})
            for (bool heavy : {false, true}) {
              // Microbatch sizes 1 (no sharding) to 4, some not divisible by the width.
              const int b = static_cast<int>(seed % 4) + 1;
              const bool recompute = seed / 4 % 2 == 1;
              cases.push_back({layers, nodes, g, m, mem, seed++, heavy, b, recompute});
            }
        }
  return cases;
}

TEST(Templates, EqualBruteForceOnGrid) {
  int failures = 0, checked = 0;
  Coverage cov;
  for (const Case& c : grid()) {
    std::string problem = check_case(c, cov);
    ++checked;
    if (!problem.empty() && failures++ < 5) {
      ADD_FAILURE() << fmt::format("{} layers, {} nodes x {}, m={}, b={}, {} GB, seed {}{}: {}",
                                   c.layers, c.nodes, c.g, c.m, c.microbatch_size, c.memory_gb,
                                   c.seed, c.heavy_comm ? " heavy comm" : "", problem);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << checked << " cases";
  // The grid is only a test if it covers both outcomes, and nodes split into several stages.
  EXPECT_GT(cov.feasible, 1000);
  EXPECT_GT(cov.infeasible, 1000);
  EXPECT_GT(cov.more_stages_than_nodes, 50);
  // Sharded stages are chosen, some with an uneven split of the samples, and some node counts fit
  // only because stages are sharded.
  EXPECT_GT(cov.sharded, 200);
  EXPECT_GT(cov.uneven_share, 20);
  EXPECT_GT(cov.fits_only_sharded, 50);
  // Recomputation is searched too, and some node counts fit only with it.
  EXPECT_GT(cov.fits_only_recompute, 50);
  fmt::print(
      "{} feasible, {} infeasible, {} sharded, {} uneven, {} fit only sharded, {} only "
      "recomputing\n",
      cov.feasible, cov.infeasible, cov.sharded, cov.uneven_share, cov.fits_only_sharded,
      cov.fits_only_recompute);
}

TEST(Templates, TenLayersFourNodesOfFour) {
  for (unsigned seed = 100; seed < 102; ++seed) {
    Profile p = random_profile(10, seed, seed % 2 == 1);
    Cluster cl = small_cluster(4, 4, 2.0);
    TemplateOptions opt;
    opt.cost.microbatches = 8;
    TemplateSet set = generate_templates(p, cl, opt);
    CostModel model(p, cl, opt.cost);
    for (int n = 1; n <= 4; ++n) {
      double want = brute_force(model, n);
      const Template* t = set.find(n);
      if (std::isinf(want)) {
        EXPECT_EQ(t, nullptr);
      } else {
        ASSERT_NE(t, nullptr) << "seed " << seed << " n=" << n;
        EXPECT_NEAR(t->iteration_ms(8), want, 1e-9 * want) << "seed " << seed << " n=" << n;
      }
    }
  }
}

// The bottleneck trap: a locally best sub-pipeline (least sum) is not part of the optimum.
TEST(Templates, BeatsOneBestPerEntry) {
  // With few microbatches sum dominates; with many, max dominates: the optimal partitions differ,
  // and the search must find both.
  Profile p = random_profile(8, 7);
  Cluster cl = small_cluster(4, 1, 100.0);
  for (int m : {1, 64}) {
    TemplateOptions opt;
    opt.cost.microbatches = m;
    CostModel model(p, cl, opt.cost);
    TemplateSet set = generate_templates(p, cl, opt);
    ASSERT_NE(set.find(4), nullptr);
    EXPECT_NEAR(set.find(4)->iteration_ms(m), brute_force(model, 4), 1e-9);
  }
}

TEST(Templates, MinNodesIsFewestThatFit) {
  Profile p = random_profile(6, 3);
  for (double mem : {100.0, 2.0, 1.0, 0.6}) {
    Cluster cl = small_cluster(4, 2, mem);
    TemplateOptions opt;
    opt.cost.microbatches = 4;
    TemplateSet set = generate_templates(p, cl, opt);
    CostModel model(p, cl, opt.cost);
    std::optional<int> want;
    for (int n = 1; n <= 4 && !want; ++n)
      if (!std::isinf(brute_force(model, n))) want = n;
    EXPECT_EQ(set.min_nodes(), want) << "memory " << mem;
  }
}

}  // namespace
}  // namespace bw::plan

namespace bw::plan {
namespace {}  // namespace
}  // namespace bw::plan

namespace bw::plan {
namespace {

TEST(Templates, SameResultForAnyThreadCount) {
  Profile p = random_profile(24, 77, false, 4);
  Cluster cl = small_cluster(8, 4, 4.0);
  TemplateOptions opt;
  opt.cost.microbatches = 16;
  TemplateSet one = generate_templates(p, cl, opt);
  ASSERT_FALSE(one.templates.empty());
  for (int threads : {2, 3, 4}) {
    opt.threads = threads;
    TemplateSet many = generate_templates(p, cl, opt);
    ASSERT_EQ(many.templates.size(), one.templates.size()) << threads << " threads";
    for (size_t k = 0; k < one.templates.size(); ++k)
      EXPECT_EQ(to_json(many.templates[k]), to_json(one.templates[k]))
          << threads << " threads, " << one.templates[k].num_nodes << " nodes";
  }
}

}  // namespace
}  // namespace bw::plan
