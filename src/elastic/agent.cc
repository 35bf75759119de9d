#include "elastic/agent.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"
#include "elastic/control_store_etcd.h"
#include "elastic/failover_store.h"
#include "elastic/inject.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/net.h"
#include "elastic/process.h"
#include "elastic/store_text.h"
#include "elastic/token.h"
#include "model/hf_config.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/hf.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace {

using namespace std::chrono;
using Store = c10::intrusive_ptr<c10d::TCPStore>;

Store connect_store(const std::string& host, int port, milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// Whether the coordinator's store still answers (one round trip, within the store's timeout).
bool store_answers(c10d::Store& store) {
  try {
    store.check({keys::run_over()});
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The first line of an exception's message (c10's carry a backtrace after it).
std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

// How one incarnation of a node ended.
enum class End { kShutdown, kWorkerExited, kFenced, kStoreLost, kRunOver };

struct Node {
  int node = 0, devices = 1, incarnation = 0;
  std::string gloo_host = "127.0.0.1";
  std::string name;     // the agent's node name (multi-host runs); its workers' shards say it
  bool remote = false;  // watch the fence and run-over keys
};

struct Ended {
  End end;
  int status = 0;  // kWorkerExited: the worker's exit status
};

milliseconds heartbeat_period(const runtime::RunConfig& config) {
  return milliseconds(std::clamp<int64_t>(
      static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000.0 / 4), 50, 1000));
}

// Starts the node's workers, heartbeats, watches them until the incarnation ends.
// `workers`: the node's workers when they run already (a run taken over by another coordinator:
// watched again), else started here. With `follow` (a control store), a lost store leaves them
// running: their store clients follow the leadership, and the agent registers again.
// `replaced` (following the leadership): whether a coordinator with a newer epoch leads now.
Ended run_node(Store handle, const AgentArgs& args, const Node& n, const runtime::RunConfig& config,
               std::vector<ChildProcess>& workers, int64_t leader_epoch = 0,
               const std::function<bool()>& replaced = {}) {
  const bool follow = !args.control.empty();
  // Following the leadership, the store is checked more often: a takeover waits for this agent.
  const milliseconds period =
      follow ? std::min(heartbeat_period(config), milliseconds(200)) : heartbeat_period(config);
  std::vector<int> ids;
  for (int d = 0; d < n.devices; ++d) ids.push_back(n.node * n.devices + d);
  if (workers.empty()) {
    // A fault injected before this agent's first heartbeat (a hang or a crash while starting up).
    if (!config.elastic.inject.empty()) {
      Injector(parse_faults(config.elastic.inject), n.node, 0, handle).at(0, "agent_startup");
    }
    const std::string exe = args.executable.empty() ? self_executable() : args.executable;
    for (int d = 0; d < n.devices; ++d) {
      std::vector<std::string> argv = {exe,
                                       "worker",
                                       "--store-host",
                                       args.store_host,
                                       "--store-port",
                                       std::to_string(args.store_port),
                                       "--worker-id",
                                       std::to_string(ids[d]),
                                       "--node",
                                       std::to_string(n.node),
                                       "--device",
                                       std::to_string(d),
                                       "--incarnation",
                                       std::to_string(n.incarnation),
                                       "--gloo-host",
                                       n.gloo_host,
                                       "--node-name",
                                       n.name};
      if (follow) {
        for (const auto& a : {std::string("--control"), args.control, std::string("--run-id"),
                              args.run_id, std::string("--leader-epoch"),
                              std::to_string(leader_epoch), std::string("--leaderless-timeout-s"),
                              fmt::format("{}", args.leaderless_timeout_s)}) {
          argv.push_back(a);
        }
      }
      workers.push_back(ChildProcess::spawn(exe, argv));
    }
  }
  auto kill_all = [&] {
    for (auto& w : workers) w.kill();
  };
  auto last_beat = steady_clock::now() - period;
  std::vector<bool> finished(workers.size(), false);
  const auto fence = keys::node_fence(n.node, n.incarnation);
  while (true) {
    if (steady_clock::now() - last_beat >= period) {
      try {
        handle->add(keys::node_heartbeat(n.node), 1);
        if (n.remote) {
          if (handle->check({fence})) {
            kill_all();
            return {End::kFenced};
          }
          if (handle->check({keys::run_over()})) {
            // Workers leave by themselves after the shutdown; give them a moment.
            for (auto& w : workers) w.wait_or_kill(seconds(5));
            return {End::kRunOver};
          }
        }
      } catch (const c10::DistNetworkError&) {
        if (!follow) kill_all();
        return {End::kStoreLost};
      } catch (const std::exception&) {
        if (!follow) {
          kill_all();
          return {End::kStoreLost};
        }
        // Following the leadership: a slow store is a coordinator paused or cut off. Replaced by
        // a newer one: go to it; else beat again later on a fresh connection.
        if (replaced && replaced()) return {End::kStoreLost};
        try {  // a timed-out connection is out of step with its server
          handle = connect_store(args.store_host, args.store_port, milliseconds(1000));
          handle->setTimeout(milliseconds(1000));
        } catch (const std::exception&) {
          if (replaced && replaced()) return {End::kStoreLost};
        }
      }
      last_beat = steady_clock::now();
    }
    int left = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (finished[i]) continue;
      auto status = workers[i].poll();
      if (!status) {
        ++left;
        continue;
      }
      if (*status == 0) {
        finished[i] = true;
        continue;
      }
      // A worker that failed because the coordinator went away (its store stopped answering) is
      // the coordinator's loss, not the worker's: the agent says which coordinator it lost.
      // (Workers that follow the leadership outlive their coordinator: their exit is theirs.)
      if (!follow && !store_answers(*handle)) {
        kill_all();
        return {End::kStoreLost};
      }
      // A worker died or failed: report it at once, then take the node out.
      const auto report = encode_exit_report({ids[i], *status, n.incarnation});
      try {
        handle->set(keys::node_exit(n.node, n.incarnation),
                    std::vector<uint8_t>(report.begin(), report.end()));
        handle->add(keys::exits(), 1);
      } catch (const std::exception&) {
      }
      kill_all();
      runtime::log(runtime::LogLevel::kInfo, "node {}: worker {} exited with status {}", n.node,
                   ids[i], *status);
      return {End::kWorkerExited, *status};
    }
    if (left == 0) return {End::kShutdown};
    std::this_thread::sleep_for(milliseconds(5));
  }
}

