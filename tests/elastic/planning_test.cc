// Every template the planner returns runs: the runtime's layout builder (elastic/planning.h)
// accepts it as it is, stage widths included, for random profiles over a grid of microbatch sizes,
// devices per node and memory limits (docs/planning.md: no template the runtime cannot execute is
// ever produced). The grid must contain sharded templates, or the test would prove nothing.
#include <gtest/gtest.h>

#include <set>

#include "../plan/test_util.h"
#include "elastic/planning.h"
#include "model/gpt.h"
#include "plan/schedule_aware.h"
#include "plan/templates.h"

namespace bw::elastic {
namespace {

TEST(PlannerTemplates, EveryTemplateIsAcceptedByTheRuntimeLayoutBuilder) {
  const auto model = model::named_config("tiny:6", 64);
  const int layers = model::num_layers(model);
  int checked = 0, sharded = 0;
  for (unsigned seed = 1; seed <= 3; ++seed) {
    for (int b : {1, 2, 4}) {
      for (int g : {1, 2, 4}) {
        for (double memory_gb : {1.2, 2.5, 100.0}) {
          const auto profile = plan::random_profile(layers, seed, false, b);
          const auto cluster = plan::small_cluster(3, g, memory_gb);
          const int m = 8;
          plan::TemplateOptions options;
          options.cost.microbatches = m;
          options.schedule_kinds = plan::simulated_schedule_kinds();
          options.evaluator = plan::simulator_evaluator(profile, cluster);
          const auto set = plan::generate_templates(profile, cluster, options);
          PlanContext ctx;
          ctx.templates = set;
          ctx.cluster = cluster;
          ctx.devices_per_node = g;
          ctx.model = model;
          ctx.config.pipeline.microbatch_size = b;
          ctx.config.pipeline.microbatches = m;
          for (const auto& t : set.templates) {
            plan::Plan p;
            p.num_layers = layers;
            p.devices_per_node = g;
            p.microbatch_size = b;
            p.global_microbatches = m;
            plan::Pipeline pipe;
            pipe.tmpl = t;
            for (int n = 0; n < t.num_nodes; ++n) pipe.nodes.push_back(NodeId(n));
            pipe.microbatches = m;
            p.pipelines.push_back(pipe);
            SCOPED_TRACE(::testing::Message() << "seed " << seed << " b " << b << " g " << g
                                              << " memory " << memory_gb << " nodes "
                                              << t.num_nodes << " schedule " << t.schedule);
            RunPlan run;
            ASSERT_NO_THROW(run = layout_plan(ctx, p));
            ++checked;
            const auto& pl = run.layout.pipelines.at(0);
            ASSERT_EQ(pl.num_devices, t.num_stages());
            bool any = false;
            for (int s = 0; s < t.num_stages(); ++s) {
              EXPECT_EQ(pl.widths[s], t.stages[s].num_devices) << "stage " << s;
              any = any || t.stages[s].num_devices > 1;
            }
            sharded += any;
            EXPECT_EQ(run.layout.world_size(), t.num_nodes * g);
            const std::set<int> workers(run.workers.begin(), run.workers.end());
            EXPECT_EQ(static_cast<int>(workers.size()), t.num_nodes * g);
            EXPECT_EQ(*workers.rbegin(), t.num_nodes * g - 1);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(sharded, 10) << "the grid produced too few sharded templates to test";
  RecordProperty("templates", checked);
  RecordProperty("sharded", sharded);
}

}  // namespace
}  // namespace bw::elastic
