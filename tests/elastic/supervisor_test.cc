// The supervisor's state machine over scripted event sequences: an in-memory store
// (c10d::HashStore) stands in for the workers' reports, a fake clock for time and fake nodes for
// the agents. Each test checks what the coordinator publishes (decisions, aborts, the next
// generation's layout, start step and copy list) against what the protocol requires.
#include "elastic/supervisor.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include <nlohmann/json.hpp>
#include <set>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "elastic/keys.h"
#include "model/gpt.h"

namespace bw::elastic {
namespace {

class FakeClock final : public Clock {
 public:
  double now_ms() override { return t; }
  double t = 1e6;
};

class FakeNodes final : public Nodes {
 public:
  void start(int node, int incarnation) override { started.push_back({node, incarnation}); }
  void kill(int node) override { killed.insert(node); }
  std::vector<std::pair<int, int>> poll() override { return std::exchange(exits, {}); }
  double launch_ms(int node) const override {
    auto it = launch.find(node);
    return it == launch.end() ? 0 : it->second;
  }
  std::map<int, double> launch;  // agents' own start-up measures (remote agents report them)
  std::vector<std::pair<int, int>> started;
  std::set<int> killed;
  std::vector<std::pair<int, int>> exits;
};

std::string get(c10d::Store& s, const std::string& k) {
  auto b = s.get(k);
  return std::string(b.begin(), b.end());
}
void put(c10d::Store& s, const std::string& k, const std::string& v) {
  s.set(k, std::vector<uint8_t>(v.begin(), v.end()));
}

struct Harness {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  FakeClock clock;
  FakeNodes nodes;
  std::unique_ptr<Supervisor> sup;
  std::vector<StepRecord> steps;
  std::vector<Event> events;

