#include "elastic/remote_nodes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/error.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/store_text.h"
#include "elastic/token.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// A registration counted but never written (its agent died in between) is skipped after this.
constexpr double kUnwrittenMs = 10000;

}  // namespace

RemoteNodes::RemoteNodes(c10::intrusive_ptr<c10d::Store> store, std::string token, int nodes,
                         int devices_per_node)
    : store_(std::move(store)),
      token_(std::move(token)),
      nonce_(random_hex(16)),
      nodes_(nodes),
      devices_(devices_per_node),
      slots_(static_cast<size_t>(nodes)) {
  set_string(*store_, keys::nonce(), nonce_);
}

RemoteNodes::~RemoteNodes() {
  if (ended_) return;
  try {
    end_run("the coordinator stopped", 0);
  } catch (const std::exception&) {
    // The store is gone: the agents find out by themselves.
  }
}

void RemoteNodes::reply(int index, const std::string& json) {
  set_string(*store_, keys::registration_reply(index), json);
}

void RemoteNodes::refuse(int index, const std::string& who, const std::string& why) {
  ++refused_;
  runtime::log(runtime::LogLevel::kWarn, "refused agent {}: {}", who, why);
  reply(index, encode_registration_reply({.ok = false, .message = why}));
}

void RemoteNodes::scan() {
  const int64_t count = store_->add(keys::registrations(), 0);
  while (scanned_ < count) {
    const auto key = keys::registration(scanned_);
    if (!store_->check({key})) {
      if (scan_blocked_since_ms_ == 0) scan_blocked_since_ms_ = now_ms();
      if (now_ms() - scan_blocked_since_ms_ < kUnwrittenMs) return;
      ++scanned_;  // its agent counted itself and never wrote: skip it
      scan_blocked_since_ms_ = 0;
      continue;
    }
    scan_blocked_since_ms_ = 0;
    handle(scanned_, get_string(*store_, key));
    ++scanned_;
  }
}

