// Schedule-aware templates: the kind chosen per node count is the simulator's fastest that fits,
// and the evaluator's 1F1B prediction is the simulator's on the template's own partition.
#include "plan/schedule_aware.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "plan/plan.h"
#include "plan/planner.h"
#include "schedule/generate.h"
#include "schedule/validate.h"
#include "sim/predict.h"
#include "test_util.h"

namespace bw::plan {
namespace {

TEST(ScheduleAware, ChosenKindIsFastestFeasible) {
  int templates = 0, non_1f1b = 0, some_rejected = 0;
  for (double mem : {100.0, 4.0, 2.5})
    for (int g : {1, 2}) {
      Profile p = random_profile(16, 31 + g);
      Cluster cl = small_cluster(6, g, mem);
      TemplateOptions opt;
      opt.cost.microbatches = 8;
      opt.schedule_kinds = simulated_schedule_kinds();
      opt.evaluator = simulator_evaluator(p, cl);
      TemplateSet set = generate_templates(p, cl, opt);
      for (const auto& t : set.templates) {
        ++templates;
        non_1f1b += t.schedule != "1f1b";
        // Recompute every kind on the same stages (as the closed-form template was built).
        Template base = t;
        base.schedule = "1f1b";
        double best = std::numeric_limits<double>::infinity();
        std::string best_kind;
        for (const auto& kind : simulated_schedule_kinds()) {
          auto e = opt.evaluator(base, kind);
          if (!e || e->peak_memory_bytes > cl.device_memory_bytes()) {
            ++some_rejected;
            continue;
          }
          double ms = e->fixed_ms + e->per_microbatch_ms * t.microbatches;
          if (ms < best) best = ms, best_kind = kind;
        }
        if (best_kind.empty()) {
          // None fits per the simulator: the closed-form 1F1B template stays.
          EXPECT_EQ(t.schedule, "1f1b");
          EXPECT_EQ(to_json(t), to_json(base));
          continue;
        }
        EXPECT_EQ(t.schedule, best_kind) << t.num_nodes << " nodes, " << mem << " GB, g=" << g;
        EXPECT_NEAR(t.iteration_ms(t.microbatches), best, 1e-9 * best);
        EXPECT_LE(t.peak_memory_bytes, cl.device_memory_bytes());
      }
    }
  EXPECT_GT(templates, 10);
  EXPECT_GT(non_1f1b, 0);       // other kinds do win somewhere
  EXPECT_GT(some_rejected, 0);  // and some kinds are infeasible somewhere
}

TEST(ScheduleAware, OneFOneBIsTheSimulatorOnTheTemplatePartition) {
  Profile p = random_profile(10, 8);
  Cluster cl = small_cluster(3, 2, 100);
  TemplateOptions opt;
  opt.cost.microbatches = 6;
  TemplateSet set = generate_templates(p, cl, opt);
  auto eval = simulator_evaluator(p, cl);
  for (const auto& t : set.templates) {
    // Direct simulation at m and 2m with the template's stages (each stage's devices as one).
    std::vector<sim::LayerCost> layers;
    std::vector<int> begin;
    for (const auto& s : t.stages) {
      begin.push_back(s.first_layer);
      for (int l = s.first_layer; l < s.end_layer(); ++l) {
        sim::LayerCost c;
        c.forward_ms = p.layers[l].forward_ms / s.num_devices;
        c.backward_ms = p.layers[l].backward_ms / s.num_devices;
        c.activation_bytes = p.layers[l].activation_bytes / s.num_devices;
        c.output_bytes = p.layers[l].output_bytes;
        c.param_bytes = p.layers[l].param_bytes;
        layers.push_back(c);
      }
    }
    begin.push_back(p.num_layers());
    sim::LinkModel link{cl.latency_us * 1e-3,
                        t.num_nodes > 1 ? cl.inter_node_gbps : cl.intra_node_gbps};
    schedule::ScheduleSpec spec{.kind = "1f1b", .devices = t.num_stages(), .microbatches = 6};
    double t6 = sim::predict(spec, sim::layer_costs(layers, begin, {}, link)).iteration_ms;
    spec.microbatches = 12;
    double t12 = sim::predict(spec, sim::layer_costs(layers, begin, {}, link)).iteration_ms;
    auto e = eval(t, "1f1b");
    ASSERT_TRUE(e.has_value()) << t.num_nodes << " nodes";
    EXPECT_NEAR(e->fixed_ms + e->per_microbatch_ms * 6, t6, 1e-9 * t6);
    EXPECT_NEAR(e->fixed_ms + e->per_microbatch_ms * 12, t12, 1e-9 * t12);
  }
}

TEST(ScheduleAware, SameChoiceOnAnyThreadCount) {
  Profile p = random_profile(16, 5);
  Cluster cl = small_cluster(6, 2, 100);
  TemplateOptions opt;
  opt.cost.microbatches = 8;
  opt.schedule_kinds = simulated_schedule_kinds();
  opt.evaluator = simulator_evaluator(p, cl);
  TemplateSet one = generate_templates(p, cl, opt);
  opt.threads = 3;
  TemplateSet three = generate_templates(p, cl, opt);
  ASSERT_EQ(one.templates.size(), three.templates.size());
  for (size_t k = 0; k < one.templates.size(); ++k)
    EXPECT_EQ(to_json(one.templates[k]), to_json(three.templates[k])) << k;
}

// Chunks of re-partitioning kinds cover the layers in order and sit where the schedule places
// them.
TEST(ScheduleAware, ChunksFollowTheSchedulePlacement) {
  int checked = 0;
  for (const std::string kind : {"interleaved", "hanayo-w1", "hanayo-w2"}) {
    Profile p = random_profile(20, 3);
    Cluster cl = small_cluster(4, 2, 100);
    TemplateOptions opt;
    opt.cost.microbatches = 8;
    opt.schedule_kinds = {kind};
    opt.evaluator = simulator_evaluator(p, cl);
    for (const auto& t : generate_templates(p, cl, opt).templates) {
      if (t.schedule != kind) continue;
      schedule::ScheduleSpec spec{.kind = kind == "interleaved" ? "interleaved" : "hanayo",
                                  .devices = t.num_stages(),
                                  .microbatches = t.microbatches,
                                  .chunks_per_device = 2,
                                  .waves = kind == "hanayo-w2" ? 2 : 1};
      schedule::ScheduleSpec from_template = schedule_spec(t, t.microbatches);
      EXPECT_EQ(from_template.kind, spec.kind);
      EXPECT_EQ(from_template.devices, spec.devices);
      EXPECT_EQ(schedule::num_chunks(from_template), schedule::num_chunks(spec));
      std::vector<int> placement = schedule::chunk_placement(spec);
      ASSERT_EQ(t.chunks.size(), placement.size()) << kind << " on " << t.num_nodes << " nodes";
      int layer = 0;
      for (size_t c = 0; c < t.chunks.size(); ++c) {
        EXPECT_EQ(t.chunks[c].first_layer, layer);
        EXPECT_GE(t.chunks[c].num_layers, 1);
        EXPECT_EQ(t.chunks[c].stage, placement[c]) << kind << " chunk " << c;
        layer = t.chunks[c].end_layer();
      }
      EXPECT_EQ(layer, p.num_layers());
      // Stage parameters are those of the chunks it holds.
      for (int s = 0; s < t.num_stages(); ++s) {
        double want = 0;
        for (auto [a, b] : t.layers_of_stage(s))
          for (int l = a; l < b; ++l) want += p.layers[l].param_bytes;
        EXPECT_NEAR(t.stages[s].param_bytes, want, 1e-6 * want);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 3);
}

TEST(ScheduleAware, UnknownKindIsConfigError) {
  Profile p = random_profile(4, 1);
  Cluster cl = small_cluster(2, 1, 100);
  TemplateOptions opt;
  TemplateSet set = generate_templates(p, cl, opt);
  EXPECT_THROW(simulator_evaluator(p, cl)(set.templates.front(), "gpipe-ish"), ConfigError);
}

// The batch split may give a pipeline a microbatch count its template's kind cannot run (e.g.
// interleaved with 3 microbatches on 2 devices): every pipeline of a schedule-aware plan runs a
// kind that generate() accepts and validate() passes at the count it actually gets, and its
// prediction is that kind's at that count.
TEST(ScheduleAware, EveryPipelineScheduleGeneratesAtItsMicrobatches) {
  int plans = 0, pipelines = 0, non_1f1b = 0;
  std::vector<std::string> failures;
  for (int nodes : {2, 3, 4, 5})
    for (int g : {1, 2})
      for (int ft : {0, 1})
        for (int m : {1, 2, 3, 5, 6, 7, 9, 12}) {
          if (m < ft + 1) continue;
          Profile p = random_profile(12, 17 + nodes);
          Cluster cl = small_cluster(nodes, g, 100);
          PlannerOptions opt;
          opt.schedule_kinds = simulated_schedule_kinds();
          const Plan plan = make_plan(p, cl, ft, m, opt).plan;
          ++plans;
          for (size_t i = 0; i < plan.pipelines.size(); ++i) {
            const auto& pl = plan.pipelines[i];
            ++pipelines;
            non_1f1b += pl.tmpl.schedule != "1f1b";
            const auto where = fmt::format("{} nodes g={} ft={} m={}: pipeline {} ({} x {} mb)",
                                           nodes, g, ft, m, i, pl.tmpl.schedule, pl.microbatches);
            try {
              schedule::validate(schedule::generate(schedule_spec(pl.tmpl, pl.microbatches)));
            } catch (const std::exception& e) {
              failures.push_back(where + ": " + e.what());
            }
            if (std::abs(pl.iteration_ms - pl.tmpl.iteration_ms(pl.microbatches)) >
                1e-9 * pl.iteration_ms)
              failures.push_back(where + ": stale prediction");
          }
        }
  for (size_t k = 0; k < std::min<size_t>(failures.size(), 5); ++k) ADD_FAILURE() << failures[k];
  EXPECT_TRUE(failures.empty()) << failures.size() << " mismatches";
  EXPECT_GT(plans, 50);
  EXPECT_GT(pipelines, plans);  // multi-pipeline plans are covered
  EXPECT_GT(non_1f1b, 0);       // and kinds other than 1f1b
}

}  // namespace
}  // namespace bw::plan
