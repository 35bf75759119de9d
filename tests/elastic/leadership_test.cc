// A coordinator's leadership in etcd (src/elastic/leadership.h), against a real 3-member etcd on
// loopback (etcd_cluster.h):
// - Leadership itself: a second coordinator is refused naming the holder (another config, or the
//   same); decide() writes a key once and returns what stands; a leader whose lease was revoked
//   (the evidence path of a takeover) loses at its next check and its fenced writes change nothing
//   once another has won.
// - Real runs (`breakwater coordinator --control etcd://...` and an agent on loopback): the run
//   ends bitwise where the same run on the embedded store ends, with the same samples per step,
//   and etcd's history holds exactly one decision per (generation, step), the leader key gone at
//   the end; a coordinator paused (SIGSTOP) past its lease while another takes the lead exits 3 at
//   its resumption with "lost leadership" and writes nothing after the new epoch, and its agent is
//   told nothing.
// - Bad input: a --control URL that does not parse, no --run-id, etcd unreachable (the endpoints
//   named), a run id led by a live coordinator with another config: one error line, exit 2.
#include "elastic/leadership.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "../runtime/checkpoint_runs.h"
#include "../runtime/cli_runner.h"
#include "elastic/control_store_etcd.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/process.h"
#include "etcd_cluster.h"
#include "runtime/checkpointing.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using etcd_test::EtcdCluster;

constexpr double kDeadlineS = 120;

std::string dir() {
  static const std::string d = bw::testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_leadership_{}", getpid())).string());
  return d;
}

std::string corpus() {
  static const std::string p = bw::testing::write_word_corpus(
      (fs::path(dir()) / "corpus.txt").string(),
      {"wave", "pipeline", "lease", "epoch", "fence", "leader", "standby", "quorum", "etcd"});
  return p;
}

std::shared_ptr<ControlStore> client(const EtcdCluster& c, const std::string& run_id) {
  return EtcdControlStore::connect(parse_control_url(c.url()), run_id, deadline_in(10s));
}

LeaderRecord record(const std::string& config) {
  return {.address = "127.0.0.1:1", .host = "test", .pid = 1, .config = config};
}

// --- Leadership itself

TEST(Leadership, ASecondCoordinatorIsRefusedNamingTheHolder) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  LeadershipOptions a{.key = "leader", .record = record("aaaa"), .ttl_s = 5};
  Leadership first(client(cluster, "r1"), a, deadline_in(10s));
  EXPECT_GT(first.epoch(), 0);
  for (const std::string config : {"aaaa", "bbbb"}) {
    LeadershipOptions b = a;
    b.record.config = config;
    b.record.address = "10.0.0.2:29500";
    try {
      Leadership second(client(cluster, "r1"), b, deadline_in(10s));
      ADD_FAILURE() << "a second leader was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("127.0.0.1:1"), std::string::npos) << msg;  // the holder's address
      EXPECT_NE(msg.find(fmt::format("epoch {}", first.epoch())), std::string::npos) << msg;
      const bool other = config != "aaaa";
      EXPECT_EQ(msg.find("another config") != std::string::npos, other) << msg;
      EXPECT_EQ(msg.find("same config") != std::string::npos, !other) << msg;
    }
  }
  // Another run id is another run.
  LeadershipOptions c = a;
  c.record.config = "cccc";
  Leadership other_run(client(cluster, "r2"), c, deadline_in(10s));
  EXPECT_GT(other_run.epoch(), first.epoch());
}

TEST(Leadership, DecideWritesAKeyOnceAndReturnsWhatStands) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "decide");
  Leadership lead(store, {.key = "leader", .record = record("x"), .ttl_s = 5}, deadline_in(10s));
  EXPECT_EQ(lead.decide("g0/decision/0", "commit"), "commit");
  EXPECT_EQ(lead.decide("g0/decision/0", "abort"), "commit");  // the first write stands
  const auto kv = store->get(lead.instance_prefix() + "g0/decision/0", deadline_in(5s));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "commit");
  EXPECT_EQ(kv->version, 1);  // written once
  lead.put("store", "127.0.0.1:2");
  EXPECT_EQ(store->get(lead.instance_prefix() + "store", deadline_in(5s))->value, "127.0.0.1:2");
  lead.resign();
  EXPECT_FALSE(store->get("leader", deadline_in(5s)).has_value());
}

TEST(Leadership, ARevokedLeaderLosesAtItsNextCheckAndWritesNothingOnceAnotherWon) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "revoked");
  Leadership old(store, {.key = "leader", .record = record("x"), .ttl_s = 2}, deadline_in(10s));
  EXPECT_EQ(old.decide("g0/decision/0", "commit"), "commit");
  const std::string prefix = old.instance_prefix();
  // Positive evidence of its death: another process revokes its lease; a standby wins.
  auto other = client(cluster, "revoked");
  other->revoke(old.lease(), deadline_in(5s));
  const auto lease = other->grant_lease(10, deadline_in(5s));
  const int64_t epoch = other->campaign("leader", "standby", lease.id, deadline_in(10s));
  EXPECT_GT(epoch, old.epoch());
  // Whether the renewal thread saw it first or the write does: LostLeadership, nothing written.
  EXPECT_THROW(old.decide("g0/decision/1", "commit"), LostLeadership);
  EXPECT_THROW(old.check(), LostLeadership);
  EXPECT_THROW(old.put("store", "127.0.0.1:3"), LostLeadership);
  EXPECT_FALSE(other->get(prefix + "g0/decision/1", deadline_in(5s)).has_value());
  EXPECT_FALSE(other->get(prefix + "store", deadline_in(5s)).has_value());
  EXPECT_EQ(other->leader("leader", deadline_in(5s))->epoch, epoch);
}

TEST(Leadership, AKeyTakenWhileTheLeaseLivesIsFencedOutByTheWriteItself) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "taken");
  Leadership old(store, {.key = "leader", .record = record("x"), .ttl_s = 10}, deadline_in(10s));
  const std::string prefix = old.instance_prefix();
  // Its lease lives and is renewed, so check() sees nothing wrong: only the fence can stop it.
  auto other = client(cluster, "taken");
  ASSERT_TRUE(other->erase("leader", deadline_in(5s)));
  const auto lease = other->grant_lease(10, deadline_in(5s));
  const int64_t epoch = other->campaign("leader", "standby", lease.id, deadline_in(10s));
  EXPECT_NO_THROW(old.check());
  EXPECT_THROW(old.decide("g0/decision/0", "commit"), LostLeadership);
  EXPECT_THROW(old.check(), LostLeadership);  // and it stays lost
  EXPECT_FALSE(other->get(prefix + "g0/decision/0", deadline_in(5s)).has_value());
  EXPECT_EQ(other->leader("leader", deadline_in(5s))->epoch, epoch);
}

