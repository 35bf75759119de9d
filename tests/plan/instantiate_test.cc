// Batch split and instantiation against brute force on small instances.
#include "plan/instantiate.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "test_util.h"

namespace bw::plan {
namespace {

// Every composition of `b` into `times.size()` positive parts.
double brute_split(const std::vector<LinearTime>& times, int b) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> m(times.size());
  std::function<void(size_t, int)> rec = [&](size_t p, int left) {
    if (p + 1 == times.size()) {
      m[p] = left;
      double worst = 0;
      for (size_t i = 0; i < times.size(); ++i) worst = std::max(worst, times[i].at(m[i]));
      best = std::min(best, worst);
      return;
    }
    for (int k = 1; k <= left - static_cast<int>(times.size() - p - 1); ++k) {
      m[p] = k;
      rec(p + 1, left - k);
    }
  };
  rec(0, b);
  return best;
}

TEST(SplitBatch, EqualsBruteForce) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> a(0, 50), per(0.5, 20);
  int checked = 0;
  for (int pipelines = 1; pipelines <= 4; ++pipelines)
    for (int b = pipelines; b <= 12; ++b)
      for (int rep = 0; rep < 5; ++rep) {
        std::vector<LinearTime> times;
        for (int p = 0; p < pipelines; ++p) times.push_back({a(rng), per(rng)});
        std::vector<int> m = split_batch(times, b);
        int total = 0;
        double worst = 0;
        for (int p = 0; p < pipelines; ++p) {
          EXPECT_GE(m[p], 1);
          total += m[p];
          worst = std::max(worst, times[p].at(m[p]));
        }
        EXPECT_EQ(total, b);
        EXPECT_NEAR(worst, brute_split(times, b), 1e-9)
            << pipelines << " pipelines, " << b << " microbatches";
        ++checked;
      }
  EXPECT_GT(checked, 100);
}

TEST(SplitBatch, TooFewMicrobatchesIsConfigError) {
  EXPECT_THROW(split_batch({{1, 1}, {1, 1}, {1, 1}}, 2), ConfigError);
}

// Brute force over every multiset of template sizes covering N with >= f + 1 pipelines, each
// with its own brute-force split.
double brute_instantiate(const TemplateSet& set, int nodes, int f, int b) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<const Template*> chosen;
  std::function<void(size_t, int)> rec = [&](size_t from, int left) {
    if (left == 0) {
      if (static_cast<int>(chosen.size()) < f + 1 || static_cast<int>(chosen.size()) > b) return;
      std::vector<LinearTime> times;
      for (auto* t : chosen) times.push_back({t->estimate.fixed_ms, t->estimate.per_microbatch_ms});
      best = std::min(best, brute_split(times, b));
      return;
    }
    for (size_t i = from; i < set.templates.size(); ++i) {
      if (set.templates[i].num_nodes > left) break;
      chosen.push_back(&set.templates[i]);
      rec(i, left - set.templates[i].num_nodes);
      chosen.pop_back();
    }
  };
  rec(0, nodes);
  return best;
}

TEST(Instantiate, CompositionEqualsBruteForce) {
  int checked = 0;
  for (int nodes = 1; nodes <= 7; ++nodes)
    for (double mem : {100.0, 1.5})
      for (int f = 0; f <= 2; ++f)
        for (int b : {1, 3, 8}) {
          Profile p = random_profile(6, 40 + nodes);
          Cluster cl = small_cluster(nodes, 1, mem);
          TemplateOptions opt;
          opt.cost.microbatches = 4;
          TemplateSet set = generate_templates(p, cl, opt);
          double want = brute_instantiate(set, nodes, f, b);
          if (std::isinf(want)) {
            EXPECT_THROW(choose_composition(set, nodes, f, b), ConfigError)
                << nodes << " nodes f=" << f << " B=" << b;
            continue;
          }
          Composition c = choose_composition(set, nodes, f, b);
          EXPECT_NEAR(c.pipeline_ms, want, 1e-9 * want)
              << nodes << " nodes, mem " << mem << ", f=" << f << ", B=" << b;
          int used = 0, count = 0;
          for (auto [n, k] : c.counts) used += n * k, count += k;
          EXPECT_EQ(used, nodes);
          EXPECT_GE(count, f + 1);
          ++checked;
        }
  EXPECT_GT(checked, 40);
}

