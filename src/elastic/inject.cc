#include "elastic/inject.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/error.h"
#include "elastic/keys.h"
#include "elastic/process.h"
#include "model/gpt.h"

namespace bw::elastic {
namespace {

const std::set<std::string> kActions = {"kill", "hang", "agent", "nan", "slow", "kill_coordinator"};
const std::set<std::string> kPhases = {"agent_startup", "startup",        "forward", "backward",
                                       "p2p",           "grad_sync",      "commit",  "optimizer",
                                       "reconfigure",   "state_transfer", "eval"};

bool startup_phase(const std::string& phase) {
  return phase == "startup" || phase == "agent_startup";
}

int parse_int(const std::string& entry, const std::string& key, const std::string& value) {
  size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v < 0) {
    throw ConfigError(fmt::format("elastic.inject entry '{}': {} must be an integer >= 0, got '{}'",
                                  entry, key, value));
  }
  return v;
}

}  // namespace

double wall_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(system_clock::now().time_since_epoch()).count();
}

std::vector<FaultSpec> parse_faults(const std::string& text) {
  std::vector<FaultSpec> out;
  std::stringstream list(text);
  std::string entry;
  const std::string form =
      "ACTION:node=N:step=S[:phase=P][:device=D] with ACTION kill, hang, agent or nan, "
      "slow:node=N:factor=F[:step=S][:device=D], or kill_coordinator:step=S";
  while (std::getline(list, entry, ',')) {
    if (entry.empty()) continue;
    std::stringstream parts(entry);
    std::string part;
    FaultSpec f;
    bool has_node = false, has_step = false, has_phase = false, has_factor = false,
         has_device = false;
    std::getline(parts, f.action, ':');
    if (kActions.count(f.action) == 0) {
      throw ConfigError(fmt::format("elastic.inject entry '{}': unknown action '{}'; use {}", entry,
                                    f.action, form));
    }
    while (std::getline(parts, part, ':')) {
      const auto eq = part.find('=');
      const std::string key = part.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
      if (key == "node") {
        f.node = parse_int(entry, key, value);
        has_node = true;
      } else if (key == "step") {
        f.step = parse_int(entry, key, value);
        has_step = true;
      } else if (key == "device") {
        f.device = parse_int(entry, key, value);
        has_device = true;
      } else if (key == "factor" && f.action == "slow") {
        size_t used = 0;
        try {
          f.factor = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || !std::isfinite(f.factor) || f.factor < 1.0) {
          throw ConfigError(fmt::format(
              "elastic.inject entry '{}': factor must be a number >= 1 (how many times longer "
              "each computation takes), got '{}'",
              entry, value));
        }
        has_factor = true;
      } else if (key == "phase") {
        if (kPhases.count(value) == 0 && !(f.action == "kill_coordinator" && value == "end")) {
          throw ConfigError(fmt::format(
              "elastic.inject entry '{}': unknown phase '{}'; use agent_startup, startup, "
              "forward, backward, p2p, grad_sync, commit, optimizer, reconfigure, "
              "state_transfer or eval",
              entry, value));
        }
        f.phase = value;
        has_phase = true;
      } else {
        throw ConfigError(
            fmt::format("elastic.inject entry '{}': unknown field '{}'; use {}", entry, key, form));
      }
    }
    if (f.action == "kill_coordinator") {
      // The leading coordinator itself: after step S's commit is durable, at the end of the run
      // (every worker reported the end, before it is published), or while node N's worker is in
      // the middle of the state transfer of the generation that starts at step S (it tells the
      // coordinator through the store and waits for it to go).
      const bool end = has_phase && f.phase == "end";
      const bool transfer = has_phase && f.phase == "state_transfer";
      if (has_factor || (!transfer && (has_node || has_device)) ||
          (has_phase && f.phase != "commit" && !end && !transfer) || has_step == end) {
        throw ConfigError(fmt::format(
            "elastic.inject entry '{}': kill_coordinator takes step= (the leading coordinator is "
            "killed once that step's commit is durable), phase=end (once every worker reported "
            "the end of the run), or step=S:phase=state_transfer[:node=N][:device=D] (while that "
            "worker moves layers into the generation starting at step S); use "
            "kill_coordinator:step=S, kill_coordinator:phase=end or "
            "kill_coordinator:step=S:phase=state_transfer:node=N",
            entry));
      }
      if (!transfer) f.node = -1;
      if (!end && !transfer) f.phase = "commit";
      out.push_back(f);
      continue;
    }
    if (f.action == "slow") {
      if (!has_node || !has_factor || has_phase) {
        throw ConfigError(fmt::format(
            "elastic.inject entry '{}': slow takes node= and factor= (and optionally step= and "
            "device=, no phase); use slow:node=N:factor=F[:step=S][:device=D]",
            entry));
      }
      f.phase = "";
      out.push_back(f);
      continue;
    }
    if (!has_node || !has_step) {
      throw ConfigError(
          fmt::format("elastic.inject entry '{}' needs node= and step=; use {}", entry, form));
    }
    if (f.action == "nan") {
      // Poisons gradients: only between the backward pass and the gradient sync.
      if (has_phase && f.phase != "grad_sync") {
        throw ConfigError(fmt::format(
            "elastic.inject entry '{}': nan poisons the gradients before the sync, so its phase "
            "is grad_sync; drop phase={}",
            entry, f.phase));
      }
      f.phase = "grad_sync";
    }
    if (startup_phase(f.phase) && f.action != "kill" && f.action != "hang") {
      throw ConfigError(fmt::format(
          "elastic.inject entry '{}': phase {} (before the {}'s first heartbeat) takes kill or "
          "hang",
          entry, f.phase, f.phase == "startup" ? "worker" : "agent"));
    }
    if (f.phase == "agent_startup") f.device = 0;  // the node's agent, not one of its workers
    out.push_back(f);
  }
  return out;
}