// --- Real runs

struct Run {
  bw::testing::CliResult coordinator;
  int agent = -1;
  std::string agent_log;
  std::string out_dir;
};

// The port of the coordinator's store in the newest run().
int last_port = 0;

// A run of `steps` steps of the tiny model, 2 workers on one agent, coordinator and agent on
// loopback; `control` empty: the embedded store. `during` runs in the test while the coordinator
// does (given its pid). `agent_wait_s`: the agent's --wait-s, which is also how long it outlives a
// coordinator that is gone.
template <class During>
Run run(const std::string& name, int steps, const std::vector<std::string>& control, During during,
        const std::string& base = dir(), int agent_wait_s = 20) {
  Run r;
  r.out_dir = (fs::path(base) / name).string();
  const int port = etcd_test::free_port();
  last_port = port;
  const std::string at = fmt::format("127.0.0.1:{}", port);
  std::vector<std::string> args = {"coordinator", "--listen", at, "--wait-s", "60"};
  args.insert(args.end(), control.begin(), control.end());
  for (const auto& a : bw::testing::tiny_train_args(
           corpus(), r.out_dir, steps,
           {"--cluster.nodes=1", "--cluster.devices_per_node=2", "--pipeline.pipelines=[2]",
            "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0",
            "--checkpoint.dir=" + r.out_dir + "/ckpt"})) {
    args.push_back(a);
  }
  bw::testing::ScopedEnv token("BW_RUN_TOKEN", "leadership-test");
  r.agent_log = r.out_dir + ".agent.log";
  fs::create_directories(fs::path(r.out_dir).parent_path());
  auto agent = ChildProcess::spawn(
      "/bin/sh", {"sh", "-c",
                  fmt::format("exec '{}' agent --coordinator {} --node-name local --wait-s {} "
                              ">'{}' 2>&1",
                              BW_BINARY, at, agent_wait_s, r.agent_log)});
  r.coordinator = bw::testing::run_cli(args, r.out_dir + ".log", kDeadlineS, during);
  // An agent whose coordinator is gone gives up after its --wait-s.
  r.agent = agent.wait_or_kill(std::chrono::seconds(40));
  r.agent_log = bw::testing::read_text(r.agent_log);
  return r;
}

std::vector<std::string> step_samples(const std::string& out_dir) {
  std::vector<std::string> out;
  std::ifstream in(fs::path(out_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    // A run still writing may show a partial last line.
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_object() && doc.contains("samples"))
      out.push_back(doc["samples"].get<std::string>());
  }
  return out;
}

// Every change etcd holds for the run, in order (watch from revision 1).
std::vector<WatchEvent> history(ControlStore& store, const std::string& prefix) {
  std::vector<WatchEvent> all;
  int64_t from = 1;
  const int64_t now = store.revision(deadline_in(5s));
  while (from <= now) {
    auto events = store.watch(prefix, from, deadline_in(2s));
    if (events.empty()) break;
    for (auto& e : events) all.push_back(std::move(e));
    from = all.back().revision + 1;
  }
  return all;
}

constexpr int kSteps = 8;
// The agent's --wait-s where the coordinator is meant to exit (3) and leave its agent behind: long
// enough for the coordinator to come up on a loaded machine, short enough not to idle the suite.
constexpr int kShortAgentWaitS = 8;

// The same run on the embedded store, once per build for every process of this binary (CTest runs
// each case in its own), under a lock.
const std::string& reference() {
  static const std::string out = bw::testing::shared_run(
      "bw_leadership_ref", BW_BINARY, "embedded", [](const std::string& folder) {
        const auto r = run(
            "embedded", kSteps, {}, [](pid_t) {}, fs::path(folder).parent_path().string());
        if (r.coordinator.status != 0)
          ADD_FAILURE() << "the reference run failed:\n" << r.coordinator.output;
        return r.coordinator.status == 0;
      });
  return out;
}

// The run bitwise where the reference ends, with the same samples at every step.
void expect_same_as_reference(const Run& got) {
  ASSERT_EQ(got.coordinator.status, 0) << got.coordinator.output;
  EXPECT_EQ(got.agent, 0) << got.agent_log;
  bw::testing::expect_bitwise_equal(runtime::checkpoint_dir(got.out_dir + "/ckpt", kSteps),
                                    runtime::checkpoint_dir(reference() + "/ckpt", kSteps));
  EXPECT_EQ(step_samples(got.out_dir), step_samples(reference()));
  EXPECT_EQ(step_samples(got.out_dir).size(), static_cast<size_t>(kSteps));
}

