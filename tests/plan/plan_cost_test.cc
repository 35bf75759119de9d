// The planner's cost estimate (plan_cost.h) against the work the planner actually does, counted
// by its own instrumentation (PlanWork): the knapsack cells of one bisection exactly (to one
// probe: the bisection's length depends on its path by one), its (cell, template) steps at most
// the formula's, and the simulated slots of the schedule choice exactly, over a grid of
// clusters, microbatch counts and memory sizes.
#include "plan/plan_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "plan/instantiate.h"
#include "plan/planner.h"
#include "plan/schedule_aware.h"
#include "test_util.h"

namespace bw::plan {
namespace {

TEST(PlanCost, BisectionWorkMatchesTheKnapsacksCount) {
  int checked = 0, exact_count_cases = 0;
  for (int nodes : {2, 5, 12, 40}) {
    for (int g : {1, 4}) {
      for (int f : {0, 1, 2}) {
        for (int b : {3, 8, 64, 500}) {
          const Profile p = random_profile(10, 7 + nodes + g, false, 2);
          const Cluster cl = small_cluster(nodes, g, 40);
          TemplateOptions to;
          to.cost.microbatches = std::max(1, b / (f + 1));
          const TemplateSet set = generate_templates(p, cl, to);
          if (set.templates.empty() || (f + 1) * *set.min_nodes() > nodes || b < f + 1) continue;
          PlanWork work;
          try {
            choose_composition(set, nodes, f, b, nullptr, &work);
          } catch (const ConfigError&) {
            continue;  // no composition: nothing to compare
          }
          const ComposeWork want =
              bisection_work(set, nodes, f, b, std::numeric_limits<double>::infinity());
          const double cells = static_cast<double>(work.compose_cells);
          const double one_solve = want.peak_cells;  // (N + 1) x width >= one probe's cells
          EXPECT_LE(std::abs(cells - want.cells), one_solve)
              << nodes << "x" << g << " f=" << f << " B=" << b << ": counted " << cells
              << " cells, formula " << want.cells;
          EXPECT_LE(static_cast<double>(work.compose_pairs), want.pairs + one_solve * 64)
              << nodes << "x" << g << " f=" << f << " B=" << b;
          EXPECT_GT(work.compose_pairs.load(), 0);
          exact_count_cases += b < nodes / *set.min_nodes();
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(exact_count_cases, 3) << "the grid never counts pipelines exactly (width B + 1)";
}

TEST(PlanCost, ChoiceSlotsMatchTheSimulatorsCount) {
  int checked = 0, simulated = 0;
  for (int nodes : {1, 3, 6}) {
    for (int g : {1, 2, 4}) {
      for (int m : {1, 2, 7, 16}) {
        for (int b : {1, 4}) {
          const Profile p = random_profile(9, 3 + nodes * g + m, false, b);
          const Cluster cl = small_cluster(nodes, g, 40);
          PlanWork work;
          TemplateOptions to;
          to.cost.microbatches = m;
          TemplateSet set = generate_templates(p, cl, to);
          if (set.templates.empty()) continue;
          const auto kinds = simulated_schedule_kinds();
          const double want = choice_slots(set, kinds);
          to.schedule_kinds = kinds;
          to.evaluator = simulator_evaluator(p, cl, 4, false, &work);
          choose_schedules(set, p, cl, to);
          EXPECT_EQ(static_cast<double>(work.simulated_slots), want)
              << nodes << "x" << g << " m=" << m << " b=" << b;
          simulated += work.simulated_slots > 0;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(simulated, 30);
}

// make_plan calls on_cost before its first search and once after it, before composing, and the
// estimate it gives is in the measured work's range: the knapsack cells within 2x of those
// counted over both runs.
TEST(PlanCost, MakePlanReportsItsEstimateOnceBeforeComposing) {
  const Profile p = random_profile(12, 11, false, 2);
  const Cluster cl = small_cluster(24, 2, 40);
  PlanWork work;
  PlannerOptions opt;
  opt.schedule_kinds = simulated_schedule_kinds();
  opt.work = &work;
  int calls = 0, searches = 0;
  PlanCost got;
  opt.on_cost = [&](const PlanCost& c) {
    if (c.stage == "search") {
      EXPECT_EQ(calls, 0) << "the search's estimate came after the rest's";
      EXPECT_GT(c.search_transitions, 0);
      ++searches;
      return;
    }
    ++calls;
    got = c;
    EXPECT_EQ(work.compose_cells.load(), 0) << "reported after the composition started";
    EXPECT_EQ(work.simulated_slots.load(), 0) << "reported after the simulations started";
  };
  make_plan(p, cl, 1, 64, opt);
  EXPECT_EQ(searches, 1);
  EXPECT_EQ(calls, 1);
  const double cells = static_cast<double>(work.compose_cells);
  EXPECT_GT(cells, 0);
  EXPECT_LE(got.compose_cells, 2 * cells);
  EXPECT_GE(got.compose_cells, cells / 2);
  EXPECT_GT(got.simulated_slots, 0);
  EXPECT_GT(got.seconds, 0);
}

}  // namespace
}  // namespace bw::plan
