// Multi-host runs on real sockets (docs/multihost.md): hosts are network namespaces joined by
// veth pairs to a bridge (netns_hosts.h), the coordinator in one, an agent in each of four
// others, talking over their own addresses. Each case is compared with the failure-free run of
// the same config on one host (`breakwater train`, loopback): the same samples at every step,
// the same losses, and final parameters and AdamW state within the transparency tolerance of
// recovery_test.cc. Cases: a 4-host run with f = 1; a host whose link is cut mid-run (detected by
// heartbeats, recovered with nothing lost, and re-joined once the link is back); agents with a
// wrong or no run token (refused, exit status 2), the wait for missing agents (a deadline and a
// message naming them), the store listening only on the address it was given, and hosts whose
// corpus or model.init_from folder is missing or differs (refused at registration).
//
// The cases skip (GTEST_SKIP, with the reason) where namespaces cannot be made: not root, no
// `ip netns`. Store hosting on loopback only is checked without namespaces.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "../runtime/cli_runner.h"
#include "../same_training.h"
#include "core/error.h"
#include "elastic/local_etcd.h"
#include "elastic/store_host.h"
#include "model/config.h"
#include "netns_hosts.h"
#include "runtime/checkpointing.h"
#include "runtime/hf.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;
using testing::NetnsHosts;
using testing::NsProcess;
using testing::read_text;

constexpr double kDeadlineS = 90;
constexpr double kLr = 1e-2;  // every run here keeps it to the end: tests/same_training.h
constexpr int kPort = 29500;  // each namespace has its own ports
const char* kToken = "multihost-test-token";

std::string dir() {
  static const std::string d = testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_multihost_{}", getpid())).string());
  return d;
}

std::string corpus() {
  static const std::string p = [] {
    auto path = (fs::path(dir()) / "corpus.txt").string();
    std::ofstream out(path);
    std::mt19937 rng(7);
    for (int i = 0; i < 30000; ++i) out << static_cast<char>('a' + rng() % 26);
    return path;
  }();
  return p;
}

// Where every run's out_dir lies. Each agent sees an empty private directory of its own there (a
// tmpfs in its own mount namespace, shared by its workers), so no host shares the coordinator's
// out_dir or a checkpoint to resume from: a worker that wrote a shard under train.out_dir, or
// read train.resume from its path, would fail the run. The corpus lies outside, on "every host".
std::string runs() {
  static const std::string d = [] {
    auto p = (fs::path(dir()) / "runs").string();
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The shell line that gives a process its private runs() (argument $0) before it execs "$@";
// `setup` runs in between (e.g. a bind mount over the corpus).
std::string private_line(const std::string& setup = "") {
  return "mount -t tmpfs bw-private \"$0\" && cd \"$0\" && " +
         (setup.empty() ? std::string() : setup + " && ") + "exec \"$@\"";
}
std::vector<std::string> with_private_dir(const std::vector<std::string>& command,
                                          const std::string& setup = "") {
  std::vector<std::string> out = {"unshare", "-m", "sh", "-c", private_line(setup), runs()};
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

std::vector<std::string> config_args(int nodes, int steps, const std::string& out_dir,
                                     const std::string& model = "tiny") {
  return {fmt::format("--cluster.nodes={}", nodes),
          "--model.name=" + model,
          "--data.path=" + corpus(),
          fmt::format("--train.steps={}", steps),
          "--train.warmup_steps=2",
          "--train.lr=1e-2",
          "--train.min_lr=1e-2",
          "--train.sample_tokens=0",
          "--pipeline.microbatches=4",
          "--pipeline.microbatch_size=2",
          "--elastic.heartbeat_timeout_s=1.5",
          "--elastic.step_timeout_s=60",
          "--checkpoint.every_s=0",  // checkpoints only where a test asks
          "--train.out_dir=" + out_dir};
}

struct Metrics {
  std::vector<nlohmann::json> steps, events;
};

Metrics read_metrics(const std::string& out_dir) {
  Metrics m;
  std::ifstream in(fs::path(out_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto doc = nlohmann::json::parse(line);
      (doc.contains("event") ? m.events : m.steps).push_back(std::move(doc));
    } catch (const std::exception&) {
      // a line being written
    }
  }
  return m;
}

// The failure-free run on this host (loopback). CTest runs each case in its own process, so
// references are shared on disk by every process of this binary build (under a lock).
const std::string& reference(int nodes, int steps, const std::string& model = "tiny") {
  static std::map<std::tuple<int, int, std::string>, std::string> done;
  auto& out = done[{nodes, steps, model}];
  if (!out.empty()) return out;
  out = testing::shared_run(
      "bw_multihost_refs", BW_BINARY, fmt::format("reference_{}_{}_{}", nodes, steps, model),
      [&](const std::string& out_dir) {
        std::vector<std::string> args = {"train", "--quiet"};
        for (auto& a : config_args(nodes, steps, out_dir, model)) args.push_back(a);
        const auto r = testing::run_cli(args, out_dir + ".log", kDeadlineS);
        EXPECT_EQ(r.status, 0) << r.output;
        return r.status == 0;
      });
  return out;
}

// `got_dir`'s run (which may have resumed at `first_step`) against the failure-free run in
// `want_dir`: the same samples and losses at every step it ran, and the final state.
void expect_same_run(const std::string& got_dir, const std::string& want_dir, int steps,
                     int first_step = 0, const std::string& got_checkpoint = "") {
  const auto got = read_metrics(got_dir), want = read_metrics(want_dir);
  ASSERT_EQ(got.steps.size(), want.steps.size() - first_step);
  const auto tol = bw::testing::fp32_same_training(steps, kLr);
  for (size_t i = 0; i < got.steps.size(); ++i) {
    const auto& w = want.steps[i + first_step];
    EXPECT_EQ(got.steps[i].at("step"), w.at("step"));
    EXPECT_EQ(got.steps[i].at("samples"), w.at("samples")) << "step " << i + first_step;
    const double lw = w.at("loss"), lg = got.steps[i].at("loss");
    EXPECT_NEAR(lg, lw, tol.loss_rel * std::abs(lw)) << "step " << i + first_step;
  }
  const auto a = runtime::load_checkpoint(
      got_checkpoint.empty() ? runtime::checkpoint_dir(got_dir, steps) : got_checkpoint);
  const auto b = runtime::load_checkpoint(runtime::checkpoint_dir(want_dir, steps));
  for (const auto* maps : {&b.weights, &b.optimizer}) {
    const auto& other = maps == &b.weights ? a.weights : a.optimizer;
    const auto cmp = bw::testing::compare_state(other, *maps, tol);
    EXPECT_TRUE(cmp.ok()) << cmp.first;
  }
}

// A coordinator in host 0 and agents in hosts 1..n.
struct Cluster {
  NetnsHosts hosts;
  std::string out_dir;
  std::unique_ptr<NsProcess> coordinator;
  std::vector<std::unique_ptr<NsProcess>> agents;

  Cluster(int agents_n, const std::string& name) : hosts(agents_n + 1) {
    out_dir = (fs::path(runs()) / name).string();
  }
  std::string listen() const { return fmt::format("{}:{}", hosts.address(0), kPort); }
  std::string log(const std::string& who) const { return out_dir + "." + who + ".log"; }
  void start_coordinator(int nodes, int steps, std::vector<std::string> extra = {}, int wait_s = 60,
                         const std::string& model = "tiny") {
    std::vector<std::string> args = {BW_BINARY,  "coordinator", "--quiet",  "--log-level=info",
                                     "--listen", listen(),      "--wait-s", std::to_string(wait_s)};
    for (auto& a : config_args(nodes, steps, out_dir, model)) args.push_back(a);
    for (auto& a : extra) args.push_back(a);
    coordinator = std::make_unique<NsProcess>(
        hosts.host(0), args, log("coordinator"),
        std::vector<std::pair<std::string, std::string>>{{"BW_RUN_TOKEN", kToken}});
  }
  // An agent (and its workers) with a private runs() directory; `setup` as for private_line.
  NsProcess& start_agent(int host, const std::string& token, bool with_token = true,
                         const std::string& setup = "") {
    // The workers' info lines too (they log at BW_LOG_LEVEL).
    std::vector<std::pair<std::string, std::string>> env = {{"BW_LOG_LEVEL", "info"}};
    if (with_token) env.emplace_back("BW_RUN_TOKEN", token);
    agents.push_back(std::make_unique<NsProcess>(
        hosts.host(host),
        with_private_dir({BW_BINARY, "agent", "--coordinator", listen(), "--node-name",
                          fmt::format("host{}", host), "--wait-s", "30", "--log-level=info"},
                         setup),
        log(fmt::format("agent{}", agents.size())), env));
    return *agents.back();
  }
  std::string logs() const {
    std::string out = "--- coordinator\n" + read_text(log("coordinator"));
    for (size_t i = 0; i < agents.size(); ++i) {
      out += fmt::format("--- agent {}\n{}", i, read_text(log(fmt::format("agent{}", i))));
    }
    return out;
  }
};

#define SKIP_WITHOUT_NETNS()                                                       \
  do {                                                                             \
    if (auto why = NetnsHosts::unavailable()) GTEST_SKIP() << "skipped: " << *why; \
  } while (0)

// Listening sockets on `port` from /proc/net/tcp{,6} (kernel tables, not our own sockets):
// their local addresses as the kernel prints them (hex).
std::vector<std::string> kernel_listeners(int port) {
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::string slot, local, remote, state;
      ss >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (state == "0A" && std::stoi(local.substr(colon + 1), nullptr, 16) == port) {
        out.push_back(local.substr(0, colon));
      }
    }
  }
  return out;
}

TEST(StoreHost, LocalStoreListensOnLoopbackOnly) {
  auto store = host_store("127.0.0.1", 0, std::chrono::seconds(5));
  const auto listeners = kernel_listeners(store->getPort());
  ASSERT_FALSE(listeners.empty());
  for (const auto& l : listeners) {
    // 127.0.0.1 in /proc/net/tcp, or its v4-mapped form in tcp6.
    EXPECT_TRUE(l == "0100007F" || l == "0000000000000000FFFF00000100007F")
        << "the store also listens on " << l;
  }
  store->set("k", std::vector<uint8_t>{1, 2});
  EXPECT_EQ(store->get("k"), (std::vector<uint8_t>{1, 2}));
}

TEST(StoreHost, AnAddressOfAnotherHostIsRefused) {
  // 192.0.2.1 (TEST-NET-1) is not an address of this host.
  try {
    host_store("192.0.2.1", 0, std::chrono::seconds(2));
    FAIL() << "hosting on a foreign address succeeded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot host the store on 192.0.2.1"), std::string::npos)
        << e.what();
  }
}