// Waits (in a run's `during`) until the leader of `run_id` has written the decision of step k of
// generation 0; returns the leader, or nullopt after 90 s.
std::optional<Leader> wait_for_decision(ControlStore& store, int k) {
  const auto until = ControlClock::now() + 90s;
  while (ControlClock::now() < until) {
    try {
      const auto lead = store.leader(keys::leader(), deadline_in(5s));
      if (lead &&
          store.get(fmt::format("i{}/{}", lead->epoch, keys::decision(0, k)), deadline_in(5s))) {
        return lead;
      }
    } catch (const ControlError&) {
    }
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

// The keys of run `run_id`'s instance with how often each was put, from etcd's history.
std::map<std::string, int> puts_of_instance(ControlStore& store, int64_t* epoch) {
  *epoch = 0;
  for (const auto& e : history(store, keys::leader())) {
    if (e.key == keys::leader() && e.type == WatchEvent::Type::kPut) *epoch = e.revision;
  }
  std::map<std::string, int> puts;
  for (const auto& e : history(store, fmt::format("i{}/", *epoch))) {
    if (e.type == WatchEvent::Type::kPut) ++puts[e.key];
  }
  return puts;
}

TEST(FencedRun, EndsWhereTheEmbeddedRunEndsWithOneDecisionPerStepInEtcd) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  const auto got =
      run("etcd", kSteps, {"--control", cluster.url(), "--run-id", "fenced"}, [](pid_t) {});
  expect_same_as_reference(got);

  auto store = client(cluster, "fenced");
  EXPECT_FALSE(store->get(keys::leader(), deadline_in(5s)).has_value()) << "not resigned";
  int64_t epoch = 0;
  auto puts = puts_of_instance(*store, &epoch);
  ASSERT_GT(epoch, 0);
  const std::string prefix = fmt::format("i{}/", epoch);
  for (int k = 0; k < kSteps; ++k) {
    const auto key = prefix + keys::decision(0, k);
    EXPECT_EQ(puts[key], 1) << key;
    const auto kv = store->get(key, deadline_in(5s));
    ASSERT_TRUE(kv.has_value()) << key;
    EXPECT_EQ(decode_decision(kv->value, key), Decision::kCommit) << key;
  }
  int decisions = 0;
  for (const auto& [key, n] : puts) decisions += key.find("/decision/") != std::string::npos;
  EXPECT_EQ(decisions, kSteps);
  EXPECT_EQ(puts[prefix + keys::leader_store()], 1);
  EXPECT_EQ(puts[prefix + keys::checkpoint_commit(kSteps)], 1);  // the final checkpoint
}

TEST(FencedRun, TheEtcdLeaderKilledMidRunCostsNoStepAndNoTakeover) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "etcd-leader");
  int killed = -1;
  std::optional<Leader> before;
  const auto got = run("etcd_leader_killed", kSteps,
                       {"--control", cluster.url(), "--run-id", "etcd-leader"}, [&](pid_t) {
                         before = wait_for_decision(*store, 2);
                         killed = cluster.leader();
                         if (killed >= 0) cluster.kill(killed);
                       });
  ASSERT_TRUE(before.has_value()) << "no decision 2";
  ASSERT_GE(killed, 0) << "no etcd member said it leads";
  expect_same_as_reference(got);
  // The same coordinator led throughout (one leader put), and each step was decided once.
  int64_t epoch = 0;
  const auto puts = puts_of_instance(*store, &epoch);
  EXPECT_EQ(epoch, before->epoch);
  int decisions = 0;
  for (const auto& [key, n] : puts) {
    if (key.find("/decision/") == std::string::npos) continue;
    ++decisions;
    EXPECT_EQ(n, 1) << key;
  }
  EXPECT_EQ(decisions, kSteps);
}

TEST(FencedRun, TwoOfThreeMembersLostPauseTheRunUntilOneReturns) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "quorum");
  size_t during_outage = 0, after_outage = 0;
  bool decided = false;
  const std::string out_dir = (fs::path(dir()) / "quorum_lost").string();
  const auto got =
      run("quorum_lost", kSteps, {"--control", cluster.url(), "--run-id", "quorum"}, [&](pid_t) {
        decided = wait_for_decision(*store, 2).has_value();
        cluster.kill(1);
        cluster.kill(2);
        // No quorum: at most the step already decided commits; then no step for 3 s.
        std::this_thread::sleep_for(1500ms);
        during_outage = step_samples(out_dir).size();
        std::this_thread::sleep_for(3000ms);
        after_outage = step_samples(out_dir).size();
        cluster.restart(2);
      });
  ASSERT_TRUE(decided) << "no decision 2";
  EXPECT_EQ(after_outage, during_outage) << "steps committed without a quorum";
  EXPECT_LT(after_outage, static_cast<size_t>(kSteps));
  expect_same_as_reference(got);
}

TEST(FencedRun, TwoOfThreeMembersLostPastTheLeaderlessTimeoutEndTheRunWithExit3) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "no-quorum");
  bool decided = false;
  const auto got =
      run("no_quorum", 200,
          {"--control", cluster.url(), "--run-id", "no-quorum", "--leaderless-timeout-s", "3"},
          [&](pid_t) {
            decided = wait_for_decision(*store, 2).has_value();
            cluster.kill(0);
            cluster.kill(1);
          },
          dir(), kShortAgentWaitS);
  ASSERT_TRUE(decided) << "no decision 2";
  EXPECT_EQ(got.coordinator.status, 3) << got.coordinator.output;
  EXPECT_NE(got.coordinator.output.find("did not answer for 3 s"), std::string::npos)
      << got.coordinator.output;
  EXPECT_NE(got.agent, 0) << got.agent_log;
}

TEST(FencedRun, ACoordinatorPausedPastItsLeaseExitsAtResumptionWithoutSideEffects) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "paused");
  int64_t epoch = 0, old_epoch = 0;
  std::string failure;
  bool told_agents = false;
  const auto got =
      run("paused", 200, {"--control", cluster.url(), "--run-id", "paused", "--lease-ttl-s", "2"},
          [&](pid_t pid) {
            // Wait for the third decision, then pause the coordinator past its lease.
            const auto lead = wait_for_decision(*store, 2);
            if (!lead) {
              failure = "no decision 2 within 90 s";
              return;
            }
            old_epoch = lead->epoch;
            // A client of its store, as an agent is, to see what it writes there before it exits.
            c10d::TCPStoreOptions opts;
            opts.port = static_cast<uint16_t>(last_port);
            opts.isServer = false;
            opts.waitWorkers = false;
            opts.timeout = std::chrono::milliseconds(5000);
            c10::intrusive_ptr<c10d::TCPStore> tcp;
            try {
              tcp = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
            } catch (const std::exception& e) {
              failure = std::string("could not connect to the coordinator's store: ") + e.what();
              return;
            }
            ::kill(pid, SIGSTOP);
            // Its key goes with its lease; a standby (this test) takes the lead.
            try {
              const auto lease = store->grant_lease(30, deadline_in(5s));
              epoch = store->campaign(keys::leader(), "standby", lease.id, deadline_in(20s));
            } catch (const std::exception& e) {
              failure = std::string("the test's campaign failed: ") + e.what();
            }
            ::kill(pid, SIGCONT);
            // Until its store goes with it: does it tell its agents the run is over?
            const auto until = ControlClock::now() + 30s;
            while (ControlClock::now() < until) {
              try {
                if (tcp->check({keys::run_over()})) {
                  told_agents = true;
                  break;
                }
              } catch (const std::exception&) {
                break;  // the store is gone
              }
              std::this_thread::sleep_for(20ms);
            }
          },
          dir(), kShortAgentWaitS);
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_EQ(got.coordinator.status, 3) << got.coordinator.output;
  EXPECT_NE(got.coordinator.output.find("lost leadership"), std::string::npos)
      << got.coordinator.output;
  ASSERT_GT(epoch, old_epoch);
  // Nothing written by the old leader after the new epoch began.
  for (const auto& e : history(*store, fmt::format("i{}/", old_epoch))) {
    EXPECT_LT(e.revision, epoch) << e.key << " = " << e.value;
  }
  // Its agents were told nothing: no end of run in its store (read until the store went), none
  // in its agent's log, no node taken out.
  EXPECT_FALSE(told_agents) << "the old coordinator published the end of the run";
  EXPECT_EQ(got.agent_log.find("the run stopped"), std::string::npos) << got.agent_log;
  EXPECT_EQ(got.agent_log.find("took node"), std::string::npos) << got.agent_log;
}

