#include "elastic/standby_launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "elastic/control_store_etcd.h"
#include "elastic/keys.h"
#include "elastic/local_etcd.h"
#include "elastic/messages.h"
#include "elastic/process.h"
#include "elastic/token.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_launch_signals{0};
void on_launch_signal(int) { g_launch_signals.fetch_add(1); }

// SIGINT and SIGTERM counted while it lives (passed on to the coordinators).
class SignalCount {
 public:
  SignalCount() {
    g_launch_signals = 0;
    struct sigaction sa {};
    sa.sa_handler = on_launch_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalCount() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalCount(const SignalCount&) = delete;
  SignalCount& operator=(const SignalCount&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

bool running(ChildProcess& p) { return !p.poll().has_value(); }

// The leader's pid, when one leads the run (nullopt while the control store does not answer).
std::optional<int64_t> leader_pid(ControlStore& store) {
  try {
    const auto now = store.leader(keys::leader(), deadline_in(2s));
    if (!now) return int64_t{0};
    return decode_leader(now->value, keys::leader()).pid;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int run_with_standbys(runtime::RunConfig config, const StandbyLaunch& launch) {
  const std::string exe = launch.executable.empty() ? self_executable() : launch.executable;
  // The run token reaches every child through its environment, never a command line or a file.
  std::string token = coordinator_token(config, false);
  if (token.empty()) token = random_hex(16);
  ::setenv("BW_RUN_TOKEN", token.c_str(), 1);
  config.elastic.run_token.clear();

  const std::string out = config.train.out_dir;
  fs::create_directories(out);
  std::optional<LocalEtcd> etcd;
  if (config.elastic.control == "etcd") {
    etcd.emplace(3, fs::temp_directory_path().string());
    config.elastic.control = etcd->url();
  }
  const ControlUrl url = parse_control_url(config.elastic.control);  // ConfigError when bad
  const std::string run_id = "train-" + random_hex(6);
  // Every coordinator writes its own train.out_dir; the checkpoints are shared.
  if (config.checkpoint.dir.empty()) config.checkpoint.dir = out;
  const std::string config_path = (fs::path(out) / "coordinators.toml").string();
  io::write_file(config_path, runtime::to_toml(config), "the coordinators' config");

  auto coordinator = [&](int i) {
    const std::string dir = (fs::path(out) / fmt::format("coordinator-{}", i)).string();
    std::vector<std::string> args = {
        exe,    "coordinator", config_path, "--listen",        "127.0.0.1:0",           "--run-id",
        run_id, "--wait-s",    "120",       "--no-agent-hint", "--train.out_dir=" + dir};
    if (i > 0) args.push_back("--standby");
    args.insert(args.end(), launch.coordinator.begin(), launch.coordinator.end());
    return ChildProcess::spawn(exe, args);
  };
  SignalCount signals;
  std::vector<ChildProcess> coordinators;
  coordinators.push_back(coordinator(0));
  std::vector<ChildProcess> agents;
  for (int n = 0; n < config.cluster.nodes; ++n) {
    agents.push_back(
        ChildProcess::spawn(exe,
                            {exe, "agent", "--control", config.elastic.control, "--run-id", run_id,
                             "--node-name", fmt::format("node{}", n), "--wait-s", "120"},
                            (fs::path(out) / fmt::format("agent-{}.log", n)).string()));
  }
  auto store = EtcdControlStore::connect(url, run_id, deadline_in(10s));

  // The standbys once the active coordinator leads (a standby that won first would find no run).
  const auto lead_by = std::chrono::steady_clock::now() + 300s;
  bool led = false;  // also when it died after taking the lead: its key outlives it a while
  for (;;) {
    const auto pid = leader_pid(*store);
    if (pid && *pid == coordinators[0].pid()) {
      led = true;
      break;
    }
    if (!running(coordinators[0])) break;  // its error is on the terminal
    if (std::chrono::steady_clock::now() > lead_by) {
      throw CommError(fmt::format(
          "the coordinator (pid {}) did not take the lead of run '{}' in {} within 300 s",
          coordinators[0].pid(), run_id, store->describe()));
    }
    if (g_launch_signals > 0) {
      ::kill(coordinators[0].pid(), SIGINT);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (led) {
    for (int i = 1; i <= config.elastic.standbys; ++i) coordinators.push_back(coordinator(i));
    if (!launch.quiet) {
      std::vector<std::string> standbys;
      for (size_t i = 1; i < coordinators.size(); ++i) {
        standbys.push_back(std::to_string(coordinators[i].pid()));
      }
      fmt::print(
          stderr, "control: {}{}; coordinator pid {} leads{}; agents' logs in {}/agent-N.log\n",
          store->describe(),
          etcd ? fmt::format(" (3 members on loopback, data in {})", etcd->dir()) : "",
          coordinators[0].pid(),
          standbys.empty() ? std::string()
                           : fmt::format(", standby pid(s) {} (kill -9 {} hands the run over)",
                                         fmt::join(standbys, ", "), coordinators[0].pid()),
          out);
      std::fflush(stderr);
    }
  }

  // Until every process has ended. Each has deadlines of its own: an agent left without a leader
  // exits 3 after its leaderless timeout (30 s); a standby ends when the run is over.
  int passed_on = 0;
  std::optional<std::chrono::steady_clock::time_point> coordinators_gone, agents_gone;
  for (;;) {
    if (g_launch_signals > passed_on) {
      passed_on = g_launch_signals;
      for (auto& c : coordinators) {
        if (running(c)) ::kill(c.pid(), SIGINT);
      }
    }
    const bool any_coordinator = std::any_of(coordinators.begin(), coordinators.end(),
                                             [](ChildProcess& c) { return running(c); });
    const bool any_agent =
        std::any_of(agents.begin(), agents.end(), [](ChildProcess& a) { return running(a); });
    if (!any_coordinator && !any_agent) break;
    const auto now = std::chrono::steady_clock::now();
    if (!any_coordinator && !coordinators_gone) coordinators_gone = now;
    if (!any_agent && !agents_gone) agents_gone = now;
    // Past every child's own deadline: the rest are stopped.
    if ((coordinators_gone && now - *coordinators_gone > 60s) ||
        (agents_gone && now - *agents_gone >
                            std::chrono::duration<double>(config.elastic.step_timeout_s + 300.0))) {
      for (auto& a : agents) a.kill();
      for (auto& c : coordinators) c.kill();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  int status = -1;
  for (auto& c : coordinators) {
    const int s = c.poll().value_or(128 + SIGKILL);
    if (s != 128 + SIGKILL) status = std::max(status, s);
  }
  if (status < 0) {
    fmt::print(stderr,
               "error: every coordinator of run '{}' was killed and none took the run over; its "
               "last checkpoint is in {} (train.resume)\n",
               run_id, config.checkpoint.dir);
    return 3;
  }
  return status;
}

}  // namespace bw::elastic
