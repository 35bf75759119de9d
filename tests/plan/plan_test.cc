// Plan helpers: JSON round trip, device lookup, replicas.
#include "plan/plan.h"

#include <gtest/gtest.h>

#include "plan/instantiate.h"
#include "test_util.h"

namespace bw::plan {
namespace {

Plan example(int nodes, int g) {
  Profile p = random_profile(7, 12);
  Cluster cl = small_cluster(nodes, g, 3.0);
  TemplateOptions opt;
  opt.cost.microbatches = 6;
  return instantiate(generate_templates(p, cl, opt), nodes, 1, 24, cl);
}

TEST(Plan, JsonRoundTrip) {
  for (int g : {1, 2, 3}) {
    Plan plan = example(5, g);
    json::Json j = to_json(plan);
    Plan back = plan_from_json(json::Json::parse(j.dump()));
    EXPECT_EQ(to_json(back), j) << "g=" << g;
    validate_plan(back);
  }
  json::Json j = to_json(example(4, 1));
  j["pipelines"][0]["template"]["stages"][0].erase("num_devices");
  try {
    plan_from_json(j);
    FAIL() << "accepted a stage without num_devices";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_devices"), std::string::npos) << e.what();
  }
}

TEST(Plan, LocateAndReplicasAgreeWithStages) {
  Plan plan = example(6, 2);
  int located = 0;
  for (NodeId n : plan.nodes())
    for (int d = 0; d < plan.devices_per_node; ++d) {
      auto where = plan.locate({n, d});
      ASSERT_TRUE(where.has_value()) << "node " << n.value() << " device " << d;
      const Pipeline& p = plan.pipelines[where->pipeline];
      const Stage& st = p.tmpl.stages[where->stage];
      EXPECT_EQ(p.node_of_stage(where->stage), n);
      EXPECT_GE(d, st.first_device);
      EXPECT_LT(d, st.first_device + st.num_devices);
      // Every layer of that stage lists this device among its replicas.
      for (int l = st.first_layer; l < st.end_layer(); ++l) {
        auto r = plan.replicas(l);
        EXPECT_NE(std::find(r.begin(), r.end(), DeviceRef{n, d}), r.end()) << "layer " << l;
      }
      ++located;
    }
  EXPECT_EQ(located, 6 * 2);
  EXPECT_FALSE(plan.locate({NodeId(99), 0}).has_value());
  // Each layer has one replica per pipeline per device of its stage.
  for (int l = 0; l < plan.num_layers; ++l) {
    size_t want = 0;
    for (const auto& p : plan.pipelines)
      want += p.tmpl.stages[p.tmpl.stage_of_layer(l)].num_devices;
    EXPECT_EQ(plan.replicas(l).size(), want);
  }
}

}  // namespace
}  // namespace bw::plan