// --- Takeover: an active coordinator and a standby (each with its own train.out_dir, one
// checkpoint.dir), the agent following the leadership (--control).

struct Takeover {
  int active = -1, standby = -1, agent = -1;
  std::string active_log, standby_log, agent_log, base;
};

std::string read_or_empty(const std::string& path) {
  return fs::exists(path) ? bw::testing::read_text(path) : std::string();
}

// A coordinator of the run `name` (`--control`, `extra` added) writing `who`.log in `base`;
// `nodes` and `config` as for takeover below.
ChildProcess spawn_coordinator(const std::string& base, const EtcdCluster& cluster,
                               const std::string& name, int steps,
                               const std::vector<std::string>& extra, int nodes,
                               const std::vector<std::string>& config, const std::string& who,
                               const std::string& more, const std::string& env) {
  std::string cmd = fmt::format(
      "exec env {} '{}' coordinator --listen 127.0.0.1:0 --wait-s 60 --log-level info --control {} "
      "--run-id {} {} {}",
      env, BW_BINARY, cluster.url(), name, fmt::join(extra, " "), more);
  std::vector<std::string> shape;
  if (nodes == 1) {
    shape = {"--cluster.nodes=1", "--cluster.devices_per_node=2", "--pipeline.pipelines=[2]",
             "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0"};
  } else if (nodes == 2) {
    shape = {"--cluster.nodes=2", "--cluster.devices_per_node=1", "--pipeline.pipelines=[1,1]",
             "--pipeline.fault_tolerance=1"};
  } else {
    shape = {"--cluster.nodes=3", "--cluster.devices_per_node=1", "--pipeline.pipelines=[1,2]",
             "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=1"};
  }
  shape.push_back("--checkpoint.dir=" + base + "/ckpt");
  shape.insert(shape.end(), config.begin(), config.end());
  for (const auto& a : bw::testing::tiny_train_args(corpus(), base + "/" + who, steps, shape)) {
    cmd += " '" + a + "'";
  }
  return ChildProcess::spawn("/bin/sh",
                             {"sh", "-c", fmt::format("{} >'{}/{}.log' 2>&1", cmd, base, who)});
}

// Waits (60 s at most) until a coordinator leads the run `name`.
void wait_for_a_leader(const EtcdCluster& cluster, const std::string& name) {
  auto store = client(cluster, name);
  const auto until = ControlClock::now() + 60s;
  while (ControlClock::now() < until) {
    try {
      if (store->leader(keys::leader(), deadline_in(5s))) return;
    } catch (const ControlError&) {
    }
    std::this_thread::sleep_for(20ms);
  }
}

// `during(active, standby)` acts on the two coordinators once they run; the test then waits for
// each process (the standby last: it ends the run when it took over).
// `nodes` 1: one agent with 2 workers, one pipeline; 2: two agents with 1 worker each, two
// pipelines (f = 1); 3: three agents with 1 worker each, pipelines [1, 2] (f = 1). `config` is
// added to both coordinators' config.
template <class During>
Takeover takeover(const std::string& name, const EtcdCluster& cluster, int steps,
                  const std::vector<std::string>& extra, During during,
                  const std::string& active_env = "", int nodes = 1,
                  const std::vector<std::string>& config = {}) {
  Takeover t;
  t.base = (fs::path(dir()) / name).string();
  fs::create_directories(t.base);
  bw::testing::ScopedEnv token("BW_RUN_TOKEN", "leadership-test");
  auto coordinator = [&](const std::string& who, const std::string& more, const std::string& env) {
    return spawn_coordinator(t.base, cluster, name, steps, extra, nodes, config, who, more, env);
  };
  auto active = coordinator("active", "", active_env);
  // The standby once the active leads (else it could lead first).
  wait_for_a_leader(cluster, name);
  auto standby = coordinator("standby", "--standby", "");
  std::vector<ChildProcess> agents;
  for (int i = 0; i < nodes; ++i) {
    agents.push_back(ChildProcess::spawn(
        "/bin/sh",
        {"sh", "-c",
         fmt::format(
             "exec env BW_LOG_LEVEL=info '{}' agent --control {} --run-id {} --node-name n{} "
             "--wait-s 30 --leaderless-timeout-s 30 >'{}/agent{}.log' 2>&1",
             BW_BINARY, cluster.url(), name, i, t.base, i)}));
  }
  during(active.pid(), standby.pid());
  t.standby = standby.wait_or_kill(std::chrono::seconds(150));
  // The first agent's status (a second one may have lost its node on purpose).
  for (size_t i = 0; i < agents.size(); ++i) {
    const int st = agents[i].wait_or_kill(std::chrono::seconds(40));
    if (i == 0) t.agent = st;
  }
  t.active = active.wait_or_kill(std::chrono::seconds(40));
  t.active_log = read_or_empty(t.base + "/active.log");
  t.standby_log = read_or_empty(t.base + "/standby.log");
  for (int i = 0; i < nodes; ++i)
    t.agent_log += read_or_empty(fmt::format("{}/agent{}.log", t.base, i));
  return t;
}

std::string logs(const Takeover& t) {
  return "--- active:\n" + t.active_log + "\n--- standby:\n" + t.standby_log + "\n--- agent:\n" +
         t.agent_log;
}