TEST(Instantiate, PlanIsValidAndCoversAllNodes) {
  Profile p = random_profile(8, 9);
  for (int nodes : {2, 5, 9, 16}) {
    Cluster cl = small_cluster(nodes, 2, 100.0);
    TemplateOptions opt;
    opt.cost.microbatches = 8;
    TemplateSet set = generate_templates(p, cl, opt);
    Plan plan = instantiate(set, nodes, 1, 32, cl);
    validate_plan(plan);
    EXPECT_EQ(plan.num_nodes(), nodes);
    EXPECT_GE(plan.pipelines.size(), 2u);
    double worst = 0;
    for (const auto& pl : plan.pipelines) worst = std::max(worst, pl.iteration_ms);
    EXPECT_DOUBLE_EQ(plan.pipeline_ms, worst);
    EXPECT_NEAR(plan.step_ms, plan.pipeline_ms + plan.allreduce_ms, 1e-9);
    EXPECT_GT(plan.allreduce_ms, 0);
  }
}

TEST(Instantiate, ImpossibleRequestsSayWhatToChange) {
  Profile p = random_profile(6, 2);
  Cluster cl = small_cluster(4, 1, 100.0);
  TemplateOptions opt;
  TemplateSet set = generate_templates(p, cl, opt);
  try {
    instantiate(set, 4, 4, 16, cl);
    FAIL() << "f = 4 on 4 nodes accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--fault-tolerance"), std::string::npos) << e.what();
  }
  try {
    instantiate(set, 4, 2, 2, cl);
    FAIL() << "2 microbatches for 3 pipelines accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--microbatches"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bw::plan

namespace bw::plan {
namespace {

// Brute force of the step time (pipeline + all-reduce) over every multiset of templates.
double brute_step(const TemplateSet& set, int nodes, int f, int b, const Cluster& cl) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<const Template*> chosen;
  std::function<void(size_t, int)> rec = [&](size_t from, int left) {
    if (left == 0) {
      const int p = static_cast<int>(chosen.size());
      if (p < f + 1 || p > b) return;
      std::vector<LinearTime> times;
      double q = 0;
      for (auto* t : chosen) {
        times.push_back({t->estimate.fixed_ms, t->estimate.per_microbatch_ms});
        q = std::max(q, max_node_param_bytes(*t));
      }
      best = std::min(best, brute_split(times, b) + allreduce_ms(p, q, cl));
      return;
    }
    for (size_t i = from; i < set.templates.size(); ++i) {
      if (set.templates[i].num_nodes > left) break;
      chosen.push_back(&set.templates[i]);
      rec(i, left - set.templates[i].num_nodes);
      chosen.pop_back();
    }
  };
  rec(0, nodes);
  return best;
}

TEST(Instantiate, StepTimeWithinOneAllReduceOfBruteForce) {
  int checked = 0, exact = 0;
  for (int nodes = 2; nodes <= 7; ++nodes)
    for (double gbps : {1.0, 100.0})
      for (int f : {0, 1})
        for (int b : {2, 8}) {
          Profile p = random_profile(6, 60 + nodes);
          Cluster cl = small_cluster(nodes, 1, 100);
          cl.inter_node_gbps = gbps;  // 1 Gbit/s: the all-reduce dominates
          TemplateOptions opt;
          opt.cost.microbatches = 4;
          TemplateSet set = generate_templates(p, cl, opt);
          double want = brute_step(set, nodes, f, b, cl);
          Composition c = choose_composition(set, nodes, f, b, &cl);
          int pipelines = 0;
          for (auto [n, k] : c.counts) pipelines += k;
          // The reported step is what the composition really costs.
          EXPECT_NEAR(c.step_ms,
                      c.pipeline_ms + allreduce_ms(pipelines, c.max_node_param_bytes, cl),
                      1e-9 * c.step_ms);
          EXPECT_GE(c.step_ms, want * (1 - 1e-12));
          // Proven bound: step <= optimum + its all-reduce <= 2 * optimum.
          EXPECT_LE(c.step_ms, 2 * want * (1 + 1e-12))
              << nodes << " nodes, " << gbps << " Gbit/s, f=" << f << ", B=" << b;
          exact += std::abs(c.step_ms - want) <= 1e-9 * want;
          ++checked;
        }
  EXPECT_GT(checked, 40);
  EXPECT_GT(exact, checked * 3 / 4);  // the bound is loose; most cases are exact
}

}  // namespace
}  // namespace bw::plan
