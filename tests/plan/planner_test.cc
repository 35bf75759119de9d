// make_plan: the two-pass choice of template microbatches and its error messages.
#include "plan/planner.h"

#include <gtest/gtest.h>

#include "plan/synth.h"
#include "test_util.h"

namespace bw::plan {
namespace {

TEST(Planner, PlanIsNoWorseThanEitherPass) {
  Profile p = random_profile(12, 4);
  for (int nodes : {3, 6, 10}) {
    Cluster c = small_cluster(nodes, 2, 100);
    PlanResult r = make_plan(p, c, 1, 40);
    validate_plan(r.plan);
    EXPECT_EQ(r.plan.num_nodes(), nodes);
    // Each fixed m is one of the candidates the default considers; the default is at least as
    // good as the first pass (m = ceil(B / (f + 1))).
    PlannerOptions fixed;
    fixed.template_microbatches = 20;
    PlanResult first = make_plan(p, c, 1, 40, fixed);
    EXPECT_LE(r.plan.step_ms, first.plan.step_ms + 1e-9) << nodes << " nodes";
  }
}

TEST(Planner, ModelTooBigSaysHowManyNodes) {
  Profile p = synthesize_profile(find_model("gpt3-6.7b"), find_device("a100"), 1);
  Cluster c = small_cluster(1, 1, 40);
  std::string msg = error_of([&] { make_plan(p, c, 0, 8); });
  EXPECT_NE(msg.find("does not fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--nodes"), std::string::npos) << msg;
  // The node count it names is the true minimum.
  size_t at = msg.find("needs ");
  ASSERT_NE(at, std::string::npos) << msg;
  int need = std::stoi(msg.substr(at + 6));
  Cluster enough = small_cluster(need, 1, 40);
  EXPECT_NO_THROW(make_plan(p, enough, 0, 8));
  Cluster fewer = small_cluster(need - 1, 1, 40);
  EXPECT_THROW(make_plan(p, fewer, 0, 8), ConfigError);
}

TEST(Planner, NothingFitsSaysRaiseMemory) {
  Profile p = random_profile(3, 1);
  std::string msg = error_of([&] { make_plan(p, small_cluster(2, 1, 0.01), 0, 8); });
  EXPECT_NE(msg.find("--memory-gb"), std::string::npos) << msg;
}

// GPT-3 175B with 8-sample microbatches on 64 nodes x 8 x 80 GB: the activations kept in flight
// do not fit however the model is cut. The error names how many of the last layers fit at best;
// the exact template search on those layers alone agrees (they fit; one more layer does not).
TEST(Planner, ActivationsInFlightNameTheLayersThatFit) {
  Profile p = synthesize_profile(find_model("gpt3-175b"), find_device("a100"), 8);
  Cluster c = small_cluster(64, 8, 80);
  std::string msg = error_of([&] { make_plan(p, c, 2, 512); });
  EXPECT_NE(msg.find("activations kept in flight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("microbatch size ="), std::string::npos) << msg;  // b = 8 = g: not the width
  const size_t at = msg.find("only the last ");
  ASSERT_NE(at, std::string::npos) << msg;
  const int fit = std::stoi(msg.substr(at + 14));
  ASSERT_GT(fit, 0);
  ASSERT_LT(fit, p.num_layers());
  auto suffix_fits = [&](int layers) {
    Profile tail = p;
    tail.layers.erase(tail.layers.begin(), tail.layers.end() - layers);
    TemplateOptions opt;
    opt.cost.microbatches = (512 + 2) / 3;  // the planner's first pass: ceil(B / (f + 1))
    return !generate_templates(tail, small_cluster(layers, 8, 80), opt).templates.empty();
  };
  EXPECT_TRUE(suffix_fits(fit)) << msg;
  EXPECT_FALSE(suffix_fits(fit + 1)) << msg;
}

// With one sample per microbatch no stage is sharded, and the error says why and how to change it.
TEST(Planner, MicrobatchOfOneSaysStagesCannotShard) {
  Profile p = synthesize_profile(find_model("gpt3-175b"), find_device("a100"), 1);
  std::string msg = error_of([&] { make_plan(p, small_cluster(64, 8, 80), 2, 512); });
  EXPECT_NE(msg.find("microbatch size = 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--microbatch-size"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bw::plan