TEST(Multihost, FourHostsMatchTheOneHostRun) {
  SKIP_WITHOUT_NETNS();
  const int steps = 6;
  const auto& want = reference(4, steps);
  Cluster c(4, "four_hosts");
  ASSERT_TRUE(c.hosts.ok());
  c.start_coordinator(4, steps);
  for (int h = 1; h <= 4; ++h) c.start_agent(h, kToken);
  ASSERT_EQ(c.coordinator->wait(kDeadlineS), 0) << c.logs();
  for (auto& a : c.agents) EXPECT_EQ(a->wait(20), 0) << c.logs();
  // Every node registered from its own namespace address, and Gloo used it.
  const auto log = read_text(c.log("coordinator"));
  for (int h = 1; h <= 4; ++h) {
    EXPECT_NE(log.find(fmt::format("'host{}' ({})", h, c.hosts.address(h))), std::string::npos)
        << log;
  }
  expect_same_run(c.out_dir, want, steps);
}

TEST(Multihost, ACutLinkIsDetectedRecoveredAndTheHostRejoins) {
  SKIP_WITHOUT_NETNS();
  // Steps are ~20 ms: the run is long enough for the host to come back whatever the machine's
  // speed, and is stopped (Ctrl-C: a checkpoint at the next step boundary) once it has re-joined;
  // the reference is then the failure-free run of exactly the committed steps (the learning rate
  // is constant after warm-up, so it does not depend on train.steps).
  const int max_steps = 3000;
  Cluster c(4, "cut_link");
  ASSERT_TRUE(c.hosts.ok());
  const char* env_model = std::getenv("BW_TEST_MODEL");
  const std::string model = env_model ? env_model : "small";
  c.start_coordinator(4, max_steps, {}, 60, model);
  for (int h = 1; h <= 4; ++h) c.start_agent(h, kToken);
  const int cut = 3;  // host3 = node 2 (nodes are numbered in the order of their names)
  auto wait_for = [&](auto pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < end) {
      if (pred(read_metrics(c.out_dir))) return true;
      if (c.coordinator->poll()) return pred(read_metrics(c.out_dir));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto has = [](const Metrics& m, const std::string& kind, const std::string& cause = "") {
    for (const auto& e : m.events) {
      if (e.at("event") == kind && (cause.empty() || e.at("cause") == cause)) return true;
    }
    return false;
  };
  ASSERT_TRUE(wait_for([](const Metrics& m) { return m.steps.size() >= 5; }, 60)) << c.logs();
  ASSERT_TRUE(c.hosts.set_link(cut, false));
  const auto t_cut = std::chrono::steady_clock::now();
  const bool lost = wait_for([&](const Metrics& m) { return has(m, "node_lost"); }, 30);
  const double detect_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_cut).count();
  ASSERT_TRUE(lost) << c.logs();
  ASSERT_TRUE(wait_for([&](const Metrics& m) { return has(m, "recovered", "node_lost"); }, 30))
      << c.logs();
  ASSERT_TRUE(c.hosts.set_link(cut, true));
  const auto t_back = std::chrono::steady_clock::now();
  const bool joined =
      wait_for([&](const Metrics& m) { return has(m, "recovered", "node_joined"); }, 60);
  const double join_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_back).count();
  ::kill(c.coordinator->pid(), SIGINT);
  ASSERT_TRUE(joined) << c.logs();
  fmt::print(
      "cut link detected after {:.2f} s (heartbeat timeout 1.5 s); re-joined {:.2f} s "
      "after the link came back\n",
      detect_s, join_s);
  ASSERT_EQ(c.coordinator->wait(kDeadlineS), 130) << c.logs();
  for (auto& a : c.agents) EXPECT_GE(a->wait(20), 0) << c.logs();
  const auto got = read_metrics(c.out_dir);
  std::vector<std::string> kinds;
  for (const auto& e : got.events) {
    kinds.push_back(fmt::format("{}/{}/{}", e.at("event").get<std::string>(),
                                e.at("node").get<int>(), e.at("cause").get<std::string>()));
  }
  const auto all = fmt::format("{}", fmt::join(kinds, " "));
  // Detected by the heartbeats (not the step timeout), recovered, and the same node re-joined.
  ASSERT_FALSE(got.events.empty());
  EXPECT_EQ(got.events.front().at("event"), "node_lost") << all;
  EXPECT_EQ(got.events.front().at("node"), 2) << all;
  EXPECT_NE(got.events.front().at("cause").get<std::string>().find("heartbeat"), std::string::npos)
      << all;
  EXPECT_NE(all.find("recovered/2/node_lost"), std::string::npos) << all;
  EXPECT_NE(all.find("recovered/2/node_joined"), std::string::npos) << all;
  const int steps = static_cast<int>(got.steps.size());
  ASSERT_LT(steps, max_steps);
  EXPECT_EQ(got.steps.back().at("world"), 4) << "the re-joined node is not in the plan";
  expect_same_run(c.out_dir, reference(4, steps, model), steps);
}