void RemoteNodes::handle(int index, const std::string& json) {
  ::bw::elastic::Registration reg;  // the message (messages.h), not RemoteNodes::Registration
  try {
    reg = decode_registration(json, keys::registration(index));
  } catch (const ConfigError& e) {
    refuse(index, fmt::format("#{}", index),
           fmt::format("its registration is not one ({})", e.what()));
    return;
  }
  const std::string& name = reg.name;
  const std::string& host = reg.host;
  const std::string& proof = reg.proof;
  const int devices = reg.devices;
  const double launch_ms = reg.launch_ms;
  const std::string who = fmt::format("'{}' ({})", name, host);
  if (proof.empty()) {
    refuse(index, who,
           "it presented no run token; set BW_RUN_TOKEN to the coordinator's run token");
    return;
  }
  if (!same_secret(proof, token_proof(token_, nonce_, index))) {
    refuse(index, who,
           "its run token does not match the coordinator's; set BW_RUN_TOKEN to the run's token");
    return;
  }
  if (name.empty()) {
    refuse(index, who, "it has no node name; give it --node-name");
    return;
  }
  if (!data_digest_.empty()) {
    // The corpus is read on every host (workers read their microbatches locally): each must
    // hold the same tokens, or the pipelines would train on different samples.
    const std::string& error = reg.data_error;
    const std::string& digest = reg.data_digest;
    if (!error.empty()) {
      refuse(index, who,
             fmt::format("it cannot read the corpus: {}; every host needs the run's corpus at "
                         "data.path ('{}')",
                         error, data_path_));
      return;
    }
    if (digest != data_digest_) {
      refuse(
          index, who,
          fmt::format("its corpus at data.path '{}' holds {} but the coordinator's holds {}; "
                      "every host needs the same corpus at data.path (copy the coordinator's)",
                      reg.data_path.empty() ? data_path_ : reg.data_path,
                      digest.empty() ? std::string("nothing it reported") : digest, data_digest_));
      return;
    }
  }
  if (!weights_digest_.empty()) {
    // model.init_from is read on every host (workers build their layers from it locally).
    const std::string path = reg.weights_path.empty() ? weights_path_ : reg.weights_path;
    if (!reg.weights_error.empty()) {
      refuse(index, who,
             fmt::format("it cannot read the Hugging Face folder at model.init_from '{}' on "
                         "host '{}': {}; every host needs a copy of the coordinator's folder at "
                         "that path",
                         path, name, reg.weights_error));
      return;
    }
    if (reg.weights_digest != weights_digest_) {
      refuse(index, who,
             fmt::format("its Hugging Face folder at model.init_from '{}' on host '{}' holds {} "
                         "but the coordinator's holds {}; every host needs the same folder at "
                         "model.init_from (copy the coordinator's)",
                         path, name,
                         reg.weights_digest.empty() ? std::string("nothing it reported")
                                                    : reg.weights_digest,
                         weights_digest_));
      return;
    }
  }
  if (!checkpoint_dir_.empty()) {
    if (!reg.checkpoint_error.empty() || reg.checkpoint_path.empty()) {
      refuse(index, who,
             fmt::format("checkpoint.dir '{}' cannot be written on host '{}': {}; make it "
                         "writable there, or give a checkpoint.dir every host can write",
                         checkpoint_dir_, name,
                         reg.checkpoint_error.empty() ? std::string("it reported nothing")
                                                      : reg.checkpoint_error));
      return;
    }
    if (shared_required_ && !reg.checkpoint_shared) {
      refuse(index, who,
             fmt::format("its checkpoint.dir '{}' is not the filesystem every other host of the "
                         "run shares (the coordinator's probe file is not there); mount the "
                         "shared filesystem there",
                         checkpoint_dir_));
      return;
    }
  }
  if (devices != 0 && devices != devices_) {
    refuse(index, who,
           fmt::format("it offers {} device(s) but every node of this run has {} "
                       "(cluster.devices_per_node); start it with --devices {}",
                       devices, devices_, devices_));
    return;
  }
  if (!assigned_) {
    for (const auto& r : early_) {
      if (r.name == name) {
        refuse(index, who,
               fmt::format("an agent named '{}' ({}) is already registered; give each agent its "
                           "own --node-name",
                           name, r.host));
        return;
      }
    }
    if (static_cast<int>(early_.size()) >= nodes_) {
      refuse(index, who,
             fmt::format("the run has all its {} nodes; start the coordinator with "
                         "--expect-nodes {} to use more",
                         nodes_, nodes_ + 1));
      return;
    }
    early_.push_back({index, name, host, launch_ms, reg.checkpoint_shared});
    runtime::log(runtime::LogLevel::kInfo, "agent {} registered ({} of {})", who, early_.size(),
                 nodes_);
    return;
  }
  // An agent whose workers ran on through a takeover, back as the node it was.
  if (reg.node >= 0 && reg.node < nodes_) {
    auto& s = slots_[reg.node];
    if (s.name == name && s.incarnation == reg.incarnation && !s.running && !s.waiting) {
      s.host = host;
      s.running = true;
      s.launch_ms = launch_ms;
      s.shares_checkpoint_dir = reg.checkpoint_shared;
      reply(
          index,
          encode_registration_reply(
              {.ok = true, .node = reg.node, .incarnation = reg.incarnation, .devices = devices_}));
      runtime::log(runtime::LogLevel::kInfo, "agent {} is back as node {} (incarnation {})", who,
                   reg.node, reg.incarnation);
      return;
    }
  }
  // The run is going: the agent's own slot, else the slot of a lost node nobody waits for.
  int slot = -1;
  for (int n = 0; n < nodes_; ++n) {
    if (slots_[n].name == name) slot = n;
  }
  if (slot < 0) {
    for (int n = 0; n < nodes_ && slot < 0; ++n) {
      if (!slots_[n].running && !slots_[n].waiting) slot = n;
    }
  }
  if (slot < 0) {
    refuse(index, who,
           fmt::format("the run has all its {} nodes and none is lost; start the coordinator "
                       "with --expect-nodes {} to use more",
                       nodes_, nodes_ + 1));
    return;
  }
  auto& s = slots_[slot];
  if (s.waiting) refuse(*s.waiting, who, "a newer registration of the same node replaced it");
  if (s.running) {
    // The agent started again while its node still looked alive: the old one is gone.
    s.running = false;
    set_string(*store_, keys::node_fence(slot, s.incarnation), "1");
    replaced_.emplace_back(slot, 3);
  }
  if (s.name != name) {
    runtime::log(runtime::LogLevel::kInfo, "agent {} takes the place of lost node {} ('{}')", who,
                 slot, s.name);
  }
  s.name = name;
  s.host = host;
  s.waiting = index;
  s.launch_ms = launch_ms;
  s.shares_checkpoint_dir = reg.checkpoint_shared;
  runtime::log(runtime::LogLevel::kInfo, "agent {} registered again for node {}", who, slot);
}

bool RemoteNodes::all_share_checkpoint_dir() const {
  BW_CHECK(assigned_, "all_share_checkpoint_dir before the agents registered");
  return std::all_of(slots_.begin(), slots_.end(),
                     [](const Slot& s) { return s.shares_checkpoint_dir; });
}