Injector::Injector(std::vector<FaultSpec> specs, int node, int device,
                   c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].node == node && specs[i].device == device) {
      mine_.emplace_back(static_cast<int>(i), specs[i]);
    }
  }
}

double Injector::slowdown(int step) const {
  double factor = 1.0;
  for (const auto& [index, f] : mine_) {
    if (f.action == "slow" && f.step <= step) factor = std::max(factor, f.factor);
  }
  return factor;
}

bool Injector::at(int step, const std::string& phase) {
  bool poison = false;
  for (const auto& [index, f] : mine_) {
    if (f.action == "slow") continue;
    if ((f.step != step && !startup_phase(phase)) || f.phase != phase) continue;
    // kill_coordinator once per process: a standby's fresh store counts from 0 again.
    if (f.action == "kill_coordinator" && !fired_here_.insert(index).second) continue;
    if (store_->add(keys::inject_fired(index), 1) != 1) continue;
    const auto at = fmt::format("{:.3f}", wall_ms());
    store_->set(keys::inject_time(index), std::vector<uint8_t>(at.begin(), at.end()));
    if (f.action == "nan") {
      poison = true;
    } else if (f.action == "kill_coordinator") {
      // The coordinator polls the fired key every few milliseconds and kills itself; this
      // worker's store follows the leadership (failover_store.h), so the key is gone from its
      // view once a standby's fresh store serves it: the transfer resumes then (at most 30 s).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (store_->check({keys::inject_fired(index)}) &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else if (f.action == "kill") {
      ::raise(SIGKILL);
    } else if (f.action == "hang") {
      ::raise(SIGSTOP);  // in phase agent_startup, the agent itself
    } else {
      ::kill(spawner_pid(), SIGKILL);  // the agent; PR_SET_PDEATHSIG then ends this process
      std::this_thread::sleep_for(std::chrono::seconds(10));
    }
  }
  return poison;
}

void poison_gradients(const std::map<int, std::shared_ptr<model::Layer>>& layers) {
  torch::NoGradGuard no_grad;
  for (const auto& [index, layer] : layers) {
    for (const auto& [name, p] : layer->parameter_list()) {
      if (!p.grad().defined() || p.grad().numel() == 0) continue;
      p.mutable_grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
  }
}

}  // namespace bw::elastic
