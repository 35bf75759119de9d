#include "elastic/local_nodes.h"

#include <chrono>
#include <thread>

namespace bw::elastic {

void LocalNodes::start(int node, int incarnation) {
  if (auto it = agents_.find(node); it != agents_.end()) it->second.kill();
  agents_[node] = ChildProcess::spawn(
      exe_, {exe_, "agent", "--store-host", host_, "--store-port", std::to_string(port_), "--node",
             std::to_string(node), "--devices", std::to_string(devices_), "--incarnation",
             std::to_string(incarnation)});
  reported_[node] = false;
}

void LocalNodes::kill(int node) {
  if (auto it = agents_.find(node); it != agents_.end()) it->second.kill();
  reported_[node] = true;
}

std::vector<std::pair<int, int>> LocalNodes::poll() {
  std::vector<std::pair<int, int>> out;
  for (auto& [node, child] : agents_) {
    if (reported_[node]) continue;
    if (auto status = child.poll()) {
      reported_[node] = true;
      out.emplace_back(node, *status);
    }
  }
  return out;
}

void LocalNodes::kill_all() {
  for (auto& [node, child] : agents_) child.kill();
}

std::vector<int> LocalNodes::wait_all(double timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_ms));
  std::vector<int> bad;
  for (auto& [node, child] : agents_) {
    if (reported_[node] && child.poll()) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int status = child.wait_or_kill(std::max(left, std::chrono::milliseconds(1)));
    if (status != 0) bad.push_back(node);
  }
  return bad;
}

int LocalNodes::pid(int node) const {
  auto it = agents_.find(node);
  return it == agents_.end() ? -1 : it->second.pid();
}

}  // namespace bw::elastic