// The coordinator's host cut off (docs/elastic.md "Takeover"): etcd's 3 members on host 0, the
// active coordinator on host 1, a standby on host 2, agents on hosts 3 and 4 following the
// leadership (--control). Host 1's link is cut mid-run, as a pulled cable: no reset reaches
// anyone, so there is no evidence of death; the active coordinator cannot renew its lease, the
// standby takes over when it expires (the lease path), the agents and workers cut their hung
// connections to host 1's store and follow the new one, and the run ends as the failure-free run
// on one host ends. The cut-off coordinator, which cannot reach etcd, exits 3 after its leaderless
// timeout. With `own_disks`, checkpoint.dir is each agent host's own disk ("hosts" mode, a
// checkpoint every 100 steps): the agents publish the checkpoints the standby commits, read from
// its store, and the final one, gathered from the hosts, is the failure-free run's.
std::string gather_checkpoint(const std::string& manifest_dir,
                              const std::vector<std::string>& host_dirs, const std::string& out);

void cut_coordinator(const std::string& name, bool own_disks) {
  const auto etcd_exe = find_etcd();
  if (!etcd_exe) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << "etcd is not installed (CI=true)";
    GTEST_SKIP() << "etcd not installed (apt-get install etcd-server)";
  }
  const int steps = 600;  // ~20 ms a step: long enough for a lease to expire mid-run
  NetnsHosts hosts(5);
  ASSERT_TRUE(hosts.ok());
  const std::string base = (fs::path(runs()) / name).string();
  // "hosts" mode: the same checkpoint.dir path on every host, each agent's its own directory.
  const auto disk = (fs::path(runs()) / (name + "_disk")).string();
  const auto disks = fs::path(dir()) / (name + "_host_disks");
  auto host_disk = [&](int h) { return (disks / fmt::format("host{}", h)).string(); };
  auto mount_disk = [&](int h) {
    return own_disks
               ? fmt::format("mkdir -p '{}' && mount --bind '{}' '{}'", disk, host_disk(h), disk)
               : std::string();
  };
  for (int h : {3, 4}) fs::create_directories(host_disk(h));
  fs::create_directories(base);
  auto log = [&](const std::string& who) { return base + "." + who + ".log"; };
  // etcd: three members on host 0, on its address (data on tmpfs where there is one).
  const std::string tmp = fs::is_directory("/dev/shm") ? "/dev/shm" : base;
  const std::string data = fmt::format("{}/bw-netns-etcd-{}", tmp, getpid());
  std::string initial, endpoints;
  for (int i = 0; i < 3; ++i) {
    initial += fmt::format("{}m{}=http://{}:{}", i ? "," : "", i, hosts.address(0), 2380 + 2 * i);
    endpoints += fmt::format("{}{}:{}", i ? "," : "", hosts.address(0), 2379 + 2 * i);
  }
  std::vector<std::unique_ptr<NsProcess>> etcd;
  for (int i = 0; i < 3; ++i) {
    const std::string client = fmt::format("http://{}:{}", hosts.address(0), 2379 + 2 * i);
    const std::string peer = fmt::format("http://{}:{}", hosts.address(0), 2380 + 2 * i);
    etcd.push_back(std::make_unique<NsProcess>(
        hosts.host(0),
        etcd_member_args(*etcd_exe, fmt::format("m{}", i), fmt::format("{}/m{}", data, i), client,
                         peer, initial, fmt::format("bw-netns-{}", getpid())),
        log(fmt::format("etcd{}", i))));
  }
  struct RemoveData {
    std::string dir;
    ~RemoveData() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_data{data};
  bool healthy = false;
  for (int i = 0; i < 300 && !healthy; ++i) {
    healthy = testing::shell(fmt::format("ip netns exec {} etcdctl --endpoints={} "
                                         "--command-timeout=2s endpoint health",
                                         hosts.host(0), endpoints)) == 0;
    if (!healthy) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(healthy) << read_text(log("etcd0"));
  const std::string control = "etcd://" + endpoints;
  std::vector<std::pair<std::string, std::string>> env = {{"BW_RUN_TOKEN", kToken},
                                                          {"BW_LOG_LEVEL", "info"}};
  auto coordinator = [&](int host, const std::string& who, bool standby) {
    std::vector<std::string> args = {BW_BINARY,
                                     "coordinator",
                                     "--quiet",
                                     "--log-level=info",
                                     "--listen",
                                     fmt::format("{}:{}", hosts.address(host), kPort),
                                     "--control",
                                     control,
                                     "--run-id",
                                     "cut",
                                     "--lease-ttl-s",
                                     "2",
                                     "--leaderless-timeout-s",
                                     "5",
                                     "--wait-s",
                                     "60"};
    if (standby) args.push_back("--standby");
    for (auto& a : config_args(2, steps, base + "/" + who)) args.push_back(a);
    if (own_disks) {
      args.push_back("--checkpoint.dir=" + disk);
      args.push_back("--train.checkpoint_every=100");
    }
    return std::make_unique<NsProcess>(hosts.host(host), args, log(who), env);
  };
  auto active = coordinator(1, "active", false);
  std::vector<std::unique_ptr<NsProcess>> agents;
  for (int h : {3, 4}) {
    agents.push_back(std::make_unique<NsProcess>(
        hosts.host(h),
        with_private_dir({BW_BINARY, "agent", "--control", control, "--run-id", "cut",
                          "--node-name", fmt::format("host{}", h), "--wait-s", "30",
                          "--leaderless-timeout-s", "30", "--log-level=info"},
                         mount_disk(h)),
        log(fmt::format("agent{}", h)), env));
  }
  auto logs = [&] {
    std::string out;
    for (const char* who : {"active", "standby", "agent3", "agent4"}) {
      out += fmt::format("--- {}\n{}", who, read_text(log(who)));
    }
    return out;
  };
  auto wait_steps = [&](size_t n, double seconds) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < end) {
      if (read_metrics(base + "/active").steps.size() >= n) return true;
      if (active->poll()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  // The standby once the active one leads and trains (else the standby could lead first).
  ASSERT_TRUE(wait_steps(1, 60)) << logs();
  auto standby = coordinator(2, "standby", true);
  ASSERT_TRUE(wait_steps(40, 60)) << logs();
  ASSERT_TRUE(hosts.set_link(1, false));
  EXPECT_EQ(standby->wait(kDeadlineS), 0) << logs();
  for (auto& a : agents) EXPECT_EQ(a->wait(30), 0) << logs();
  // Cut off from etcd: it cannot lead, and says so (exit 3) after its leaderless timeout.
  EXPECT_EQ(active->wait(30), 3) << logs();
  const auto got = read_metrics(base + "/standby");
  ASSERT_FALSE(got.steps.empty()) << logs();
  int recovered = 0;
  for (const auto& e : got.events) {
    if (e.at("event") == "recovered") {
      ++recovered;
      EXPECT_EQ(e.at("cause"), "coordinator");
    }
  }
  EXPECT_EQ(recovered, 1) << logs();
  // The standby took over on the lease path: no evidence (the cut host's port never refused).
  EXPECT_EQ(read_text(log("standby")).find("revoked on evidence"), std::string::npos);
  const int first = got.steps.front().at("step");
  // Every step the cut-off coordinator recorded is on the failure-free run's samples too.
  const auto& want_dir = reference(2, steps);
  const auto want = read_metrics(want_dir);
  for (const auto& s : read_metrics(base + "/active").steps) {
    const int k = s.at("step");
    ASSERT_LT(k, static_cast<int>(want.steps.size()));
    EXPECT_EQ(s.at("samples"), want.steps[k].at("samples")) << "step " << k;
  }
  if (!own_disks) {
    expect_same_run(base + "/standby", want_dir, steps, first);
    return;
  }
  EXPECT_NE(read_text(log("active")).find("each host's own disk"), std::string::npos) << logs();
  // Each host published the final checkpoint, which only the standby committed.
  std::vector<std::string> finals;
  for (int h : {3, 4}) {
    finals.push_back(runtime::checkpoint_dir(host_disk(h), steps));
    EXPECT_TRUE(fs::exists(fs::path(finals.back()) / "checkpoint.json")) << finals.back() << logs();
  }
  const auto gathered = gather_checkpoint(runtime::checkpoint_dir(disk, steps), finals,
                                          (fs::path(dir()) / (name + "_final")).string());
  expect_same_run(base + "/standby", want_dir, steps, first, gathered);
}

TEST(Multihost, TheCoordinatorsHostCutOffTheStandbyOnAnotherHostTakesOver) {
  SKIP_WITHOUT_NETNS();
  cut_coordinator("cut_coordinator", false);
}

TEST(Multihost, TheCoordinatorsHostCutOffCheckpointsOnEachHostsDiskArePublishedAfterTheTakeover) {
  SKIP_WITHOUT_NETNS();
  cut_coordinator("cut_coordinator_own_disks", true);
}

TEST(Multihost, WrongOrMissingTokensAreRefusedAndMissingAgentsNamed) {
  SKIP_WITHOUT_NETNS();
  Cluster c(3, "tokens");
  ASSERT_TRUE(c.hosts.ok());
  c.start_coordinator(2, 2, {"--expect-names", "host1,host2"}, /*wait_s=*/3);
  auto& good = c.start_agent(1, kToken);
  auto& wrong = c.start_agent(2, "not-the-token");
  auto& none = c.start_agent(3, "", /*with_token=*/false);
  EXPECT_EQ(wrong.wait(30), 2) << c.logs();
  EXPECT_EQ(none.wait(30), 2) << c.logs();
  // While it waits, the store answers on its address and not on the host's loopback.
  const auto probe = [&](const std::string& addr) {
    return testing::shell(fmt::format("ip netns exec {} timeout 5 bash -c 'exec 3<>/dev/tcp/{}/{}'",
                                      c.hosts.host(0), addr, kPort));
  };
  EXPECT_EQ(probe(c.hosts.address(0)), 0) << "the store does not answer on its address";
  EXPECT_NE(probe("127.0.0.1"), 0) << "the store also listens on the loopback interface";
  EXPECT_EQ(c.coordinator->wait(30), 3) << c.logs();
  EXPECT_GE(good.wait(30), 0) << "the registered agent did not end with the run";
  const auto agent_log = read_text(c.log("agent1"));
  EXPECT_NE(agent_log.find("run token does not match"), std::string::npos) << agent_log;
  EXPECT_NE(read_text(c.log("agent2")).find("no run token"), std::string::npos) << c.logs();
  const auto log = read_text(c.log("coordinator"));
  EXPECT_NE(log.find("refused agent 'host2'"), std::string::npos) << log;
  EXPECT_NE(log.find("refused agent 'host3'"), std::string::npos) << log;
  EXPECT_NE(log.find("1 registered ('host1'"), std::string::npos) << log;
  EXPECT_NE(log.find("missing 1: host2"), std::string::npos) << log;
}

// Processes left in a namespace (`ip netns pids`).
std::vector<int> pids_in(const std::string& netns) {
  const auto out = (fs::path(dir()) / "pids.txt").string();
  fs::remove(out);
  testing::shell(fmt::format("ip netns pids {}", netns), out);
  std::istringstream in(read_text(out));
  std::vector<int> pids;
  for (int pid; in >> pid;) pids.push_back(pid);
  return pids;
}
int processes_in(const std::string& netns) { return static_cast<int>(pids_in(netns).size()); }

// `breakwater launch` with `ip netns exec` as its remote shell: the same hostfile handling, token
// hand-over and shutdown as over ssh, where the test needs no sshd (none is installed here).
// A remote shell for `launch --ssh`: `private-shell HOST CMD...` runs CMD in namespace HOST
// with a private runs() directory, as a host without a shared filesystem.
std::string private_shell() {
  static const std::string path = [] {
    const auto p = (fs::path(dir()) / "private-shell").string();
    std::ofstream out(p);
    out << "#!/bin/sh\nhost=$1; shift\nexec ip netns exec \"$host\" unshare -m sh -c '"
        << private_line() << "' '" << runs() << "' \"$@\"\n";
    out.close();
    fs::permissions(p, fs::perms::owner_all);
    return p;
  }();
  return path;
}

struct Launch {
  Cluster c;
  std::string hostfile;
  Launch(const std::string& name, int steps, const std::string& ssh = private_shell())
      : c(4, name) {
    hostfile = c.out_dir + ".hosts";
    std::ofstream out(hostfile);
    out << "# four test hosts\n";
    for (int h = 1; h <= 4; ++h) out << c.hosts.host(h) << " slots=1\n";
    out.close();
    std::vector<std::string> args = {
        BW_BINARY,  "launch", "--quiet", "--log-level=info", "--hostfile", hostfile,   "--listen",
        c.listen(), "--ssh",  ssh,       "--remote-binary",  BW_BINARY,    "--wait-s", "60"};
    for (auto& a : config_args(4, steps, c.out_dir)) args.push_back(a);
    c.coordinator = std::make_unique<NsProcess>(
        c.hosts.host(0), args, c.log("coordinator"),
        std::vector<std::pair<std::string, std::string>>{{"BW_RUN_TOKEN", kToken}});
  }
  bool agents_gone(double seconds) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < end) {
      int left = 0;
      for (int h = 1; h <= 4; ++h) left += processes_in(c.hosts.host(h));
      if (left == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
};

TEST(Launch, AHostfileRunMatchesTheOneHostRunAndLeavesNoProcess) {
  SKIP_WITHOUT_NETNS();
  const int steps = 6;
  const auto& want = reference(4, steps);
  Launch l("launch", steps);
  ASSERT_TRUE(l.c.hosts.ok());
  ASSERT_EQ(l.c.coordinator->wait(kDeadlineS), 0) << l.c.logs();
  EXPECT_TRUE(l.agents_gone(10)) << "agents outlived the launch";
  // The token went over the agents' standard input: it is in no file of the run.
  EXPECT_EQ(read_text(l.c.log("coordinator")).find(kToken), std::string::npos);
  EXPECT_EQ(read_text(l.c.out_dir + "/config.toml").find(kToken), std::string::npos);
  expect_same_run(l.c.out_dir, want, steps);
}

TEST(Launch, CtrlCStopsTheRunAndEveryAgent) {
  SKIP_WITHOUT_NETNS();
  Launch l("launch_interrupt", 3000);
  ASSERT_TRUE(l.c.hosts.ok());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_metrics(l.c.out_dir).steps.size() < 3 && !l.c.coordinator->poll() &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int running = 0;
  for (int h = 1; h <= 4; ++h) running += processes_in(l.c.hosts.host(h)) > 0;
  EXPECT_EQ(running, 4) << "not every host ran an agent";
  for (int h = 1; h <= 4; ++h) {
    for (int pid : pids_in(l.c.hosts.host(h))) {
      auto cmdline = read_text(fmt::format("/proc/{}/cmdline", pid));
      EXPECT_EQ(cmdline.find(kToken), std::string::npos) << "the run token is on a command line";
    }
  }
  ::kill(l.c.coordinator->pid(), SIGINT);
  EXPECT_EQ(l.c.coordinator->wait(kDeadlineS), 130) << l.c.logs();
  EXPECT_TRUE(l.agents_gone(15)) << "agents outlived the launcher" << l.c.logs();
  const int steps = static_cast<int>(read_metrics(l.c.out_dir).steps.size());
  EXPECT_LT(steps, 3000);
  // The stop checkpoint reached the launcher's out_dir from hosts that do not share it, whole.
  const auto ckpt = runtime::load_checkpoint(runtime::checkpoint_dir(l.c.out_dir, steps));
  EXPECT_EQ(ckpt.info.step, steps) << l.c.logs();
}

TEST(Launch, AKilledLauncherTakesEveryAgentWithIt) {
  SKIP_WITHOUT_NETNS();
  // As over ssh, the agent is not the launcher's child: `setsid -w` forks it off, so it does not
  // die with the launcher's child (which gets SIGTERM), only through its closed input.
  Launch l("launch_killed", 3000, "setsid -w " + private_shell());
  ASSERT_TRUE(l.c.hosts.ok());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_metrics(l.c.out_dir).steps.size() < 2 && !l.c.coordinator->poll() &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(l.c.coordinator->poll()) << l.c.logs();
  // No goodbye: the agents learn it from their standard input closing (the store is gone too,
  // and they would otherwise wait --wait-s for it to come back).
  ::kill(l.c.coordinator->pid(), SIGKILL);
  l.c.coordinator->wait(10);
  EXPECT_TRUE(l.agents_gone(15)) << "agents outlived a killed launcher" << l.c.logs();
}

// Checkpoints without a shared filesystem, and resuming both ways: a one-host run X (checkpoints
// at steps 3 and 6) is the failure-free reference. A 4-host run A, whose hosts each see only a
// private out_dir, must write the same checkpoints into the coordinator's out_dir; a one-host run
// resumed from A's step 3 and a 4-host run resumed from X's step 3 (a path no agent can see) must
// both end where X ends.
TEST(Checkpoints, NeedNoSharedFilesystemAndResumeBothWays) {
  SKIP_WITHOUT_NETNS();
  const int steps = 6;
  // (Detection is not under test here: a generous heartbeat timeout keeps a loaded machine's
  // slow start-ups from counting as losses.)
  const std::vector<std::string> every3 = {"--train.checkpoint_every=3",
                                           "--elastic.heartbeat_timeout_s=5"};
  auto one_host = [&](const std::string& name, std::vector<std::string> extra) {
    const auto out = (fs::path(runs()) / name).string();
    std::vector<std::string> args = {"train", "--quiet"};
    for (auto& a : config_args(4, steps, out)) args.push_back(a);
    for (auto& a : every3) args.push_back(a);
    for (auto& a : extra) args.push_back(a);
    const auto r = testing::run_cli(args, out + ".log", kDeadlineS);
    EXPECT_EQ(r.status, 0) << r.output;
    return out;
  };
  const auto x = one_host("ckpt_one_host", {});
  ASSERT_TRUE(fs::exists(runtime::checkpoint_dir(x, 3)));

  std::string a_out;
  {  // (one set of hosts at a time: they share the process's subnet)
    Cluster a(4, "ckpt_four_hosts");
    ASSERT_TRUE(a.hosts.ok());
    a_out = a.out_dir;
    a.start_coordinator(4, steps, every3);
    for (int h = 1; h <= 4; ++h) a.start_agent(h, kToken);
    ASSERT_EQ(a.coordinator->wait(kDeadlineS), 0) << a.logs();
    for (auto& p : a.agents) EXPECT_EQ(p->wait(20), 0) << a.logs();
  }
  expect_same_run(a_out, x, steps);
  const auto a3 = runtime::load_checkpoint(runtime::checkpoint_dir(a_out, 3));
  const auto x3 = runtime::load_checkpoint(runtime::checkpoint_dir(x, 3));
  EXPECT_EQ(a3.weights.size(), x3.weights.size());
  EXPECT_EQ(a3.optimizer.size(), x3.optimizer.size());

  // Multi-host checkpoint -> one host.
  const auto y =
      one_host("ckpt_resumed_one_host", {"--train.resume=" + runtime::checkpoint_dir(a_out, 3)});
  expect_same_run(y, x, steps, 3);

  // One-host checkpoint -> multi-host, from a path only the coordinator can read.
  Cluster b(4, "ckpt_resumed_four_hosts");
  ASSERT_TRUE(b.hosts.ok());
  auto resume_b = every3;
  resume_b.push_back("--train.resume=" + runtime::checkpoint_dir(x, 3));
  b.start_coordinator(4, steps, resume_b);
  for (int h = 1; h <= 4; ++h) b.start_agent(h, kToken);
  ASSERT_EQ(b.coordinator->wait(kDeadlineS), 0) << b.logs();
  for (auto& p : b.agents) EXPECT_EQ(p->wait(20), 0) << b.logs();
  expect_same_run(b.out_dir, x, steps, 3);
}

// A committed checkpoint whose shards are on several hosts' own disks, gathered as a user would
// (the manifest from `manifest_dir`, each shard file from whichever host directory holds it) into
// `out`, which then loads as one directory.
std::string gather_checkpoint(const std::string& manifest_dir,
                              const std::vector<std::string>& host_dirs, const std::string& out) {
  fs::remove_all(out);
  fs::create_directories(out);
  fs::copy_file(fs::path(manifest_dir) / "checkpoint.json", fs::path(out) / "checkpoint.json");
  for (const auto& d : host_dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const auto to = fs::path(out) / e.path().filename();
      if (!fs::exists(to)) fs::copy_file(e.path(), to);
    }
  }
  return out;
}

// checkpoint.dir on each host's own disk (no shared filesystem; docs/checkpoints.md "Each host's
// own disk"): a 3-host run on a [1,2] plan (checkpoint.replicas at its default, which is 1 there)
// writes every shard where its worker is and commits a manifest on the coordinator's disk, which
// holds no shard byte.
// Then host 1 is gone with its disk (the first copy of every layer), and a 2-host run resumed
// from the manifest on a [1,1] plan loads what each host holds and fetches the rest from the
// other over Gloo: it ends where the one-host failure-free run ends.
TEST(Checkpoints, OnEachHostsOwnDiskSurviveTheLossOfAHostAndItsDisk) {
  SKIP_WITHOUT_NETNS();
  const int steps = 6;
  const std::vector<std::string> common = {
      "--train.checkpoint_every=3", "--elastic.heartbeat_timeout_s=5", "--pipeline.schedule=1f1b"};
  const auto x_out = (fs::path(runs()) / "own_disk_reference").string();
  {
    std::vector<std::string> args = {"train", "--quiet"};
    for (auto& a : config_args(3, steps, x_out)) args.push_back(a);
    for (auto& a : common) args.push_back(a);
    args.push_back("--pipeline.pipelines=[1,2]");
    const auto r = testing::run_cli(args, x_out + ".log", kDeadlineS);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  // The same path on every host; each agent's is its own directory, bind-mounted there.
  const auto disk = (fs::path(runs()) / "own_disk").string();
  const auto disks = fs::path(dir()) / "host_disks";
  auto host_disk = [&](int h) { return (disks / fmt::format("host{}", h)).string(); };
  fs::remove_all(disk);
  fs::remove_all(disks);
  for (int h = 1; h <= 3; ++h) fs::create_directories(host_disk(h));
  auto mount_disk = [&](int h) {
    return fmt::format("mkdir -p '{}' && mount --bind '{}' '{}'", disk, host_disk(h), disk);
  };
  auto shard_files = [](const std::string& d) {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const auto name = e.path().filename().string();
      if (name.rfind("shard-", 0) == 0) out.insert(name);
    }
    return out;
  };
  std::string a_out;
  {
    Cluster a(3, "own_disk_three_hosts");
    ASSERT_TRUE(a.hosts.ok());
    a_out = a.out_dir;
    auto extra = common;
    // checkpoint.replicas is left at its default: one copy on another node here.
    extra.insert(extra.end(), {"--pipeline.pipelines=[1,2]", "--checkpoint.dir=" + disk});
    a.start_coordinator(3, steps, extra);
    for (int h = 1; h <= 3; ++h) a.start_agent(h, kToken, true, mount_disk(h));
    ASSERT_EQ(a.coordinator->wait(kDeadlineS), 0) << a.logs();
    for (auto& p : a.agents) EXPECT_EQ(p->wait(20), 0) << a.logs();
    EXPECT_NE(read_text(a.log("coordinator")).find("each host's own disk"), std::string::npos)
        << a.logs();
  }
  const auto a3 = runtime::checkpoint_dir(disk, 3);
  const auto info = runtime::read_checkpoint_info(a3);
  ASSERT_EQ(info.shards.size(), 3u);  // node 0 whole, then pipeline 1's two stages
  // The coordinator's disk holds the manifest only; each host published its own shards with it.
  EXPECT_TRUE(shard_files(a3).empty());
  for (int h = 1; h <= 3; ++h) {
    const auto here = runtime::checkpoint_dir(host_disk(h), 3);
    EXPECT_TRUE(fs::exists(fs::path(here) / "checkpoint.json")) << here;
    std::set<std::string> want;
    for (const auto& sh : info.shards) {
      if (sh.host == fmt::format("host{}", h)) want.insert({sh.model, sh.optimizer});
    }
    EXPECT_FALSE(want.empty()) << "host" << h;
    EXPECT_EQ(shard_files(here), want) << here;
  }
  {  // A's run matches the reference, step by step and in its final state.
    std::vector<std::string> finals;
    for (int h = 1; h <= 3; ++h) finals.push_back(runtime::checkpoint_dir(host_disk(h), steps));
    const auto got = gather_checkpoint(runtime::checkpoint_dir(disk, steps), finals,
                                       (fs::path(dir()) / "own_disk_a_final").string());
    expect_same_run(a_out, x_out, steps, 0, got);
  }
  // Host 1 and its disk are gone: it held the whole model, the manifest's first copy of every
  // layer.
  EXPECT_EQ(info.shards[0].host, "host1");
  fs::remove_all(host_disk(1));
  Cluster b(3, "own_disk_resumed");
  ASSERT_TRUE(b.hosts.ok());
  auto extra = common;
  extra.insert(extra.end(),
               {"--pipeline.pipelines=[1,1]", "--checkpoint.dir=" + disk, "--train.resume=" + a3});
  b.start_coordinator(2, steps, extra);
  for (int h = 2; h <= 3; ++h) b.start_agent(h, kToken, true, mount_disk(h));
  ASSERT_EQ(b.coordinator->wait(kDeadlineS), 0) << b.logs();
  for (auto& p : b.agents) EXPECT_EQ(p->wait(20), 0) << b.logs();
  // Each pipeline runs every layer and each host held half of them: both fetched.
  for (size_t i = 0; i < b.agents.size(); ++i) {
    EXPECT_NE(read_text(b.log(fmt::format("agent{}", i))).find("from peers"), std::string::npos)
        << b.logs();
  }
  const auto got = gather_checkpoint(
      runtime::checkpoint_dir(disk, steps),
      {runtime::checkpoint_dir(host_disk(2), steps), runtime::checkpoint_dir(host_disk(3), steps)},
      (fs::path(dir()) / "own_disk_b_final").string());
  expect_same_run(b.out_dir, x_out, steps, 3, got);
}

// A checkpoint.dir that some host cannot write is refused at its registration (the agent exits 2)
// with one error naming the directory and the host, before any step.
TEST(Checkpoints, ACheckpointDirAHostCannotWriteIsRefusedNamingTheHost) {
  SKIP_WITHOUT_NETNS();
  const auto disk = (fs::path(runs()) / "read_only_disk").string();
  Cluster c(2, "read_only_disk");
  ASSERT_TRUE(c.hosts.ok());
  c.start_coordinator(2, 2, {"--checkpoint.dir=" + disk}, /*wait_s=*/4);
  auto& good = c.start_agent(1, kToken);
  auto& read_only = c.start_agent(
      2, kToken, true, fmt::format("mkdir -p '{}' && mount -t tmpfs -o ro bw-ro '{}'", disk, disk));
  EXPECT_EQ(read_only.wait(30), 2) << c.logs();
  EXPECT_EQ(c.coordinator->wait(30), 3) << c.logs();
  EXPECT_GE(good.wait(30), 0);
  const auto log = read_text(c.log("coordinator"));
  EXPECT_NE(log.find(fmt::format("checkpoint.dir '{}' cannot be written on host 'host2'", disk)),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("refused agent 'host1'"), std::string::npos) << log;
}

// The corpus is read on every host: a host whose copy differs, or that has none, is refused at
// registration (exit status 2) with the reason, before any step.
TEST(Data, ADifferentOrMissingCorpusIsRefusedAtRegistration) {
  SKIP_WITHOUT_NETNS();
  const auto other = (fs::path(dir()) / "other-corpus.txt").string();
  {
    std::ofstream out(other);
    for (int i = 0; i < 30000; ++i) out << static_cast<char>('a' + (i * 7) % 26);
  }
  Cluster c(3, "corpus");
  ASSERT_TRUE(c.hosts.ok());
  c.start_coordinator(2, 2, {"--expect-names", "host1,host2"}, /*wait_s=*/4);
  auto& good = c.start_agent(1, kToken);
  auto& differs =
      c.start_agent(2, kToken, true, fmt::format("mount --bind {} {}", other, corpus()));
  auto& missing =
      c.start_agent(3, kToken, true, fmt::format("mount --bind /dev/null {}", corpus()));
  EXPECT_EQ(differs.wait(30), 2) << c.logs();
  EXPECT_EQ(missing.wait(30), 2) << c.logs();
  EXPECT_EQ(c.coordinator->wait(30), 3) << c.logs();
  EXPECT_GE(good.wait(30), 0);
  const auto log = read_text(c.log("coordinator"));
  EXPECT_NE(log.find("refused agent 'host2'"), std::string::npos) << log;
  EXPECT_NE(log.find("every host needs the same corpus at data.path"), std::string::npos) << log;
  EXPECT_NE(log.find("refused agent 'host3'"), std::string::npos) << log;
  EXPECT_NE(log.find("cannot read the corpus"), std::string::npos) << log;
  EXPECT_NE(read_text(c.log("agent1")).find("same corpus"), std::string::npos) << c.logs();
}

// A Hugging Face folder of a tiny Llama (vocabulary 256: the letters corpus) drawn from `seed`.
std::string hf_folder(const std::string& name, uint64_t seed) {
  const auto path = (fs::path(dir()) / "hf" / name).string();
  const auto config = model::resolve_config("llama", "tiny", 0, "", 256);
  runtime::HfWeights weights;
  for (int l = 0; l < model::num_layers(config); ++l) {
    const auto layer = runtime::initial_layer(config, l, seed);
    for (const auto& [param, value] : layer->parameter_list()) weights[{l, param}] = value.detach();
  }
  runtime::write_hf_folder(path, config, weights, {});
  return path;
}

// model.init_from is read on every host (workers build their layers from their host's copy): a
// host whose folder is missing, or differs, is refused at registration (exit status 2) with one
// error naming the host and the path, before any step.
TEST(Weights, AMissingOrDifferentInitFromFolderIsRefusedAtRegistration) {
  SKIP_WITHOUT_NETNS();
  const auto folder = hf_folder("model", 1);
  const auto other = hf_folder("other", 2);
  Cluster c(3, "weights");
  ASSERT_TRUE(c.hosts.ok());
  c.start_coordinator(2, 2, {"--expect-names", "host1,host2", "--model.init_from=" + folder},
                      /*wait_s=*/4);
  auto& good = c.start_agent(1, kToken);
  auto& differs = c.start_agent(2, kToken, true, fmt::format("mount --bind {} {}", other, folder));
  // An empty file system over the folder's parent: the folder does not exist on host 3.
  const auto parent = fs::path(folder).parent_path().string();
  auto& missing = c.start_agent(3, kToken, true, "mount -t tmpfs bw-empty " + parent);
  EXPECT_EQ(differs.wait(30), 2) << c.logs();
  EXPECT_EQ(missing.wait(30), 2) << c.logs();
  EXPECT_EQ(c.coordinator->wait(30), 3) << c.logs();
  EXPECT_GE(good.wait(30), 0);
  const auto log = read_text(c.log("coordinator"));
  EXPECT_NE(log.find("refused agent 'host2'"), std::string::npos) << log;
  EXPECT_NE(log.find("every host needs the same folder at model.init_from"), std::string::npos)
      << log;
  EXPECT_NE(log.find("refused agent 'host3'"), std::string::npos) << log;
  EXPECT_EQ(log.find("refused agent 'host1'"), std::string::npos) << log;
  // The missing host's own output: one error line, naming the host and the path.
  const auto agent = read_text(c.log("agent2"));
  std::vector<std::string> errors;
  std::istringstream lines(agent);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("error:", 0) == 0) errors.push_back(line);
  }
  ASSERT_EQ(errors.size(), 1u) << agent;
  EXPECT_NE(errors[0].find("host 'host3'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("model.init_from '" + folder + "'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("cannot read the Hugging Face folder"), std::string::npos) << errors[0];
}

// `breakwater launch` over a real sshd: one sshd per host namespace (its own host key, an
// authorized key made for the test, a temporary sshd_config, port 2222), a hostfile of the hosts'
// addresses, and ssh as the remote shell. The agents run in the sshd's private mount namespace.
TEST(Launch, OverARealSshdMatchesTheOneHostRun) {
  SKIP_WITHOUT_NETNS();
  const std::string sshd = "/usr/sbin/sshd";
  if (!fs::exists(sshd) || testing::shell("command -v ssh ssh-keygen") != 0) {
    GTEST_SKIP() << "skipped: sshd or ssh is not installed (apt-get install openssh-server "
                    "openssh-client; scripts/setup.sh does)";
  }
  const int hosts_n = 2, steps = 6, port = 2222;
  const auto& want = reference(hosts_n, steps);
  Cluster c(hosts_n, "launch_ssh");
  ASSERT_TRUE(c.hosts.ok());
  const auto keys = (fs::path(dir()) / "ssh").string();
  fs::create_directories(keys);
  const auto host_key = keys + "/host_ed25519", user_key = keys + "/user_ed25519";
  for (const auto& k : {host_key, user_key}) {
    fs::remove(k);
    fs::remove(k + ".pub");
    ASSERT_EQ(testing::shell(fmt::format("ssh-keygen -q -t ed25519 -N '' -f {}", k)), 0);
  }
  fs::copy_file(user_key + ".pub", keys + "/authorized_keys", fs::copy_options::overwrite_existing);
  testing::shell("mkdir -p /run/sshd");  // privilege separation directory (the package's init)
  std::vector<std::unique_ptr<NsProcess>> daemons;
  for (int h = 1; h <= hosts_n; ++h) {
    const auto config = fmt::format("{}/sshd_config.{}", keys, h);
    std::ofstream(config) << fmt::format(
        "ListenAddress {}\nPort {}\nHostKey {}\nAuthorizedKeysFile {}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication "
        "no\nKbdInteractiveAuthentication "
        "no\nUsePAM no\nStrictModes no\nPidFile {}/sshd.{}.pid\nLogLevel INFO\n",
        c.hosts.address(h), port, host_key, keys, keys, h);
    daemons.push_back(std::make_unique<NsProcess>(
        c.hosts.host(h), with_private_dir({sshd, "-D", "-e", "-f", config}),
        c.log(fmt::format("sshd{}", h))));
  }
  // Until each sshd answers (a deadline, then the daemon's log says why).
  for (int h = 1; h <= hosts_n; ++h) {
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      up = testing::shell(fmt::format("ip netns exec {} timeout 2 bash -c 'exec 3<>/dev/tcp/{}/{}'",
                                      c.hosts.host(0), c.hosts.address(h), port)) == 0;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(up) << read_text(c.log(fmt::format("sshd{}", h)));
  }
  const auto hostfile = c.out_dir + ".hosts";
  {
    std::ofstream out(hostfile);
    for (int h = 1; h <= hosts_n; ++h) out << c.hosts.address(h) << " slots=1\n";
  }
  const auto ssh = fmt::format(
      "ssh -p {} -i {} -o BatchMode=yes -o StrictHostKeyChecking=no -o "
      "UserKnownHostsFile=/dev/null "
      "-o LogLevel=ERROR",
      port, user_key);
  std::vector<std::string> args = {
      BW_BINARY,  "launch", "--quiet", "--log-level=info", "--hostfile", hostfile,   "--listen",
      c.listen(), "--ssh",  ssh,       "--remote-binary",  BW_BINARY,    "--wait-s", "60"};
  for (auto& a : config_args(hosts_n, steps, c.out_dir)) args.push_back(a);
  args.push_back("--elastic.heartbeat_timeout_s=5");  // as above: detection is not under test
  c.coordinator = std::make_unique<NsProcess>(
      c.hosts.host(0), args, c.log("coordinator"),
      std::vector<std::pair<std::string, std::string>>{{"BW_RUN_TOKEN", kToken}});
  auto daemon_logs = [&] {
    std::string out = c.logs();
    for (int h = 1; h <= hosts_n; ++h) out += read_text(c.log(fmt::format("sshd{}", h)));
    return out;
  };
  ASSERT_EQ(c.coordinator->wait(kDeadlineS), 0) << daemon_logs();
  const auto log = read_text(c.log("coordinator"));
  for (int h = 1; h <= hosts_n; ++h) {
    // Each agent came in over its host's sshd, from that host's address.
    EXPECT_NE(log.find(fmt::format("'{}' ({})", c.hosts.address(h), c.hosts.address(h))),
              std::string::npos)
        << log;
    EXPECT_NE(read_text(c.log(fmt::format("sshd{}", h))).find("Accepted publickey"),
              std::string::npos)
        << daemon_logs();
  }
  expect_same_run(c.out_dir, want, steps);
}

}  // namespace
}  // namespace bw::elastic
