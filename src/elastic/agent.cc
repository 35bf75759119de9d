#include "elastic/agent.h"

#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "elastic/keys.h"
#include "elastic/process.h"
#include "runtime/config.h"
#include "runtime/log.h"

namespace bw::elastic {

int run_agent(const AgentArgs& args) {
  using namespace std::chrono;
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(args.store_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = seconds(60);
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(args.store_host, opts);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("agent of node {} cannot reach the coordinator's store at {}:{}: {}",
                                args.node, args.store_host, args.store_port, e.what()));
  }
  const auto bytes = store->get(keys::config());
  const auto config =
      runtime::parse_run_config(std::string(bytes.begin(), bytes.end()), "the coordinator's config", {});
  const auto period = milliseconds(std::clamp<int64_t>(
      static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000.0 / 4), 50, 1000));
  const std::string exe = args.executable.empty() ? self_executable() : args.executable;
  std::vector<ChildProcess> workers;
  std::vector<int> ids;
  for (int d = 0; d < args.devices; ++d) {
    const int id = args.node * args.devices + d;
    ids.push_back(id);
    workers.push_back(ChildProcess::spawn(
        exe, {exe, "worker", "--store-host", args.store_host, "--store-port",
              std::to_string(args.store_port), "--worker-id", std::to_string(id), "--node",
              std::to_string(args.node), "--device", std::to_string(d), "--incarnation", std::to_string(args.incarnation)}));
  }
  auto last_beat = steady_clock::now() - period;
  std::vector<bool> finished(workers.size(), false);
  while (true) {
    if (steady_clock::now() - last_beat >= period) {
      try {
        store->add(keys::node_heartbeat(args.node), 1);
      } catch (const std::exception&) {
        for (auto& w : workers) w.kill();
        return 3;  // the coordinator is gone
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
      // A worker died or failed: report it at once, then take the node out.
      const auto report = nlohmann::json{{"worker", ids[i]},
                                         {"status", *status},
                                         {"incarnation", args.incarnation}}
                              .dump();
      try {
        store->set(keys::node_exit(args.node, args.incarnation),
                   std::vector<uint8_t>(report.begin(), report.end()));
        store->add(keys::exits(), 1);
      } catch (const std::exception&) {
      }
      for (auto& w : workers) w.kill();
      runtime::log(runtime::LogLevel::kInfo, "node {}: worker {} exited with status {}", args.node,
                   ids[i], *status);
      return 3;
    }
    if (left == 0) return 0;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

}  // namespace bw::elastic
