// Reconfiguration: every failure set of size <= f on small clusters gives a valid plan from
// templates only, using every survivor, with a correct copy list; beyond f, lost layers are named.
#include "plan/reconfigure.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "plan/schedule_aware.h"
#include "test_util.h"

namespace bw::plan {
namespace {

struct Fixture {
  Profile profile;
  Cluster cluster;
  TemplateSet templates;
  Plan plan;
};

Fixture make(int nodes, int g, double mem, int f, int microbatches, unsigned seed) {
  Fixture s;
  s.profile = random_profile(6, seed, false, 4);  // stages may shard over up to 4 devices
  s.cluster = small_cluster(nodes, g, mem);
  TemplateOptions opt;
  opt.cost.microbatches = 4;
  s.templates = generate_templates(s.profile, s.cluster, opt);
  s.plan = instantiate(s.templates, nodes, f, microbatches, s.cluster);
  return s;
}

// Layers held per device, computed from the chunks directly.
std::map<DeviceRef, std::set<int>> holdings(const Plan& p) {
  std::map<DeviceRef, std::set<int>> h;
  for (const auto& pl : p.pipelines)
    for (const auto& c : pl.tmpl.chunks) {
      const Stage& st = pl.tmpl.stages[c.stage];
      for (int d = 0; d < st.num_devices; ++d)
        for (int l = c.first_layer; l < c.end_layer(); ++l)
          h[{pl.node_of_stage(c.stage), st.first_device + d}].insert(l);
    }
  return h;
}

// Checks one reconfiguration; returns a description of the first problem or "".
std::string check(const Plan& before, const Reconfiguration& r, const TemplateSet& set,
                  const std::set<NodeId>& dead, const std::set<NodeId>& expected_nodes) {
  try {
    validate_plan(r.plan);
  } catch (const InternalError& e) {
    return std::string("invalid plan: ") + e.what();
  }
  std::vector<NodeId> got = r.plan.nodes();
  std::set<NodeId> got_set(got.begin(), got.end());
  if (got_set != expected_nodes) return "plan does not use exactly the surviving nodes";
  for (const auto& p : r.plan.pipelines) {
    const Template* t = set.find(p.tmpl.num_nodes);
    if (t == nullptr || to_json(*t) != to_json(p.tmpl)) return "pipeline not from a template";
  }
  if (r.plan.generation != before.generation + 1) return "generation not advanced";
  // Copy list: exactly the (device, layer) pairs newly needed, each from a live old holder.
  auto old_h = holdings(before), new_h = holdings(r.plan);
  std::set<std::pair<DeviceRef, int>> need, listed;
  for (const auto& [dev, layers] : new_h)
    for (int l : layers)
      if (!old_h[dev].count(l)) need.insert({dev, l});
  for (const auto& c : r.copies) {
    if (!listed.insert({c.to, c.layer.value()}).second) return "duplicate copy";
    if (dead.count(c.from.node)) return "copy from a dead node";
    if (!old_h[c.from].count(c.layer.value())) return "copy source did not hold the layer";
  }
  if (need != listed) return "copy list differs from the newly needed layers";
  return "";
}

void for_each_subset(const std::vector<NodeId>& nodes, int max_size, size_t from,
                     std::vector<NodeId>& cur,
                     const std::function<void(const std::vector<NodeId>&)>& fn) {
  if (!cur.empty()) fn(cur);
  if (static_cast<int>(cur.size()) == max_size) return;
  for (size_t i = from; i < nodes.size(); ++i) {
    cur.push_back(nodes[i]);
    for_each_subset(nodes, max_size, i + 1, cur, fn);
    cur.pop_back();
  }
}

struct Grid {
  int nodes, g, f;
  double mem;
};

TEST(Reconfigure, EveryFailureSetUpToFGivesValidPlan) {
  // Memory 3 GB (g = 1) and 2 GB (g = 2) make two nodes the smallest pipeline, so pipelines
  // keep their template, borrow and merge (all three are counted below).
  const std::vector<Grid> grid = {{2, 1, 1, 100}, {4, 1, 1, 100}, {6, 2, 2, 100}, {6, 1, 2, 3.0},
                                  {8, 1, 3, 3.0}, {8, 2, 1, 2.0}, {9, 1, 2, 100}, {10, 1, 4, 3.0},
                                  {5, 1, 1, 3.0}, {7, 1, 2, 3.0}, {9, 1, 3, 3.0}, {7, 2, 2, 2.0}};
  int checked = 0, failures = 0, borrowed = 0, merged = 0;
  for (const Grid& c : grid) {
    Fixture s = make(c.nodes, c.g, c.mem, c.f, 16, 11 + c.nodes);
    std::vector<NodeId> all = s.plan.nodes();
    std::map<NodeId, size_t> owner;
    for (size_t p = 0; p < s.plan.pipelines.size(); ++p)
      for (NodeId n : s.plan.pipelines[p].nodes) owner[n] = p;
    std::vector<NodeId> cur;
    for_each_subset(all, c.f, 0, cur, [&](const std::vector<NodeId>& failed) {
      std::set<NodeId> dead(failed.begin(), failed.end()), alive;
      for (NodeId n : all)
        if (!dead.count(n)) alive.insert(n);
      Reconfiguration r = reconfigure(s.plan, s.templates, failed, s.cluster);
      std::string problem = check(s.plan, r, s.templates, dead, alive);
      if (!problem.empty() && failures++ < 3)
        ADD_FAILURE() << c.nodes << " nodes x " << c.g << ", f=" << c.f << ": failing "
                      << failed.size() << " nodes (first " << failed[0].value() << "): " << problem;
      ++checked;
      std::set<size_t> with_survivors;
      for (NodeId n : alive) with_survivors.insert(owner[n]);
      merged += r.plan.pipelines.size() < with_survivors.size();
      for (const auto& p : r.plan.pipelines) {
        std::set<size_t> from;
        for (NodeId n : p.nodes) from.insert(owner[n]);
        if (from.size() > 1 && r.plan.pipelines.size() == with_survivors.size()) {
          ++borrowed;
          break;
        }
      }
    });
  }
  EXPECT_EQ(failures, 0) << "of " << checked << " failure sets";
  EXPECT_GT(checked, 300);
  EXPECT_GT(borrowed, 0);
  EXPECT_GT(merged, 0);
}

TEST(Reconfigure, SequencesOfFailures) {
  for (unsigned seed : {0, 1, 2, 3, 17}) {
    Fixture s = make(8, 1, 3.0, 2, 16, seed);
    Plan plan = s.plan;
    std::vector<NodeId> order = plan.nodes();
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::set<NodeId> dead, alive(order.begin(), order.end());
    for (int k = 0; k < 3; ++k) {
      NodeId victim = order[k];
      dead.insert(victim);
      alive.erase(victim);
      Reconfiguration r = reconfigure(plan, s.templates, {victim}, s.cluster);
      std::string problem = check(plan, r, s.templates, {victim}, alive);
      ASSERT_EQ(problem, "") << "seed " << seed << " failure " << k;
      plan = r.plan;
    }
  }
}

// Interleaved and Hanayo templates hold several chunks per stage: copies follow the chunks.
TEST(Reconfigure, ScheduleAwareTemplatesCopyTheirChunks) {
  Profile p = random_profile(16, 31);
  Cluster cl = small_cluster(8, 1, 100);
  TemplateOptions opt;
  opt.cost.microbatches = 8;
  opt.schedule_kinds = {"interleaved", "hanayo-w1"};  // no 1f1b: chunks always re-partitioned
  opt.evaluator = simulator_evaluator(p, cl);
  TemplateSet set = generate_templates(p, cl, opt);
  Plan plan = instantiate(set, 8, 1, 32, cl);
  int multi_chunk = 0;
  for (const auto& pl : plan.pipelines)
    multi_chunk += pl.tmpl.chunks.size() > pl.tmpl.stages.size();
  ASSERT_GT(multi_chunk, 0);
  std::vector<NodeId> all = plan.nodes();
  for (NodeId victim : all) {
    std::set<NodeId> alive(all.begin(), all.end());
    alive.erase(victim);
    Reconfiguration r = reconfigure(plan, set, {victim}, cl);
    EXPECT_EQ(check(plan, r, set, {victim}, alive), "") << "node " << victim.value();
  }
}

TEST(Reconfigure, LostLayersAreNamed) {
  Fixture s = make(4, 1, 100, 1, 8, 3);  // two pipelines or more
  // Kill, in every pipeline, the node holding layer 0: layer 0 (and its stage-mates) lose all.
  std::vector<NodeId> failed;
  for (const auto& p : s.plan.pipelines) failed.push_back(p.node_of_stage(0));
  std::set<int> want;
  for (int l = 0; l < s.plan.num_layers; ++l) {
    bool live = false;
    for (const auto& p : s.plan.pipelines) {
      NodeId n = p.node_of_stage(p.tmpl.stage_of_layer(l));
      live = live || std::find(failed.begin(), failed.end(), n) == failed.end();
    }
    if (!live) want.insert(l);
  }
  ASSERT_TRUE(want.count(0));
  try {
    reconfigure(s.plan, s.templates, failed, s.cluster);
    FAIL() << "recovered without a replica of layer 0";
  } catch (const RecoveryUnavailable& e) {
    std::set<int> got(e.lost_layers().begin(), e.lost_layers().end());
    EXPECT_EQ(got, want) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Reconfigure, UnknownNodeIsConfigError) {
  Fixture s = make(4, 1, 100, 1, 8, 3);
  EXPECT_THROW(reconfigure(s.plan, s.templates, {NodeId(99)}, s.cluster), ConfigError);
}

TEST(Join, NewNodesAreUsed) {
  for (int joining : {1, 2, 3, 9}) {
    Fixture s = make(8, 2, 2.0, 1, 16, 21);
    // Fail two nodes, then bring `joining` fresh ones.
    std::vector<NodeId> failed = {NodeId(0), NodeId(5)};
    Reconfiguration r = reconfigure(s.plan, s.templates, failed, s.cluster);
    std::vector<NodeId> fresh;
    for (int i = 0; i < joining; ++i) fresh.emplace_back(100 + i);
    Reconfiguration j = join(r.plan, s.templates, fresh, s.cluster);
    std::set<NodeId> expected;
    for (NodeId n : r.plan.nodes()) expected.insert(n);
    expected.insert(fresh.begin(), fresh.end());
    EXPECT_EQ(check(r.plan, j, s.templates, {}, expected), "") << joining << " joining";
    EXPECT_THROW(join(j.plan, s.templates, {NodeId(100)}, s.cluster), ConfigError);
  }
}

}  // namespace
}  // namespace bw::plan