runtime::RunConfig read_config(c10d::Store& store) {
  return runtime::parse_run_config(get_string(store, keys::config()), "the coordinator's config",
                                   {});
}

// `breakwater launch` holds the agent's standard input open for as long as the run lasts.
void read_token_from_stdin(AgentArgs& args) {
  std::string token;
  char c = 0;
  while (read(0, &c, 1) == 1 && c != '\n') token += c;
  if (token.empty()) {
    throw ConfigError("--token-stdin: standard input carried no run token (one line)");
  }
  args.token = token;
  std::thread([] {
    char buf[64];
    while (read(0, buf, sizeof(buf)) > 0) {
    }
    runtime::log(runtime::LogLevel::kWarn,
                 "the launcher has gone (standard input closed); "
                 "stopping this agent and its workers");
    _exit(3);  // the workers die with the agent (PR_SET_PDEATHSIG)
  }).detach();
}

// What this host's corpus holds, for the coordinator to compare with its own: its digest, or why
// it cannot be read here.
void corpus_report(const runtime::RunConfig& config, Registration& r) {
  r.data_path = config.data.path.empty() ? "(the default corpus)" : config.data.path;
  try {
    if (config.data.path.empty()) r.data_path = data::default_corpus_path();
    r.data_digest = data::TokenDataset::open(r.data_path).content_digest();
  } catch (const ConfigError& e) {
    r.data_error = e.what();
  }
}

// What this host's copy of model.init_from holds (HfFolder::content_digest), for the coordinator
// to compare with its own: its digest, or why it cannot be read here.
void weights_report(const runtime::RunConfig& config, Registration& r) {
  r.weights_path = config.model.init_from;
  try {
    const runtime::HfFolder folder(model::hf_config_from_dir(r.weights_path));
    r.weights_digest = folder.content_digest();
  } catch (const ConfigError& e) {
    r.weights_error = e.what();
  }
}