  explicit Harness(int num_nodes, int steps_total = 10, int f = 1,
                   const std::function<void(SupervisorOptions&)>& tune = {}) {
    runtime::RunConfig config;
    config.model.name = "tiny";
    config.cluster.nodes = num_nodes;
    config.pipeline.schedule = "1f1b";
    config.pipeline.microbatches = 4;
    config.pipeline.microbatch_size = 2;
    config.pipeline.fault_tolerance = f;
    config.train.steps = steps_total;
    config.train.out_dir = ::testing::TempDir() + "bw_supervisor_test";
    const auto model = model::named_config("tiny", 256);
    auto [ctx, run] = initial_plan(config, model, num_nodes);
    SupervisorOptions opt;
    opt.steps = steps_total;
    opt.heartbeat_timeout_ms = 1000;
    opt.stop_grace_ms = 2000;
    opt.agent_startup_ms = 500;
    if (tune) tune(opt);
    sup = std::make_unique<Supervisor>(store, clock, nodes, ctx, run, opt);
    sup->on_step = [this](const StepRecord& r) { steps.push_back(r); };
    sup->on_event = [this](const Event& e) { events.push_back(e); };
    sup->start();
  }
  int g() const { return sup->current().layout.generation; }
  const runtime::RunLayout& layout() const { return sup->current().layout; }
  // Rank r of the current generation reports step s ready.
  void ready(int step, int r) {
    runtime::StepReport rep;
    rep.step = step;
    rep.rank = r;
    rep.loss = 1.0;
    rep.samples = {step * 100 + r};
    put(*store, keys::ready(g(), step, r), rep.to_json().dump());
    store->add(keys::num_ready(g(), step), 1);
  }
  void all_ready(int step) {
    for (int r = 0; r < layout().world_size(); ++r) ready(step, r);
  }
  // Heartbeats of every node and worker except `silent` nodes.
  void beat(const std::set<int>& silent = {}) {
    for (int n = 0; n < 8; ++n) {
      if (silent.count(n)) continue;
      store->add(keys::node_heartbeat(n), 1);
      store->add(keys::worker_heartbeat(n), 1);
    }
  }
  // Worker w left the generation having applied `steps_done` steps and holding its layers.
  void stopped(int w, int steps_done) {
    const auto& run = sup->current();
    std::vector<int> layers;
    for (int r = 0; r < run.layout.world_size(); ++r) {
      if (run.workers[r] == w) layers = run.layout.layers_of(r);
    }
    put(*store, keys::stopped(g(), w),
        nlohmann::json{{"steps_done", steps_done}, {"layers", layers}}.dump());
  }
  void tick(int n = 1) {
    for (int i = 0; i < n; ++i) {
      clock.t += 5;
      sup->tick();
    }
  }
  bool has(const std::string& key) { return store->check({key}); }
};

TEST(Supervisor, CommitsAStepOnlyWhenEveryRankIsReady) {
  Harness h(4);
  EXPECT_EQ(h.nodes.started.size(), 4u);
  const int world = h.layout().world_size();
  ASSERT_EQ(world, 4);
  for (int r = 0; r + 1 < world; ++r) h.ready(0, r);
  h.beat();
  h.tick(3);
  EXPECT_FALSE(h.has(keys::decision(0, 0))) << "committed before the last rank was ready";
  h.ready(0, world - 1);
  h.tick();
  ASSERT_TRUE(h.has(keys::decision(0, 0)));
  EXPECT_EQ(get(*h.store, keys::decision(0, 0)), "commit");
  ASSERT_EQ(h.steps.size(), 1u);
  EXPECT_EQ(h.steps[0].samples, samples_digest({0, 1, 2, 3}));
  EXPECT_EQ(h.sup->committed(), 1);
}

// Checks a published generation's copy list: every layer a rank needs and its worker did not
// hold comes from a surviving holder, exactly once.
void expect_copies_cover(Harness& h, const std::map<int, std::vector<int>>& held) {
  const auto start = nlohmann::json::parse(get(*h.store, keys::start(h.g())));
  std::set<std::pair<int, int>> got;  // (layer, to)
  for (const auto& c : start.at("copies")) {
    const int layer = c.at(0), from = c.at(1), to = c.at(2);
    ASSERT_TRUE(held.count(from)) << "source worker " << from << " did not survive";
    const auto& have = held.at(from);
    EXPECT_NE(std::find(have.begin(), have.end(), layer), have.end())
        << "worker " << from << " does not hold layer " << layer;
    EXPECT_TRUE(got.insert({layer, to}).second) << "layer " << layer << " sent twice";
  }
  const auto& run = h.sup->current();
  for (int r = 0; r < run.layout.world_size(); ++r) {
    const int w = run.workers[r];
    for (int l : run.layout.layers_of(r)) {
      const auto& have = held.at(w);
      const bool holds = std::find(have.begin(), have.end(), l) != have.end();
      EXPECT_EQ(got.count({l, w}), holds ? 0u : 1u) << "worker " << w << " layer " << l;
    }
  }
}

std::map<int, std::vector<int>> holdings(Harness& h, const std::set<int>& dead) {
  std::map<int, std::vector<int>> out;
  const auto& run = h.sup->current();
  for (int r = 0; r < run.layout.world_size(); ++r) {
    if (!dead.count(run.workers[r])) out[run.workers[r]] = run.layout.layers_of(r);
  }
  return out;
}

TEST(Supervisor, FailureBeforeTheCommitReplaysTheStepInTheNextGeneration) {
  Harness h(4);
  h.beat();
  h.all_ready(0);
  h.tick();
  ASSERT_EQ(h.sup->committed(), 1);
  for (int r = 0; r < 3; ++r) h.ready(1, r);  // rank 3 never gets there
  h.nodes.exits.push_back({3, 137});
  h.tick();
  EXPECT_EQ(get(*h.store, keys::decision(0, 1)), "abort");
  EXPECT_TRUE(h.has(keys::abort(0)));
  EXPECT_TRUE(h.nodes.killed.count(3)) << "the lost node was not fenced";
  ASSERT_EQ(h.events.size(), 1u);
  EXPECT_EQ(h.events[0].kind, "node_lost");
  const auto held = holdings(h, {3});
  h.tick(3);
  EXPECT_EQ(h.g(), 0) << "re-planned before the survivors stopped";
  for (int w : {0, 1, 2}) h.stopped(w, 1);
  h.tick();
  ASSERT_EQ(h.g(), 1);
  const auto next = nlohmann::json::parse(get(*h.store, keys::next(0)));
  EXPECT_EQ(next.at("generation"), 1);
  const auto start = nlohmann::json::parse(get(*h.store, keys::start(1)));
  EXPECT_EQ(start.at("first_step"), 1) << "the uncommitted step must be replayed";
  EXPECT_EQ(h.layout().world_size(), 3);
  for (int w : h.sup->current().workers) EXPECT_NE(w, 3);
  expect_copies_cover(h, held);
  // The replayed step commits in generation 1 and reports the recovery.
  h.beat();
  h.all_ready(1);
  h.tick();
  EXPECT_EQ(get(*h.store, keys::decision(1, 1)), "commit");
  ASSERT_EQ(h.events.size(), 2u);
  EXPECT_EQ(h.events[1].kind, "recovered");
  EXPECT_EQ(h.steps.back().step, 1);
  EXPECT_EQ(h.steps.back().generation, 1);
}

TEST(Supervisor, FailureAfterTheCommitStartsAtTheNextStep) {
  Harness h(4);
  h.beat();
  h.all_ready(0);
  h.tick();
  h.nodes.exits.push_back({1, 137});
  h.tick();
  EXPECT_EQ(get(*h.store, keys::decision(0, 0)), "commit");
  EXPECT_EQ(get(*h.store, keys::decision(0, 1)), "abort");
  for (int w : {0, 2, 3}) h.stopped(w, 1);
  h.tick();
  ASSERT_EQ(h.g(), 1);
  EXPECT_EQ(nlohmann::json::parse(get(*h.store, keys::start(1))).at("first_step"), 1);
}

TEST(Supervisor, StaleHeartbeatTakesTheNodeOut) {
  Harness h(4);
  for (int i = 0; i < 10; ++i) {  // 10 x 150 ms with every heartbeat moving
    h.beat();
    h.clock.t += 150;
    h.sup->tick();
  }
  EXPECT_TRUE(h.events.empty());
  for (int i = 0; i < 10; ++i) {  // node 2 goes silent for 1.5 s > 1 s
    h.beat({2});
    h.clock.t += 150;
    h.sup->tick();
  }
  ASSERT_EQ(h.events.size(), 1u);
  EXPECT_EQ(h.events[0].nodes, std::vector<int>{2});
  EXPECT_NE(h.events[0].cause.find("no heartbeat"), std::string::npos) << h.events[0].cause;
  EXPECT_TRUE(h.nodes.killed.count(2));
}

// A remote agent's start-up cannot be timed by the coordinator (someone else started it, long
// ago): the agent's own measure sets its workers' first-heartbeat grace, so slow-loading workers
// on a loaded host are not taken for hung ones; without it they are.
TEST(Supervisor, AnAgentsReportedStartUpExtendsItsWorkersFirstHeartbeatGrace) {
  for (const double reported_ms : {0.0, 2000.0}) {
    Harness h(4);
    h.nodes.launch[1] = reported_ms;
    h.tick();  // baseline readings
    for (int i = 0; i < 17; ++i) {  // 2.55 s: agents beat, node 1's worker is still loading
      for (int n = 0; n < 4; ++n) {
        h.store->add(keys::node_heartbeat(n), 1);
        if (n != 1) h.store->add(keys::worker_heartbeat(n), 1);
      }
      h.clock.t += 150;
      h.sup->tick();
    }
    if (reported_ms == 0) {
      ASSERT_EQ(h.events.size(), 1u);
      EXPECT_EQ(h.events[0].nodes, std::vector<int>{1});
      EXPECT_NE(h.events[0].cause.find("no first heartbeat"), std::string::npos)
          << h.events[0].cause;
    } else {
      // 1 s + twice 2 s: still within the grace.
      EXPECT_TRUE(h.events.empty()) << h.events[0].cause;
    }
  }
}

// Advances the clock in steps of `step_ms` until `until_ms` (or the first event), beating every
// node and worker but those of the `silent` nodes before each tick.
void run_until(Harness& h, double until_ms, const std::set<int>& silent, double step_ms = 50) {
  while (h.clock.t + step_ms <= until_ms && h.events.empty()) {
    h.beat(silent);
    h.clock.t += step_ms;
    h.sup->tick();
  }
}

// An agent that never sends its first heartbeat is lost at its start + heartbeat timeout + the
// start-up allowance (1000 + 500 ms here), not before, and not only after a grace derived from
// the step timeout (120 s); the cause names the agent's node.
TEST(Supervisor, AgentHungBeforeItsFirstHeartbeatIsFoundAfterTheAllowance) {
  Harness h(4);
  const double started = h.clock.t;
  run_until(h, started + 1450, {2});
  EXPECT_TRUE(h.events.empty()) << "lost before its allowance: " << h.events.front().cause;
  run_until(h, started + 1700, {2});
  ASSERT_EQ(h.events.size(), 1u) << "not found within heartbeat timeout + allowance";
  EXPECT_EQ(h.events[0].nodes, std::vector<int>{2});
  const auto& cause = h.events[0].cause;
  EXPECT_NE(cause.find("the agent of node 2 sent no first heartbeat"), std::string::npos) << cause;
  EXPECT_NE(cause.find("start-up allowance of 0.5 s"), std::string::npos) << cause;
  EXPECT_TRUE(h.nodes.killed.count(2));
}

// Heartbeat counters outlive a restart: a node started again (incarnation 1) whose counters are
// already high from incarnation 0 is not "up" until its new agent beats, and its allowance grows
// to twice the longest agent start-up measured in the run (here 800 ms -> 1.6 s).
TEST(Supervisor, RestartedAgentCountsFromItsRestartWithTheMeasuredAllowance) {
  Harness h(4, 10, 1, [](SupervisorOptions& o) { o.rejoin_after_ms = 300; });
  const double started = h.clock.t;
  // Every agent comes up 800 ms after its start (the workers with it); heartbeats are checked
  // every 100 ms, so ticks every 100 ms see the first beat at exactly +800 ms.
  while (h.clock.t < started + 700) {
    h.clock.t += 100;
    h.sup->tick();
  }
  h.beat();
  h.clock.t += 100;
  h.sup->tick();
  run_until(h, started + 1000, {});
  ASSERT_TRUE(h.events.empty()) << h.events.front().cause;
  h.all_ready(0);
  run_until(h, h.clock.t + 50, {});
  ASSERT_EQ(h.sup->committed(), 1);
  h.nodes.exits.push_back({3, 137});
  h.tick();
  ASSERT_EQ(h.events.size(), 1u);
  for (int w : {0, 1, 2}) h.stopped(w, 1);
  h.tick();
  ASSERT_EQ(h.g(), 1);
  h.events.clear();
  // Node 3 is started again after rejoin_after_ms; its counters keep their old values.
  while (h.nodes.started.size() < 5u && h.clock.t < started + 5000) {
    h.beat({3});
    h.clock.t += 50;
    h.sup->tick();
  }
  ASSERT_EQ(h.nodes.started.size(), 5u);
  EXPECT_EQ(h.nodes.started.back(), std::make_pair(3, 1));
  const double restarted = h.clock.t;
  run_until(h, restarted + 1000 + 1600 - 100, {3});
  EXPECT_TRUE(h.events.empty()) << "lost before its measured allowance: "
                                << h.events.front().cause;
  run_until(h, restarted + 1000 + 1600 + 200, {3});
  ASSERT_EQ(h.events.size(), 1u) << "the restarted agent's stale counter counted as a beat";
  EXPECT_EQ(h.events[0].nodes, std::vector<int>{3});
  const auto& cause = h.events[0].cause;
  EXPECT_NE(cause.find("the agent of node 3 sent no first heartbeat"), std::string::npos) << cause;
  EXPECT_NE(cause.find("twice the longest agent start-up of this run, 0.8 s"), std::string::npos)
      << cause;
}

TEST(Supervisor, SurvivorThatDoesNotStopIsTakenOutAfterTheGrace) {
  Harness h(4);
  h.beat();
  h.nodes.exits.push_back({3, 137});
  h.tick();
  h.stopped(0, 0);
  h.stopped(1, 0);  // worker 2 never reports
  h.clock.t += 1000;
  h.beat();
  h.sup->tick();
  EXPECT_FALSE(h.nodes.killed.count(2)) << "taken out before the grace ran out";
  h.clock.t += 1500;
  h.beat();
  h.sup->tick();
  EXPECT_TRUE(h.nodes.killed.count(2));
  h.tick();
  ASSERT_EQ(h.g(), 1);
  for (int w : h.sup->current().workers) EXPECT_TRUE(w == 0 || w == 1) << w;
}

TEST(Supervisor, WorkerBugOrBadInputIsNotALostPeer) {
  for (int status : {1, 2}) {
    Harness h(4);
    h.beat();
    put(*h.store, keys::worker_error(2),
        nlohmann::json{{"kind", status == 2 ? keys::kConfigError : "other"},
                       {"message", "boom"}}
            .dump());
    put(*h.store, keys::node_exit(2, 0),
        nlohmann::json{{"worker", 2}, {"status", status}, {"incarnation", 0}}.dump());
    h.store->add(keys::exits(), 1);
    h.tick();
    EXPECT_FALSE(h.sup->tick());
    EXPECT_EQ(h.sup->outcome().kind, Outcome::kFailed);
    EXPECT_EQ(h.sup->outcome().config_error, status == 2);
    EXPECT_EQ(h.sup->outcome().message, "boom");
    EXPECT_EQ(h.g(), 0) << "a bug must not trigger a reconfiguration";
  }
}

TEST(Supervisor, LosingEveryReplicaOfALayerStops) {
  Harness h(4);
  h.beat();
  // Nodes 0 and 2 run stage 0 of the two pipelines: both replicas of layer 0.
  h.nodes.exits.push_back({0, 137});
  h.nodes.exits.push_back({2, 137});
  h.tick();
  h.stopped(1, 0);
  h.stopped(3, 0);
  h.tick();
  EXPECT_FALSE(h.sup->tick());
  EXPECT_EQ(h.sup->outcome().kind, Outcome::kStopped);
  EXPECT_NE(h.sup->outcome().message.find("no surviving replica of layer"), std::string::npos)
      << h.sup->outcome().message;
  EXPECT_EQ(nlohmann::json::parse(get(*h.store, keys::next(0))).at("kind"), "shutdown");
}

}  // namespace
}  // namespace bw::elastic