void RemoteNodes::wait_for_agents(double timeout_s, const std::vector<std::string>& expected,
                                  const std::function<bool()>& cancelled) {
  const double deadline = now_ms() + timeout_s * 1000;
  while (static_cast<int>(early_.size()) < nodes_) {
    if (cancelled && cancelled()) {
      throw Interrupted(
          fmt::format("stopped on request while waiting for agents ({} of {} "
                      "registered)",
                      early_.size(), nodes_));
    }
    scan();
    if (static_cast<int>(early_.size()) >= nodes_) break;
    if (now_ms() > deadline) {
      std::vector<std::string> have, missing;
      std::set<std::string> names;
      for (const auto& r : early_) {
        have.push_back(fmt::format("'{}' ({})", r.name, r.host));
        names.insert(r.name);
      }
      for (const auto& e : expected) {
        if (names.count(e) == 0) missing.push_back(e);
      }
      const int absent = nodes_ - static_cast<int>(early_.size());
      throw CommError(fmt::format(
          "waited {:.0f} s for {} agents: {} registered ({}); missing {}{}{}; start `breakwater "
          "agent --coordinator ADDR:PORT` there (with the run's BW_RUN_TOKEN), or lower "
          "--expect-nodes",
          timeout_s, nodes_, early_.size(),
          have.empty() ? std::string("none") : fmt::format("{}", fmt::join(have, ", ")), absent,
          missing.empty() ? "" : ": ", fmt::join(missing, ", "),
          refused_ > 0 ? fmt::format(" ({} registration(s) were refused, see above)", refused_)
                       : std::string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::sort(early_.begin(), early_.end(),
            [](const Registration& a, const Registration& b) { return a.name < b.name; });
  for (int n = 0; n < nodes_; ++n) {
    slots_[n].name = early_[n].name;
    slots_[n].host = early_[n].host;
    slots_[n].waiting = early_[n].index;
    slots_[n].launch_ms = early_[n].launch_ms;
    slots_[n].shares_checkpoint_dir = early_[n].shares_checkpoint_dir;
    runtime::log(runtime::LogLevel::kInfo, "node {} is '{}' ({})", n, slots_[n].name,
                 slots_[n].host);
  }
  early_.clear();
  assigned_ = true;
}

void RemoteNodes::adopt(const std::vector<RunStateNode>& nodes) {
  for (const auto& n : nodes) {
    BW_CHECK(n.node >= 0 && n.node < nodes_, "adopted node {} out of range", n.node);
    slots_[n.node].name = n.name;
    slots_[n.node].incarnation = n.incarnation;
  }
  assigned_ = true;
}

std::set<int> RemoteNodes::wait_for_returns(const std::set<int>& expected, double timeout_s,
                                            const std::function<bool()>& cancelled) {
  const double deadline = now_ms() + timeout_s * 1000;
  std::set<int> back;
  for (;;) {
    scan();
    back.clear();
    for (int n : expected) {
      if (slots_[n].running) back.insert(n);
    }
    if (back.size() == expected.size() || now_ms() > deadline) break;
    if (cancelled && cancelled()) {
      throw Interrupted("stopped on request while the agents came back");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int n : expected) {
    if (back.count(n) == 0) {
      runtime::log(runtime::LogLevel::kWarn,
                   "node {} ('{}') did not come back within {:.1f} s of the takeover: lost", n,
                   slots_[n].name, timeout_s);
    }
  }
  return back;
}

void RemoteNodes::start(int node, int incarnation) {
  BW_CHECK(assigned_ && node >= 0 && node < nodes_, "node {} started before the agents registered",
           node);
  auto& s = slots_[node];
  BW_CHECK(s.waiting.has_value(), "node {} has no agent waiting to start", node);
  s.incarnation = incarnation;
  s.running = true;
  RegistrationReply accepted;
  accepted.ok = true;
  accepted.node = node;
  accepted.incarnation = incarnation;
  accepted.devices = devices_;
  reply(*s.waiting, encode_registration_reply(accepted));
  s.waiting.reset();
}

void RemoteNodes::kill(int node) {
  if (node < 0 || node >= nodes_) return;
  auto& s = slots_[node];
  if (!s.running) return;
  s.running = false;
  set_string(*store_, keys::node_fence(node, s.incarnation), "1");
}

std::vector<std::pair<int, int>> RemoteNodes::poll() {
  scan();
  auto out = std::move(replaced_);
  replaced_.clear();
  return out;
}

std::vector<int> RemoteNodes::arrived() {
  std::vector<int> out;
  for (int n = 0; n < nodes_; ++n) {
    if (!slots_[n].running && slots_[n].waiting) out.push_back(n);
  }
  return out;
}

void RemoteNodes::end_run(const std::string& how, double timeout_ms) {
  ended_ = true;
  set_string(*store_, keys::run_over(), how);
  for (const auto& r : early_) refuse(r.index, r.name, "the run is over");
  early_.clear();
  for (int n = 0; n < nodes_; ++n) {
    if (slots_[n].waiting) {
      refuse(*slots_[n].waiting, slots_[n].name, "the run is over");
      slots_[n].waiting.reset();
    }
  }
  int running = 0;
  for (const auto& s : slots_) running += s.running ? 1 : 0;
  const double deadline = now_ms() + timeout_ms;
  while (store_->add(keys::agents_gone(), 0) < running && now_ms() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace bw::elastic