// This host's checkpoint.dir, for the coordinator: whether the coordinator's probe file `probe`
// is there (a filesystem they share), and why this host cannot write there if it cannot.
void checkpoint_dir_report(const std::string& dir, const std::string& probe, Registration& r) {
  namespace fs = std::filesystem;
  std::error_code ec;
  r.checkpoint_path = dir;
  r.checkpoint_shared = !probe.empty() && fs::exists(fs::path(dir) / probe, ec);
  const auto test = fs::path(dir) / fmt::format(".breakwater-write-test-{}", getpid());
  try {
    fs::create_directories(dir);
    io::write_file(test.string(), "breakwater\n", "a write test of checkpoint.dir");
    fs::remove(test);
  } catch (const std::exception& e) {
    r.checkpoint_error = e.what();
  }
}

// checkpoint.dir on this host's own disk ("hosts" mode, keys::checkpoint_io): publishes each
// checkpoint the coordinator commits (runtime::publish_on_host) and keeps checkpoint.keep of them,
// from a thread with its own store connection that polls keys::num_committed. Waits for the mode
// first; ends at once in any other mode. A publication that fails is said and retried at the next
// commit: until then the shards stay in the staging directory, where a resume finds them too.
class HostCheckpoints {
 public:
  HostCheckpoints(std::string store_host, int store_port, std::string root, int keep,
                  std::string host)
      : store_host_(std::move(store_host)),
        port_(store_port),
        root_(std::move(root)),
        keep_(keep),
        host_(std::move(host)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~HostCheckpoints() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  HostCheckpoints(const HostCheckpoints&) = delete;
  HostCheckpoints& operator=(const HostCheckpoints&) = delete;

  // A coordinator took the run over (--control): the commits are read from its store from now on,
  // counted there afresh. A commit the old coordinator published that this host had not read
  // yet stays in its staging directory, where a resume finds it.
  void follow(std::string store_host, int store_port) {
    std::lock_guard lk(follow_mu_);
    follow_ = std::make_pair(std::move(store_host), store_port);
  }

  // The run is over: publishes its last commit (the final checkpoint or the stop save) before
  // the agent says goodbye, so the coordinator is still there to read it from.
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    try {
      pass(seconds(5));
    } catch (const std::exception& e) {
      runtime::log(runtime::LogLevel::kWarn, "could not publish the last checkpoint on host {}: {}",
                   host_, first_line(e));
    }
  }

 private:
  void loop() {
    while (!stop_) {
      try {
        if (!pass(seconds(2))) return;
      } catch (const std::exception&) {
        store_.reset();  // the coordinator may be gone or busy: try again
      }
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(milliseconds(20));
    }
  }
  // Connects if needed, learns the mode once it is set, and publishes what was committed in
  // "hosts" mode; false once the mode is known to be another (nothing to do, ever).
  bool pass(milliseconds connect_timeout) {
    {
      std::lock_guard lk(follow_mu_);
      if (follow_) {
        std::tie(store_host_, port_) = *follow_;
        follow_.reset();
        store_.reset();
        seen_ = 0;
      }
    }
    if (!store_) store_ = connect_store(store_host_, port_, connect_timeout);
    if (!mode_known_ && store_->check({keys::checkpoint_io()})) {
      mode_known_ = true;
      hosts_ = get_string(*store_, keys::checkpoint_io()) == "hosts";
    }
    if (hosts_) poll();
    return !mode_known_ || hosts_;
  }
  void poll() {
    const int64_t n = store_->add(keys::num_committed(), 0);
    for (int64_t i = seen_ + 1; i <= n; ++i) {
      const auto key = keys::committed_checkpoint(i);
      if (!store_->check({key})) {
        runtime::log(runtime::LogLevel::kWarn,
                     "checkpoint commit {} is no longer in the store: its shards on host {} stay "
                     "in their staging directory, where a resume still finds them",
                     i, host_);
        continue;
      }
      const auto info = runtime::parse_sidecar(nlohmann::json::parse(get_string(*store_, key)),
                                               "the committed checkpoint's manifest");
      try {
        runtime::publish_on_host(root_, info, host_);
        runtime::log(runtime::LogLevel::kInfo, "published checkpoint {} on host {}",
                     runtime::checkpoint_dir(root_, static_cast<int>(info.step)), host_);
      } catch (const ConfigError& e) {
        runtime::log(runtime::LogLevel::kWarn, "{}", e.what());
      }
    }
    if (n > seen_) {
      try {
        runtime::retain_checkpoints(root_, keep_);
        runtime::remove_partials_before_oldest(root_);
      } catch (const ConfigError& e) {
        runtime::log(runtime::LogLevel::kWarn, "{}", e.what());
      }
    }
    seen_ = n;
  }