// Step -> samples digest over the metrics of several coordinators' out_dirs; a step in more than
// one must agree.
std::map<int, std::string> samples_by_step(const std::vector<std::string>& out_dirs) {
  std::map<int, std::string> out;
  for (const auto& who : out_dirs) {
    std::ifstream in(fs::path(who) / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto doc = nlohmann::json::parse(line, nullptr, false);
      if (!doc.is_object() || !doc.contains("samples")) continue;
      const int step = doc["step"].get<int>();
      const auto digest = doc["samples"].get<std::string>();
      if (out.count(step)) EXPECT_EQ(out[step], digest) << "step " << step << " differs";
      out[step] = digest;
    }
  }
  return out;
}

std::map<int, std::string> samples_by_step(const Takeover& t) {
  return samples_by_step({t.base + "/active", t.base + "/standby"});
}

// The "recovered" events a coordinator recorded in its out_dir.
std::vector<nlohmann::json> recovered_events(const std::string& out_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(fs::path(out_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_object() && doc.value("event", "") == "recovered") out.push_back(doc);
  }
  return out;
}

// The "recovered" events the standby recorded.
std::vector<nlohmann::json> recovered_events(const Takeover& t) {
  return recovered_events(t.base + "/standby");
}

// The run ended where the failure-free run ends, bitwise, every step it recorded on the samples
// the failure-free run trained that step on, and each step committed exactly once in etcd.
void expect_taken_over_like_reference(const Takeover& t, ControlStore& store,
                                      const std::string& ref_ckpt = reference() + "/ckpt",
                                      std::vector<std::string> want = {}) {
  ASSERT_EQ(t.standby, 0) << logs(t);
  EXPECT_EQ(t.agent, 0) << logs(t);
  bw::testing::expect_bitwise_equal(runtime::checkpoint_dir(t.base + "/ckpt", kSteps),
                                    runtime::checkpoint_dir(ref_ckpt, kSteps));
  if (want.empty()) want = step_samples(reference());
  const auto got = samples_by_step(t);
  // The step whose decision was durable when the leader died may be in neither file (only that).
  EXPECT_GE(got.size() + 1, want.size());
  for (const auto& [step, digest] : got) {
    ASSERT_LT(step, static_cast<int>(want.size()));
    EXPECT_EQ(digest, want[step]) << "step " << step;
  }
  EXPECT_TRUE(got.count(kSteps - 1)) << "the last step is not recorded";
  const auto events = recovered_events(t);
  ASSERT_EQ(events.size(), 1u) << logs(t);
  EXPECT_EQ(events[0]["cause"], "coordinator");
  // etcd's history: each decision key written once, and each step committed exactly once over
  // all generations (a step is applied on every replica or on none).
  const auto inst = store.get(keys::instance(), deadline_in(5s));
  ASSERT_TRUE(inst.has_value());
  const auto instance = decode_instance(inst->value, keys::instance());
  EXPECT_TRUE(instance.over);
  std::map<std::string, int> puts;
  std::map<int, int> commits;  // step -> commits
  for (const auto& e : history(store, fmt::format("i{}/", instance.epoch))) {
    if (e.type != WatchEvent::Type::kPut || e.key.find("/decision/") == std::string::npos) continue;
    ++puts[e.key];
    const int step = std::stoi(e.key.substr(e.key.rfind('/') + 1));
    const auto d = decode_decision(e.value, e.key);
    if (d == Decision::kCommit || d == Decision::kLast) ++commits[step];
  }
  for (const auto& [key, n] : puts) EXPECT_EQ(n, 1) << key;
  for (int k = 0; k < kSteps; ++k) EXPECT_EQ(commits[k], 1) << "step " << k;
  EXPECT_FALSE(store.get(keys::leader(), deadline_in(5s)).has_value()) << "not resigned";
}

TEST(Takeover, TheActiveCoordinatorKilledMidRunEndsWhereTheFailureFreeRunEnds) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "killed");
  std::string failure;
  const auto t = takeover("killed", cluster, kSteps, {}, [&](pid_t active, pid_t) {
    if (!wait_for_decision(*store, 3)) failure = "no decision 3 within 90 s";
    ::kill(active, SIGKILL);
  });
  ASSERT_TRUE(failure.empty()) << failure << logs(t);
  EXPECT_EQ(t.active, 128 + SIGKILL);
  expect_taken_over_like_reference(t, *store);
  // Its store refused connections at once: the evidence path, well inside the 5 s lease.
  EXPECT_NE(t.standby_log.find("revoked on evidence"), std::string::npos) << t.standby_log;
}

TEST(Takeover, KilledRightAfterADecisionWasDurableThatStepIsAppliedOnce) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "after-write");
  // Killed by its own hook after its 4th decision reached etcd and before its store had it: no
  // worker saw that commit from it; the standby publishes it again.
  const auto t = takeover(
      "after-write", cluster, kSteps, {}, [&](pid_t, pid_t) {}, "BW_KILL_AFTER_DECISION=4");
  EXPECT_EQ(t.active, 128 + SIGKILL) << logs(t);
  expect_taken_over_like_reference(t, *store);
}

TEST(Takeover, AnActiveCoordinatorPausedPastItsLeaseIsReplacedAndExitsWithoutSideEffects) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "paused-active");
  std::string failure;
  int64_t old_epoch = 0, new_epoch = 0;
  const auto t =
      takeover("paused-active", cluster, kSteps, {"--lease-ttl-s", "2"}, [&](pid_t active, pid_t) {
        const auto lead = wait_for_decision(*store, 3);
        if (!lead) {
          failure = "no decision 3 within 90 s";
          return;
        }
        old_epoch = lead->epoch;
        ::kill(active, SIGSTOP);
        // Its port still accepts (the kernel does): no evidence; the lease path, then the standby.
        const auto until = ControlClock::now() + 60s;
        while (ControlClock::now() < until && new_epoch <= old_epoch) {
          try {
            const auto now = store->leader(keys::leader(), deadline_in(5s));
            if (now) new_epoch = now->epoch;
          } catch (const ControlError&) {
          }
          std::this_thread::sleep_for(20ms);
        }
        std::this_thread::sleep_for(1s);  // the standby at work
        ::kill(active, SIGCONT);
      });
  ASSERT_TRUE(failure.empty()) << failure << logs(t);
  ASSERT_GT(new_epoch, old_epoch) << logs(t);
  EXPECT_EQ(t.active, 3) << logs(t);
  EXPECT_NE(t.active_log.find("lost leadership"), std::string::npos) << t.active_log;
  EXPECT_EQ(t.standby_log.find("revoked on evidence"), std::string::npos) << t.standby_log;
  expect_taken_over_like_reference(t, *store);
  // Nothing the old leader wrote in etcd after the new epoch began: of generation 0 (its
  // generation) only the new leader's abort of the step in flight may follow, once.
  int late = 0;
  for (const auto& e : history(*store, "i")) {
    if (e.revision > new_epoch && e.key.find("/g0/decision/") != std::string::npos) {
      ++late;
      EXPECT_EQ(decode_decision(e.value, e.key), Decision::kAbort) << e.key;
    }
  }
  EXPECT_LE(late, 1);
}