  std::string store_host_;
  int port_;
  std::string root_;
  int keep_;
  std::string host_;
  Store store_;
  bool mode_known_ = false, hosts_ = false;
  int64_t seen_ = 0;
  std::mutex follow_mu_;
  std::optional<std::pair<std::string, int>> follow_;  // a new leader's store, not taken yet
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int local_agent(const AgentArgs& args);
int remote_agent(AgentArgs args);

}  // namespace

// A store call that fails outside the places that expect it (c10d raises DistError, or the
// coordinator's half-written reply does not parse) means the coordinator has gone: a lost peer
// (exit 3) naming it, never an internal error.
int run_agent(const AgentArgs& args) {
  try {
    return local_agent(args);
  } catch (const c10::DistError& e) {
    throw CommError(fmt::format("agent of node {}: lost the coordinator at {}:{}: {}", args.node,
                                args.store_host, args.store_port, first_line(e)));
  }
}

int run_remote_agent(AgentArgs args) {
  const std::string where = fmt::format("{}:{}", args.store_host, args.store_port);
  const std::string name = args.node_name;
  try {
    return remote_agent(std::move(args));
  } catch (const c10::DistError& e) {
    throw CommError(fmt::format("agent{}: lost the coordinator at {}: {}",
                                name.empty() ? std::string() : " '" + name + "'", where,
                                first_line(e)));
  } catch (const nlohmann::json::exception& e) {
    throw CommError(
        fmt::format("agent{}: the coordinator at {} sent a reply that does not parse "
                    "({}); is it the same breakwater version?",
                    name.empty() ? std::string() : " '" + name + "'", where, e.what()));
  }
}

namespace {

int local_agent(const AgentArgs& args) {
  // A peer that dies closes its sockets: a write to one must fail with EPIPE (Gloo and the store
  // client then raise an error this process handles as a lost peer), not kill this process with
  // SIGPIPE, which would take its node out with the dead one.
  std::signal(SIGPIPE, SIG_IGN);
  runtime::set_log_name(fmt::format("agent {}", args.node));
  Store store;
  try {
    store = connect_store(args.store_host, args.store_port, seconds(60));
  } catch (const std::exception& e) {
    throw CommError(
        fmt::format("agent of node {} cannot reach the coordinator's store at {}:{}: {}", args.node,
                    args.store_host, args.store_port, e.what()));
  }
  const auto config = read_config(*store);
  Node n;
  n.node = args.node;
  n.devices = args.devices;
  n.incarnation = args.incarnation;
  n.gloo_host = args.gloo_host.empty() ? "127.0.0.1" : args.gloo_host;
  std::vector<ChildProcess> workers;
  const auto ended = run_node(store, args, n, config, workers);
  if (ended.end == End::kStoreLost) {
    runtime::log(runtime::LogLevel::kError,
                 "agent of node {}: lost the coordinator at {}:{} (its store stopped answering); "
                 "stopped the workers",
                 args.node, args.store_host, args.store_port);
  }
  return ended.end == End::kShutdown ? 0 : 3;
}

int remote_agent(AgentArgs args) {
  // Measured first: the time to here is the start-up the coordinator allows this host's workers
  // (twice over) before their first heartbeat; it cannot time a process someone else started.
  // Loading the binary and LibTorch, the same start-up its workers will have (0 if unknown).
  const double age_ms = process_age_ms();
  const double launch_ms = std::isnan(age_ms) ? 0.0 : age_ms;
  if (args.token_stdin) read_token_from_stdin(args);
  if (args.node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    args.node_name = host;
  }
  runtime::set_log_name(fmt::format("agent {}", args.node_name));
  // A control store (--control): the coordinator is the run's leader, found there.
  std::shared_ptr<ControlStore> control;
  std::unique_ptr<LeaderFollower> follower;
  StoreAt leader;
  if (!args.control.empty()) {
    control = EtcdControlStore::connect(parse_control_url(args.control), args.run_id,
                                        deadline_in(seconds(10)));
    leader =
        locate_leader_store(*control, 0, milliseconds(static_cast<int64_t>(args.wait_s * 1000)));
    args.store_host = leader.host;
    args.store_port = leader.port;
    follower = std::make_unique<LeaderFollower>(
        control, leader, milliseconds(static_cast<int64_t>(args.leaderless_timeout_s * 1000)));
  }
  Node n;
  n.remote = true;
  n.gloo_host = args.gloo_host.empty() ? gloo_address(args.store_host) : args.gloo_host;
  const auto give_up = [&] {
    return CommError(fmt::format(
        "agent '{}': the coordinator at {}:{} could not be reached for {:.0f} s (--wait-s); is it "
        "running, and is the address one it listens on?",
        args.node_name, args.store_host, args.store_port, args.wait_s));
  };
  auto deadline = steady_clock::now() + milliseconds(static_cast<int64_t>(args.wait_s * 1000));
  std::unique_ptr<HostCheckpoints> host_checkpoints;
  bool shares_checkpoint_dir = false;
  // The node's workers while they run; after a takeover they run on, and the agent registers
  // again as the node and incarnation it was (`rejoin`).
  std::vector<ChildProcess> workers;
  std::optional<std::pair<int, int>> rejoin;
  while (true) {
    const std::string where = fmt::format("{}:{}", args.store_host, args.store_port);
    // Connect (c10d retries until the timeout) and register.
    Store store;
    runtime::RunConfig config;
    int index = -1;
    std::string nonce;
    try {
      const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
      if (left.count() <= 0) throw give_up();
      store = connect_store(args.store_host, args.store_port, left);
      store->wait({keys::config(), keys::nonce()}, left);
      config = read_config(*store);
      nonce = get_string(*store, keys::nonce());
      if (store->check({keys::run_over()})) {
        runtime::log(runtime::LogLevel::kInfo, "agent '{}': the run is over ({})", args.node_name,
                     get_string(*store, keys::run_over()));
        return 0;
      }
      Registration reg;
      reg.name = args.node_name;
      reg.host = n.gloo_host;
      reg.devices = args.devices;
      reg.launch_ms = launch_ms;
      corpus_report(config, reg);
      if (!config.model.init_from.empty()) weights_report(config, reg);
      if (!config.checkpoint.dir.empty()) {
        store->wait({keys::checkpoint_probe()}, left);
        checkpoint_dir_report(config.checkpoint.dir, get_string(*store, keys::checkpoint_probe()),
                              reg);
        shares_checkpoint_dir = reg.checkpoint_shared;
      }
      if (rejoin) {
        reg.node = rejoin->first;
        reg.incarnation = rejoin->second;
      }
      index = static_cast<int>(store->add(keys::registrations(), 1)) - 1;
      if (!args.token.empty()) reg.proof = token_proof(args.token, nonce, index);
      const auto text = encode_registration(reg);
      store->set(keys::registration(index), std::vector<uint8_t>(text.begin(), text.end()));
      // Accepted at once before the run starts, or at a step boundary when re-joining.
      store->wait({keys::registration_reply(index)},
                  milliseconds(static_cast<int64_t>(args.wait_s * 1000)));
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      runtime::log(runtime::LogLevel::kInfo, "{} not reachable yet: {}", where, e.what());
      if (steady_clock::now() > deadline) throw give_up();
      std::this_thread::sleep_for(milliseconds(500));
      continue;
    }
    const auto reply_key = keys::registration_reply(index);
    const auto reply = decode_registration_reply(get_string(*store, reply_key), reply_key);
    if (!workers.empty() &&
        (!reply.ok || reply.node != rejoin->first || reply.incarnation != rejoin->second)) {
      // The new coordinator did not take this node back as it was: its workers start afresh.
      for (auto& w : workers) w.kill();
      workers.clear();
    }
    rejoin.reset();
    if (!reply.ok) {
      if (store->check({keys::run_over()})) {
        return get_string(*store, keys::run_over()) == "finished" ? 0 : 3;
      }
      throw ConfigError(fmt::format("agent '{}': the coordinator at {} refused this agent: {}",
                                    args.node_name, where, reply.message));
    }
    n.node = reply.node;
    n.incarnation = reply.incarnation;
    n.devices = reply.devices;
    n.name = args.node_name;
    if (!host_checkpoints && !config.checkpoint.dir.empty() && !shares_checkpoint_dir) {
      host_checkpoints =
          std::make_unique<HostCheckpoints>(args.store_host, args.store_port, config.checkpoint.dir,
                                            config.checkpoint.keep, args.node_name);
    }
    runtime::log(runtime::LogLevel::kInfo,
                 "agent '{}' is node {} (incarnation {}), {} worker(s), Gloo on {}", args.node_name,
                 n.node, n.incarnation, n.devices, n.gloo_host);
    // Store calls give up after one heartbeat timeout, as the coordinator does on this node;
    // following the leadership, after a second (a paused coordinator may have been replaced).
    store->setTimeout(milliseconds(
        control ? 1000
                : std::max<int64_t>(
                      1000, static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000))));
    const auto ended = run_node(store, args, n, config, workers, leader.epoch, [&] {
      return follower && follower->newer(leader.epoch).has_value();
    });
    if (ended.end == End::kStoreLost && control) {
      runtime::log(runtime::LogLevel::kWarn,
                   "agent '{}': the coordinator's store at {} went; its workers run on while it "
                   "waits up to {:.0f} s for a coordinator that takes the run over",
                   args.node_name, where, args.leaderless_timeout_s);
      leader = follower->after(leader.epoch);
      args.store_host = leader.host;
      args.store_port = leader.port;
      if (host_checkpoints) host_checkpoints->follow(leader.host, leader.port);
      rejoin = std::make_pair(n.node, n.incarnation);
      runtime::log(runtime::LogLevel::kInfo, "agent '{}': the run is led at epoch {}, store {}:{}",
                   args.node_name, leader.epoch, leader.host, leader.port);
      deadline = steady_clock::now() + milliseconds(static_cast<int64_t>(args.wait_s * 1000));
      continue;
    }
    workers.clear();  // they have ended (or were killed)
    switch (ended.end) {
      case End::kShutdown:
      case End::kRunOver: {
        std::string how = "finished";
        try {
          store->setTimeout(seconds(30));
          store->wait({keys::run_over()});
          how = get_string(*store, keys::run_over());
          if (host_checkpoints) host_checkpoints->finish();
          store->add(keys::agents_gone(), 1);
        } catch (const std::exception&) {
          // The coordinator has gone already.
        }
        if (how == "finished") return 0;
        runtime::log(runtime::LogLevel::kError, "agent '{}': the run stopped: {}", args.node_name,
                     how);
        return 3;
      }
      case End::kWorkerExited:
        if (ended.status == 1 || ended.status == 2) return ended.status;
        if (config.elastic.rejoin_after_s <= 0) return 3;
        std::this_thread::sleep_for(
            milliseconds(static_cast<int64_t>(config.elastic.rejoin_after_s * 1000)));
        break;
      case End::kFenced:
        runtime::log(runtime::LogLevel::kWarn,
                     "agent '{}': the coordinator took node {} out of the run (its heartbeats "
                     "stopped arriving); registering again",
                     args.node_name, n.node);
        break;
      case End::kStoreLost:
        runtime::log(runtime::LogLevel::kWarn,
                     "agent '{}': lost the connection to the coordinator at {}; stopped the "
                     "workers, registering again when it answers",
                     args.node_name, where);
        break;
    }
    deadline = steady_clock::now() + milliseconds(static_cast<int64_t>(args.wait_s * 1000));
  }
}

}  // namespace
}  // namespace bw::elastic