// Two nodes, node 1's worker killed in step 3 (--elastic.inject), the active coordinator killed
// by its own hook `active_env` during that recovery: the run taken over ends bitwise where the
// same run and fault led by one coordinator to the end ends (the same plans, so the same bits).
Takeover taken_over_in_a_recovery(const std::string& name, const std::string& active_env) {
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, name);
  const std::vector<std::string> fault = {"--elastic.inject=kill:node=1:step=3"};
  const auto ref = takeover(
      name + "-ref", cluster, kSteps, {}, [](pid_t, pid_t) {}, "", 2, fault);
  EXPECT_EQ(ref.active, 0) << logs(ref);
  std::vector<std::string> want;
  for (const auto& [step, digest] : samples_by_step(ref)) want.push_back(digest);
  auto t = takeover(
      name, cluster, kSteps, {}, [](pid_t, pid_t) {}, active_env, 2, fault);
  EXPECT_EQ(t.active, 128 + SIGKILL) << logs(t);
  expect_taken_over_like_reference(t, *store, ref.base + "/ckpt", want);
  return t;
}

TEST(Takeover, KilledWhileItAbortedAStepForALostNodeTheStandbyFinishesTheRecovery) {
  BW_REQUIRE_ETCD();
  // Its 4th decision is step 3's abort: it dies right after writing it.
  const auto t = taken_over_in_a_recovery("regroup", "BW_KILL_AFTER_DECISION=4");
  const auto events = recovered_events(t);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["nodes"], nlohmann::json::array({1}));
  EXPECT_EQ(events[0]["step"], 3);
}

TEST(Takeover, KilledAfterItPublishedTheNextGenerationTheStandbyFormsIt) {
  BW_REQUIRE_ETCD();
  // Its second run state is generation 1's: it dies once that is durable, with every survivor's
  // stopped report in its own store and none told of generation 1.
  taken_over_in_a_recovery("published", "BW_KILL_AT_STATE=2");
}

TEST(Takeover, KilledWithTheSurvivorsReportsInItsStoreTheyAreSentAgain) {
  BW_REQUIRE_ETCD();
  // It dies re-planning, before generation 1 is durable: the survivor's report of what it holds
  // is in its store only, and the standby's quiesce needs it again.
  taken_over_in_a_recovery("resent", "BW_KILL_AT_STATE=2:before");
}

// The same, killed between the survivor's report (in its store) and the count after it: the
// worker's call that fails over is the count, so the report itself must be sent again to the new
// store, or the standby waits for it in vain ("worker 0 did not stop"). The workers sleep between
// the two (BW_DELAY_AFTER_STOPPED_MS) so that the coordinator, killed on the report, dies there.
TEST(Takeover, KilledBetweenASurvivorsReportAndItsCountTheReportIsSentAgain) {
  BW_REQUIRE_ETCD();
  bw::testing::ScopedEnv delay("BW_DELAY_AFTER_STOPPED_MS", "700");
  taken_over_in_a_recovery("resent-count", "BW_KILL_AT_STATE=2:before");
}

// The README's demo, `breakwater train --elastic.control=etcd --elastic.standbys=1`
// (standby_launch.h): its own 3-member etcd, an active coordinator, a standby and the agents, as
// separate processes. The active one is killed by elastic.inject `kill` (kill_coordinator:...);
// the run ends bitwise where the failure-free run ends, each step recorded on that run's samples,
// with one `recovered` event of cause coordinator resuming at step `resume`, and nothing of etcd
// left. Returns what the terminal showed.
std::string train_with_a_standby(const std::string& name, const std::string& kill, int resume) {
  const std::string out = (fs::path(dir()) / name).string();
  std::vector<std::string> args = {"train"};
  for (const auto& a : bw::testing::tiny_train_args(
           corpus(), out, kSteps,
           {"--cluster.nodes=1", "--cluster.devices_per_node=2", "--pipeline.pipelines=[2]",
            "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0",
            "--checkpoint.dir=" + out + "/ckpt", "--elastic.control=etcd", "--elastic.standbys=1",
            "--elastic.inject=kill_coordinator:" + kill})) {
    if (a != "--quiet") args.push_back(a);  // what the terminal shows is checked too
  }
  const auto got = bw::testing::run_cli(args, out + ".log", kDeadlineS, [](pid_t) {});
  EXPECT_EQ(got.status, 0) << got.output;
  bw::testing::expect_bitwise_equal(runtime::checkpoint_dir(out + "/ckpt", kSteps),
                                    runtime::checkpoint_dir(reference() + "/ckpt", kSteps));
  const auto want = step_samples(reference());
  const auto steps = samples_by_step({out + "/coordinator-0", out + "/coordinator-1"});
  EXPECT_GE(steps.size() + 1, want.size());  // the killed step's line may be in neither file
  for (const auto& [step, digest] : steps) {
    EXPECT_LT(step, static_cast<int>(want.size()));
    if (step < static_cast<int>(want.size())) EXPECT_EQ(digest, want[step]) << "step " << step;
  }
  EXPECT_TRUE(recovered_events(out + "/coordinator-0").empty());
  const auto events = recovered_events(out + "/coordinator-1");
  EXPECT_EQ(events.size(), 1u) << got.output;
  if (events.size() == 1) {
    EXPECT_EQ(events[0]["cause"], "coordinator");
    EXPECT_EQ(events[0]["step"], resume);
    EXPECT_GE(events[0]["campaign_ms"].get<double>(), 0.0);
  }
  EXPECT_NE(got.output.find("took the run over from its coordinator"), std::string::npos)
      << got.output;
  // Its etcd's data folder, named on the terminal, is gone with the run.
  const auto at = got.output.find("data in ");
  EXPECT_NE(at, std::string::npos) << got.output;
  if (at != std::string::npos) {
    const auto data = got.output.substr(at + 8, got.output.find(')', at) - at - 8);
    EXPECT_FALSE(fs::exists(data)) << data;
  }
  return got.output;
}

TEST(Takeover, TrainWithAStandbyWhoseCoordinatorIsKilledEndsWhereTheFailureFreeRunEnds) {
  BW_REQUIRE_ETCD();
  train_with_a_standby("train-standby", "step=3", 4);  // step 3's commit stood
}

// Killed after the last step's commit was durable, before any worker read it: the standby
// publishes it again and the run ends.
TEST(Takeover, KilledAfterTheLastStepWasDecidedTheStandbyEndsTheRun) {
  BW_REQUIRE_ETCD();
  const auto output =
      train_with_a_standby("train-standby-last", fmt::format("step={}", kSteps - 1), kSteps);
  EXPECT_NE(output.find("every step was committed before this coordinator"), std::string::npos)
      << output;
}

// Killed once every worker had reported the end of the run to its store (final checkpoint
// committed, checksums sent), before it published the end: those reports are gone with its store.
// The workers, waiting for the end, see the store go, report their stop to the standby's, which
// forms a generation after the last step; that saves the final checkpoint again (the same bits)
// and ends the run.
TEST(Takeover, KilledWhileTheRunEndedTheStandbyEndsIt) {
  BW_REQUIRE_ETCD();
  train_with_a_standby("train-standby-end", "phase=end", kSteps);
}

// Killed in the middle of a checkpoint's commit (BW_KILL_AT_COMMIT: its manifest written and
// fsynced, not yet renamed into place): the run ends where the failure-free run ends, that
// checkpoint is complete and valid or absent (never a partial one that loads), and the next one is
// committed by the standby.
TEST(Takeover, KilledWhileItCommittedACheckpointTheNextOneIsCommittedAndNoneIsPartial) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "ckpt-commit");
  const auto t = takeover("ckpt-commit", cluster, kSteps, {}, [](pid_t, pid_t) {},
                          "BW_KILL_AT_COMMIT=during:4", 1, {"--train.checkpoint_every=2"});
  EXPECT_EQ(t.active, 128 + SIGKILL) << logs(t);
  expect_taken_over_like_reference(t, *store);
  const auto root = t.base + "/ckpt";
  for (int steps : {2, 4, 6}) {
    const auto at = runtime::checkpoint_dir(root, steps);
    if (steps == 4 && !fs::exists(fs::path(at) / "checkpoint.json")) continue;  // not committed
    ASSERT_TRUE(fs::exists(fs::path(at) / "checkpoint.json")) << at << logs(t);
    const auto info = runtime::read_checkpoint_info(at);
    EXPECT_EQ(info.step, steps) << at;
    EXPECT_NO_THROW(runtime::load_checkpoint(at)) << at;
  }
}

// A standby that starts while the leader stages a checkpoint in their shared checkpoint.dir
// leaves it alone: it is the leader's checkpoint in progress, not a leftover of an interrupted run
// (a standby that removed it failed that checkpoint's commit, "shard ... is missing but was
// reported durable"). The partial checkpoint of a run that ended is still removed by the next
// coordinator that leads.
TEST(Takeover, AStandbyLeavesTheLeadersCheckpointInProgressAlone) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  const std::string name = "standby-staging";
  const auto base = (fs::path(dir()) / name).string();
  fs::create_directories(base);
  bw::testing::ScopedEnv token("BW_RUN_TOKEN", "leadership-test");
  const auto root = base + "/ckpt";
  auto left = [&](int steps) {  // a staging directory with one shard file
    const fs::path staging = runtime::staging_dir(runtime::checkpoint_dir(root, steps));
    fs::create_directories(staging);
    std::ofstream((staging / "shard-0.model.safetensors").string()) << "bytes";
    return staging / "shard-0.model.safetensors";
  };
  const auto leftover = left(1);  // before any coordinator: an interrupted run's
  auto active = spawn_coordinator(base, cluster, name, kSteps, {}, 1, {}, "active", "", "");
  wait_for_a_leader(cluster, name);
  const auto in_progress = left(2);  // the leader's, while it leads
  auto standby =
      spawn_coordinator(base, cluster, name, kSteps, {}, 1, {}, "standby", "--standby", "");
  const auto until = ControlClock::now() + 60s;
  while (ControlClock::now() < until && !standby.poll() &&
         read_or_empty(base + "/standby.log").find("standing by") == std::string::npos) {
    std::this_thread::sleep_for(20ms);
  }
  const auto standby_log = read_or_empty(base + "/standby.log");
  standby.kill();
  active.kill();
  ASSERT_NE(standby_log.find("standing by"), std::string::npos) << standby_log;
  EXPECT_FALSE(fs::exists(leftover)) << "the leader removes an interrupted run's leftovers";
  EXPECT_TRUE(fs::exists(in_progress)) << "the standby removed the leader's checkpoint in progress";
}

// A worker killed during a takeover: the active coordinator killed right after step 3's commit
// (elastic.inject kill_coordinator), and node 1's worker killed while the standby's generation
// forms (phase reconfigure of the generation starting at step 4). The standby takes the node out
// and re-plans on node 0 alone; the run ends bitwise where one coordinator's run that lost node 1's
// worker in step 4 ends (the same plans for the same steps), each step committed once, with one
// `recovered` event: the takeover's, naming node 1.
TEST(Takeover, AWorkerKilledWhileTheStandbyTakesOverIsRecoveredToo) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "worker-in-takeover");
  const auto ref = takeover("worker-in-takeover-ref", cluster, kSteps, {}, [](pid_t, pid_t) {}, "",
                            2, {"--elastic.inject=kill:node=1:step=4"});
  ASSERT_EQ(ref.active, 0) << logs(ref);
  std::vector<std::string> want;
  for (const auto& [step, digest] : samples_by_step(ref)) want.push_back(digest);
  auto t =
      takeover("worker-in-takeover", cluster, kSteps, {}, [](pid_t, pid_t) {}, "", 2,
               {"--elastic.inject=kill_coordinator:step=3,kill:node=1:step=4:phase=reconfigure"});
  EXPECT_EQ(t.active, 128 + SIGKILL) << logs(t);
  expect_taken_over_like_reference(t, *store, ref.base + "/ckpt", want);
  // One recovery, timed from the coordinator's death: the takeover, with node 1 lost during it.
  const auto events = recovered_events(t);
  ASSERT_EQ(events.size(), 1u) << logs(t);
  EXPECT_EQ(events[0]["nodes"], nlohmann::json::array({1}));
  EXPECT_EQ(events[0]["step"], 4);
}

// Killed during a state transfer: three nodes on pipelines [1, 2]; node 1's worker is killed in
// step 3, so the generation from step 3 runs [1, 1] and node 2's worker receives the layers it
// lacks from node 0's. In the middle of that transfer (everything posted) node 2's worker marks
// the fault and the coordinator kills itself (elastic.inject kill_coordinator:...:phase=
// state_transfer). The standby aborts that generation's first step and forms it again; the run
// ends bitwise where one coordinator's run with the same worker fault ends, each step committed
// once, with one recovery of cause coordinator (node 1's loss is the old coordinator's event).
TEST(Takeover, KilledDuringAStateTransferTheStandbyFormsTheGenerationAgain) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "transfer");
  const auto ref = takeover("transfer-ref", cluster, kSteps, {}, [](pid_t, pid_t) {}, "", 3,
                            {"--elastic.inject=kill:node=1:step=3"});
  ASSERT_EQ(ref.active, 0) << logs(ref);
  std::vector<std::string> want;
  for (const auto& [step, digest] : samples_by_step(ref)) want.push_back(digest);
  const auto t = takeover(
      "transfer", cluster, kSteps, {}, [](pid_t, pid_t) {}, "", 3,
      {"--elastic.inject=kill:node=1:step=3,kill_coordinator:node=2:step=3:phase=state_transfer"});
  EXPECT_EQ(t.active, 128 + SIGKILL) << logs(t);
  EXPECT_NE(t.active_log.find("during a state transfer"), std::string::npos) << logs(t);
  expect_taken_over_like_reference(t, *store, ref.base + "/ckpt", want);
  const auto events = recovered_events(t);
  ASSERT_EQ(events.size(), 1u) << logs(t);
  EXPECT_EQ(events[0]["step"], 3);
  // Node 1's loss is the old coordinator's event; generation 1's run state already had it out.
  std::ifstream in(fs::path(t.base) / "active" / "metrics.jsonl");
  bool lost = false;
  for (std::string line; std::getline(in, line);) {
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    lost = lost || (doc.is_object() && doc.value("event", "") == "node_lost" &&
                    doc["nodes"] == nlohmann::json::array({1}));
  }
  EXPECT_TRUE(lost) << logs(t);
}

TEST(Takeover, AStandbyKilledChangesNothing) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  auto store = client(cluster, "standby-killed");
  std::string failure;
  const auto t = takeover("standby-killed", cluster, kSteps, {}, [&](pid_t, pid_t standby) {
    if (!wait_for_decision(*store, 2)) failure = "no decision 2 within 90 s";
    ::kill(standby, SIGKILL);
  });
  ASSERT_TRUE(failure.empty()) << failure << logs(t);
  EXPECT_EQ(t.active, 0) << logs(t);
  EXPECT_EQ(t.agent, 0) << logs(t);
  bw::testing::expect_bitwise_equal(runtime::checkpoint_dir(t.base + "/ckpt", kSteps),
                                    runtime::checkpoint_dir(reference() + "/ckpt", kSteps));
  const auto got = samples_by_step(t);
  EXPECT_EQ(got.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(recovered_events(t).empty());
}

// --- Bad input

void expect_refused(const std::vector<std::string>& control, const std::string& needle) {
  std::vector<std::string> args = {"coordinator", "--listen", "127.0.0.1:0", "--wait-s", "5"};
  args.insert(args.end(), control.begin(), control.end());
  for (const auto& a :
       bw::testing::tiny_train_args(corpus(), dir() + "/refused", 2,
                                    {"--cluster.nodes=1", "--cluster.devices_per_node=2",
                                     "--pipeline.pipelines=[2]", "--pipeline.fault_tolerance=0"})) {
    args.push_back(a);
  }
  bw::testing::ScopedEnv token("BW_RUN_TOKEN", "leadership-test");
  const auto r = bw::testing::run_cli(args, dir() + "/refused.log", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST(FencedRun, BadControlInputIsOneErrorExit2) {
  expect_refused({"--control", "etcd://no-port-here"}, "etcd://no-port-here");
  expect_refused({"--control", "etcd://127.0.0.1:2379"}, "--run-id");
  expect_refused({"--run-id", "r"}, "--control etcd://");
  expect_refused({"--standby"}, "--control etcd://");
  const int port = etcd_test::free_port();  // nothing listens there
  expect_refused({"--control", fmt::format("etcd://127.0.0.1:{}", port), "--run-id", "r"},
                 fmt::format("127.0.0.1:{}", port));
}

TEST(FencedRun, BadAgentControlInputIsOneErrorExit2) {
  auto refused = [](const std::vector<std::string>& args, const std::string& needle) {
    std::vector<std::string> all = {"agent", "--wait-s", "5"};
    all.insert(all.end(), args.begin(), args.end());
    const auto r = bw::testing::run_cli(all, dir() + "/agent-refused.log", 60);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  refused({"--control", "etcd://127.0.0.1:2379"}, "--run-id");
  refused({"--control", "embedded", "--run-id", "r"}, "only an etcd control store");
  refused(
      {"--control", "etcd://127.0.0.1:2379", "--run-id", "r", "--coordinator", "127.0.0.1:29500"},
      "two ways");
  refused({"--control", "etcd://no-port-here", "--run-id", "r"}, "etcd://no-port-here");
}

TEST(FencedRun, ARunIdLedByALiveCoordinatorWithAnotherConfigIsRefused) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, dir());
  Leadership holder(client(cluster, "taken"),
                    {.key = keys::leader(), .record = record("another"), .ttl_s = 10},
                    deadline_in(10s));
  expect_refused({"--control", cluster.url(), "--run-id", "taken"}, "another config");
}

}  // namespace
}  // namespace bw::elastic
