#include "elastic/supervisor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/error.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/store_text.h"
#include "model/gpt.h"
#include "plan/reconfigure.h"
#include "runtime/checkpointing.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace fs = std::filesystem;
namespace {

bool exists(c10d::Store& store, const std::string& key) { return store.check({key}); }
int64_t counter(c10d::Store& store, const std::string& key) { return store.add(key, 0); }

// The newest complete checkpoint under out_dir: (steps done, sidecar), or (-1, "").
std::pair<int, std::string> last_checkpoint(const std::string& out_dir) {
  int steps = -1;
  const auto path = runtime::latest_checkpoint(out_dir, &steps);
  if (path.empty()) return {-1, ""};
  return {steps, path};
}

}  // namespace

double SystemClock::now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(system_clock::now().time_since_epoch()).count();
}

std::string samples_digest(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  uint64_t h = 1469598103934665603ULL;
  for (int64_t id : ids) {
    for (int b = 0; b < 8; ++b)
      h = (h ^ ((static_cast<uint64_t>(id) >> (8 * b)) & 0xff)) * 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

Supervisor::Supervisor(c10::intrusive_ptr<c10d::Store> store, Clock& clock, Nodes& nodes,
                       PlanContext context, RunPlan first, SupervisorOptions options)
    : store_(std::move(store)),
      clock_(clock),
      nodes_(nodes),
      ctx_(std::move(context)),
      run_(std::move(first)),
      opt_(options) {
  skips_ = {opt_.skipped, opt_.consecutive_skips};
}

SkipCount Supervisor::skips_at(int steps_done) const {
  auto it = checkpoint_skips_.find(steps_done);
  return it != checkpoint_skips_.end() ? it->second : skips_;
}

std::vector<int> Supervisor::workers_of(int node) const {
  std::vector<int> out;
  for (int d = 0; d < ctx_.devices_per_node; ++d) out.push_back(node * ctx_.devices_per_node + d);
  return out;
}

std::string Supervisor::plan_string(const RunPlan& run) const {
  std::vector<std::string> parts;
  for (const auto& p : run.plan.pipelines) {
    std::vector<int> nodes;
    for (auto n : p.nodes) nodes.push_back(n.value());
    parts.push_back(fmt::format("[{}]x{}", fmt::join(nodes, ","), p.microbatches));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

void Supervisor::start() {
  const double now = clock_.now_ms();
  for (int n = 0; n < ctx_.cluster.num_nodes; ++n) {
    node_states_[n] = NodeState{};
    node_states_[n].in_plan = true;
  }
  for (int n = 0; n < ctx_.cluster.num_nodes; ++n) {
    for (int w : workers_of(n)) set_string(*store_, keys::worker_generation(w, 0), "0");
  }
  publish(run_, opt_.first_step, {});
  for (int n = 0; n < ctx_.cluster.num_nodes; ++n) start_node(n, 0);
  last_commit_ms_ = now;
}

std::vector<NodeView> Supervisor::node_views() const {
  std::vector<NodeView> out;
  for (const auto& [node, st] : node_states_) {
    out.push_back(
        {.node = node, .incarnation = st.incarnation, .live = st.live, .in_plan = st.in_plan});
  }
  return out;
}

void Supervisor::adopt(const Adoption& a) {
  const double now = clock_.now_ms();
  run_ = a.run;
  g_ = run_.layout.generation;
  skips_ = a.skips;
  committed_ = a.first_step;
  // The generation as its workers read it, published again: workers of g - 1 that had not read
  // its start yet (the old leader died while forming g) find it here.
  const nlohmann::json layout = {{"layout", runtime::to_json(run_.layout)},
                                 {"workers", run_.workers}};
  set_string(*store_, keys::layout(g_), layout.dump());
  set_string(*store_, keys::start(g_), a.start);
  if (g_ > 0) set_string(*store_, keys::next(g_ - 1), encode_next({.generation = g_}));
  // The decisions that stand, published again; the steps they committed counted in order.
  bool counting = true;
  for (const auto& [step, text] : a.decisions) {
    const auto key = keys::decision(g_, step);
    set_string(*store_, key, text);
    if (!counting || step != committed_) {
      counting = false;
      continue;
    }
    const Decision d = decode_decision(text, key);
    if (d == Decision::kAbort) {
      counting = false;
      continue;
    }
    if (d == Decision::kSkip) {
      skips_.total += 1;
      skips_.consecutive += 1;
    } else {
      skips_.consecutive = 0;
    }
    ++committed_;
    if (d == Decision::kLast) counting = false;
  }
  std::vector<int> lost;
  for (const auto& n : a.nodes) {
    auto& st = node_states_[n.node];
    st.incarnation = n.incarnation;
    st.in_plan = n.in_plan;
    st.live = n.live && a.back.count(n.node) > 0;
    st.started_ms = now;
    st.agent_up_ms = now;  // running all along: no start-up allowance beyond the timeout
    st.lost_at_ms = now;
    node_beats_[n.node] = Beat{counter(*store_, keys::node_heartbeat(n.node)), now, true};
    for (int w : workers_of(n.node)) {
      worker_beats_[w] = Beat{counter(*store_, keys::worker_heartbeat(w)), now, true};
    }
    if (n.in_plan && n.live && !st.live) {
      lost.push_back(n.node);
      failed_.insert(n.node);
    }
  }
  last_commit_ms_ = now;
  phase_ = Phase::kRun;
  if (on_plan) on_plan(run_);
  start_recovery("coordinator", a.fail_ms, lost);
  // Detection is part of the campaign (the standby learns the leader is gone by winning).
  recovery_->campaign_ms = a.led_ms - a.fail_ms;
  recovery_->reconcile_ms = a.reconciled_ms - a.led_ms;
  recovery_->detect_ms = a.reconciled_ms;
}

void Supervisor::start_node(int node, int incarnation) {
  auto& st = node_states_[node];
  const double now = clock_.now_ms();
  node_beats_[node] = Beat{counter(*store_, keys::node_heartbeat(node)), now, true};
  for (int w : workers_of(node))
    worker_beats_[w] = Beat{counter(*store_, keys::worker_heartbeat(w)), now, true};
  st.started_ms = now;
  st.agent_up_ms = 0;
  nodes_.start(node, incarnation);
}

double Supervisor::worker_launch_ms(const NodeState& node) const {
  return std::max(node.agent_up_ms - node.started_ms, opt_.worker_startup_floor_ms);
}

double Supervisor::agent_startup_allowance_ms() const {
  return std::max(opt_.agent_startup_ms, 2 * longest_agent_startup_ms_);
}

void Supervisor::publish(const RunPlan& run, int first_step, const std::vector<Copy>& copies) {
  run_ = run;
  g_ = run.layout.generation;
  nlohmann::json layout = {{"layout", runtime::to_json(run.layout)}, {"workers", run.workers}};
  Start start;
  start.first_step = first_step;
  start.skipped_steps = static_cast<int>(skips_.total);
  // Until a step is decided no worker has loaded train.resume for sure (a failure may come
  // while generation 0 forms): load it again.
  start.resume = first_step == opt_.first_step ? opt_.resume : std::string();
  for (const auto& [layer, from, to, begin, end] : copies)
    start.copies.push_back({layer, from, to, std::make_pair(begin, end)});
  const std::string start_text = encode_start(start);
  if (on_publish) on_publish(first_step, start_text, skips_);
  set_string(*store_, keys::layout(g_), layout.dump());
  set_string(*store_, keys::start(g_), start_text);
  gen_committed_any_ = false;
  pipeline_ms_.clear();
  left_since_ms_ = 0;
  committed_ = first_step;
  last_commit_ms_ = clock_.now_ms();
  phase_ = first_step >= opt_.steps ? Phase::kFinish : Phase::kRun;
  if (phase_ == Phase::kFinish) pending_checkpoints_[opt_.steps] = {g_, run_};
  finish_deadline_ms_ = last_commit_ms_ + opt_.step_timeout_ms;
  if (on_plan) on_plan(run_);
}

void Supervisor::detect() {
  const double now = clock_.now_ms();
  // Agents that exited, and exit reports (an agent reports a worker's exit before it exits).
  std::vector<std::pair<int, int>> exited = nodes_.poll();
  const int64_t reports = counter(*store_, keys::exits());
  auto check_report = [&](int node) {
    const auto& st = node_states_[node];
    const auto key = keys::node_exit(node, st.incarnation);
    if (!exists(*store_, key)) return false;
    const auto report = decode_exit_report(get_string(*store_, key), key);
    const int worker = report.worker, status = report.status;
    if (status == 0 && phase_ == Phase::kSave) {
      ended_cleanly(node);
      return true;
    }
    if (status == 1 || status == 2) {
      fail_run(worker, status);
      return true;
    }
    node_lost(node, fmt::format("worker {} exited with status {}", worker, status), 0);
    return true;
  };
  if (reports != exits_seen_) {
    exits_seen_ = reports;
    for (auto& [node, st] : node_states_) {
      if (st.live && check_report(node) && phase_ == Phase::kDone) return;
    }
  }
  for (const auto& [node, status] : exited) {
    if (!node_states_[node].live) continue;
    if (check_report(node)) {
      if (phase_ == Phase::kDone) return;
      continue;
    }
    if (status == 0 && phase_ == Phase::kSave) {
      ended_cleanly(node);
      continue;
    }
    node_lost(node, fmt::format("its agent exited with status {}", status), 0);
  }
  if (now - last_beat_check_ms_ < 100) return;
  last_beat_check_ms_ = now;
  // Whether a beat is overdue (its first or a later one).
  auto stale = [&](Beat& b, int64_t count, double first_beat_deadline_ms) {
    if (count != b.count) {
      // Counters outlive a node's restart: start_node() read the baseline just before the
      // process started, so a change after it is the new process's own beat.
      if (b.count >= 0) b.starting = false;
      b.count = count;
      b.since_ms = now;
      return false;
    }
    return b.starting ? now > first_beat_deadline_ms : now - b.since_ms > opt_.heartbeat_timeout_ms;
  };
  const double allowance_ms = agent_startup_allowance_ms();
  for (auto& [node, st] : node_states_) {
    if (!st.live) continue;
    Beat& agent = node_beats_[node];
    if (stale(agent, counter(*store_, keys::node_heartbeat(node)),
              st.started_ms + opt_.heartbeat_timeout_ms + allowance_ms)) {
      const std::string basis =
          allowance_ms > opt_.agent_startup_ms
              ? fmt::format("twice the longest agent start-up of this run, {:.1f} s",
                            longest_agent_startup_ms_ / 1000)
              : opt_.agent_startup_basis;
      node_lost(
          node,
          agent.starting
              ? fmt::format("the agent of node {} sent no first heartbeat within {:.1f} s of its "
                            "{} (hung while starting up; allowed: elastic.heartbeat_timeout_s = "
                            "{:.1f} s + a start-up allowance of {:.1f} s{}{})",
                            node, (now - st.started_ms) / 1000,
                            opt_.agents_register ? "accepted registration" : "start",
                            opt_.heartbeat_timeout_ms / 1000, allowance_ms / 1000,
                            basis.empty() ? "" : ", ", basis)
              : fmt::format(
                    "its agent sent no heartbeat for {:.1f} s (elastic.heartbeat_timeout_s)",
                    opt_.heartbeat_timeout_ms / 1000),
          0);
      continue;
    }
    if (!agent.starting && st.agent_up_ms == 0) {
      st.agent_up_ms = now;
      st.launch_ms = nodes_.launch_ms(node);
      longest_agent_startup_ms_ = std::max(longest_agent_startup_ms_, now - st.started_ms);
      runtime::log(runtime::LogLevel::kDebug, "node {}: agent up {:.0f} ms after its start", node,
                   now - st.started_ms);
    }
    for (int w : workers_of(node)) {
      Beat& beat = worker_beats_[w];
      if (stale(beat, counter(*store_, keys::worker_heartbeat(w)),
                worker_startup_deadline_ms(st))) {
        node_lost(node,
                  beat.starting
                      ? fmt::format("worker {} sent no first heartbeat within {:.1f} s of its "
                                    "launch (hung while starting up; allowed: "
                                    "elastic.heartbeat_timeout_s = {:.1f} s + twice a start-up "
                                    "of {:.1f} s: its agent's own, or the coordinator's measure if "
                                    "longer)",
                                    w, (now - st.agent_up_ms) / 1000,
                                    opt_.heartbeat_timeout_ms / 1000, worker_launch_ms(st) / 1000)
                      : fmt::format("worker {} sent no heartbeat for {:.1f} s (stopped or hung; "
                                    "elastic.heartbeat_timeout_s)",
                                    w, opt_.heartbeat_timeout_ms / 1000),
                  0);
        break;
      }
    }
  }
}

// A worker beats from its first moments: its heartbeat thread starts right after it has
// connected to the store and read the config, before it builds its model, opens its data or
// joins any Gloo group (which may legitimately take long). Before that it only execs and loads
// LibTorch, exactly what its agent (the same binary on the same machine) did just before: so a
// worker is due to beat within elastic.heartbeat_timeout_s plus twice its agent's measured
// start-up time after its agent came up (the agent spawns it right then). Until the agent is up
// only the agent's own deadline applies (a node whose agent misses it is lost as a whole).
double Supervisor::worker_startup_deadline_ms(const NodeState& node) const {
  if (node.agent_up_ms == 0) return std::numeric_limits<double>::infinity();
  // A remote agent was started by someone else, long before: its own measure counts too.
  const double launch_ms = std::max(worker_launch_ms(node), node.launch_ms);
  return node.agent_up_ms + opt_.heartbeat_timeout_ms + 2 * launch_ms;
}

void Supervisor::fail_run(int worker, int status) {
  std::string message = fmt::format("worker {} exited with status {}", worker, status);
  bool config = status == 2;
  if (exists(*store_, keys::worker_error(worker))) {
    const auto error = decode_worker_error(get_string(*store_, keys::worker_error(worker)),
                                           keys::worker_error(worker));
    message = error.message;
    config = error.config_error;
  }
  for (auto& [node, st] : node_states_) {
    nodes_.kill(node);
    st.live = false;
  }
  set_string(*store_, keys::abort(g_), "1");
  outcome_.kind = Outcome::kFailed;
  outcome_.message = message;
  outcome_.config_error = config;
  if (opt_.async_checkpoints) {
    // Checkpoints whose every shard was acknowledged are committed before the run ends (one
    // that fills the disk must not cost the one before it); the rest are dropped.
    try {
      settle_checkpoints(true);
    } catch (const std::exception& e) {
      runtime::log(runtime::LogLevel::kWarn, "while the run ended: {}", e.what());
    }
  }
  phase_ = Phase::kDone;
}

// After the shutdown that asks for the stop's checkpoint, a worker exits 0 only once its shards
// are durable and acknowledged (it drains before it exits), so such an exit is the end of its
// part, not a loss; one that exits 0 without writing shows as the save's deadline.
void Supervisor::ended_cleanly(int node) {
  auto& st = node_states_[node];
  st.live = false;
  st.joining = false;
  joiners_.erase(node);
}

void Supervisor::node_lost(int node, const std::string& cause, double fail_ms) {
  auto& st = node_states_[node];
  if (!st.live) return;
  const double now = clock_.now_ms();
  st.live = false;
  st.joining = false;
  st.lost_at_ms = now;
  nodes_.kill(node);
  joiners_.erase(node);
  // The fault's own time when it was injected (the worker recorded it before the signal).
  if (fail_ms <= 0) {
    fail_ms = now;
    const auto faults = parse_faults(ctx_.config.elastic.inject);
    for (size_t i = 0; i < faults.size(); ++i) {
      if (faults[i].node != node || !exists(*store_, keys::inject_time(static_cast<int>(i)))) {
        continue;
      }
      const double at = std::stod(get_string(*store_, keys::inject_time(static_cast<int>(i))));
      if (at <= now && now - at < 60000 && used_faults_.insert(static_cast<int>(i)).second) {
        fail_ms = at;
      }
    }
  }
  Event e;
  e.kind = "node_lost";
  e.step = committed_;
  e.nodes = {node};
  e.generation = g_;
  e.cause = cause;
  e.detect_ms = now - fail_ms;
  runtime::log(runtime::LogLevel::kInfo, "node {} lost at step {}: {}", node, committed_, cause);
  if (on_event) on_event(e);
  if (opt_.async_checkpoints) drop_checkpoints_of(node);
  if (!st.in_plan) return;  // a joining node that died before it joined
  st.in_plan = false;
  failed_.insert(node);
  if (phase_ == Phase::kRun || phase_ == Phase::kFinish) {
    start_recovery("node_lost", fail_ms, {});
  } else if (phase_ == Phase::kSave) {
    outcome_.kind = Outcome::kStopped;
    outcome_.message +=
        fmt::format("; node {} was lost while the checkpoint was being written", node);
    if (on_checkpoint_dropped)
      on_checkpoint_dropped(keys::final_shards(g_), static_cast<int>(save_writers_.size()));
    phase_ = Phase::kDone;
  }
  if (recovery_) recovery_->nodes.assign(failed_.begin(), failed_.end());
}

void Supervisor::start_recovery(const std::string& kind, double fail_ms, std::vector<int> nodes) {
  // A takeover that has not committed a step yet stays the recovery being timed: a failure
  // during it adds its nodes (one `recovered` event, from the old coordinator's death).
  std::optional<Recovery> takeover;
  if (pending_ && pending_->kind == "coordinator") takeover = pending_;
  if (recovery_ && recovery_->kind == "coordinator") takeover = recovery_;
  if (takeover && kind != "coordinator") {
    recovery_ = *takeover;
    recovery_->nodes = std::move(nodes);
    recovery_->step = committed_;
    pending_.reset();
    begin_quiesce();
    return;
  }
  recovery_ = Recovery{};
  recovery_->kind = kind;
  recovery_->nodes = std::move(nodes);
  recovery_->fail_ms = fail_ms;
  recovery_->detect_ms = clock_.now_ms();
  recovery_->step = committed_;
  recovery_->old_plan = plan_string(run_);
  begin_quiesce();
}

void Supervisor::write_decision(const std::string& text) {
  const auto key = keys::decision(g_, committed_);
  const std::string stands = on_decide ? on_decide(key, text) : text;
  // One leader per run instance writes each key once: another decision there is a bug.
  BW_CHECK(stands == text, "decision key '{}' already holds '{}', not '{}'", key, stands, text);
  set_string(*store_, key, stands);
}

void Supervisor::begin_quiesce() {
  if (!exists(*store_, keys::decision(g_, committed_))) {
    write_decision(encode_decision(Decision::kAbort));
  }
  set_string(*store_, keys::abort(g_), "1");
  phase_ = Phase::kQuiesce;
  quiesce_deadline_ms_ = clock_.now_ms() + opt_.stop_grace_ms;
}

std::vector<int> Supervisor::live_workers_in_generation() const {
  std::vector<int> out;
  for (int w : run_.workers) {
    const int node = w / ctx_.devices_per_node;
    if (node_states_.at(node).live && failed_.count(node) == 0) out.push_back(w);
  }
  return out;
}

void Supervisor::maybe_start_joins() {
  const double now = clock_.now_ms();
  std::set<int> arrived;
  for (int n : nodes_.arrived()) arrived.insert(n);
  for (auto& [node, st] : node_states_) {
    const bool due = opt_.rejoin_after_ms > 0 && now - st.lost_at_ms >= opt_.rejoin_after_ms;
    if (!st.live && failed_.count(node) == 0 && (due || arrived.count(node) > 0)) {
      st.incarnation += 1;
      st.live = true;
      st.joining = true;
      runtime::log(runtime::LogLevel::kInfo, "starting node {} again (incarnation {})", node,
                   st.incarnation);
      start_node(node, st.incarnation);
    }
    if (st.live && st.joining) {
      std::vector<std::string> up;
      for (int w : workers_of(node)) up.push_back(keys::worker_up(w, st.incarnation));
      if (store_->check(up)) {
        st.joining = false;
        joiners_.insert(node);
      }
    }
  }
}

void Supervisor::report_recovery(int step, double now) {
  Event e;
  e.kind = "recovered";
  e.step = step;
  e.nodes = pending_->nodes;
  e.generation = g_;
  e.cause = pending_->kind;
  e.old_plan = pending_->old_plan;
  e.new_plan = plan_string(run_);
  e.detect_ms = pending_->detect_ms - pending_->fail_ms - pending_->reconcile_ms;
  e.campaign_ms = pending_->campaign_ms;
  e.reconcile_ms = pending_->reconcile_ms;
  e.quiesce_ms = pending_->quiesced_ms - pending_->detect_ms;
  e.plan_ms = pending_->published_ms - pending_->quiesced_ms;
  for (int r = 0; r < run_.layout.world_size(); ++r) {
    if (!exists(*store_, keys::joined(g_, r))) continue;
    const auto j = decode_joined(get_string(*store_, keys::joined(g_, r)), keys::joined(g_, r));
    e.regroup_ms = std::max(e.regroup_ms, j.regroup_ms);
    e.transfer_ms = std::max(e.transfer_ms, j.transfer_ms);
    e.transfer_bytes += j.transfer_bytes;
  }
  e.recovery_ms = now - pending_->fail_ms;
  e.replay_ms = std::max(0.0, now - pending_->published_ms - e.regroup_ms - e.transfer_ms);
  if (on_event) on_event(e);
  pending_.reset();
}

void Supervisor::poll_run() {
  maybe_start_joins();
  const int world = run_.layout.world_size();
  const double now = clock_.now_ms();
  if (counter(*store_, keys::num_ready(g_, committed_)) == world) {
    StepRecord rec;
    rec.step = committed_;
    rec.generation = g_;
    rec.world = world;
    std::vector<int64_t> ids;
    for (int r = 0; r < world; ++r) {
      const auto key = keys::ready(g_, committed_, r);
      rec.reports.push_back(decode_step_report(get_string(*store_, key), key));
      store_->deleteKey(key);
      ids.insert(ids.end(), rec.reports.back().samples.begin(), rec.reports.back().samples.end());
    }
    // The validation loss measured at the start of this step belongs to the previous one.
    if (held_ && held_->step + 1 == committed_) {
      const auto& first = rec.reports.front();
      BW_CHECK(first.val_loss.has_value(),
               "step {} was due a validation loss that rank 0 did "
               "not report",
               committed_);
      release_held(first.val_loss, first.eval_ms);
    }
    const double loss = rec.reports.front().loss;  // every rank reports the global loss
    const double norm = rec.reports.front().grad_norm;
    const auto& train = ctx_.config.train;
    const SkipCount before = skips_;
    const StepVerdict verdict = judge_step(train, loss, norm, skips_);  // nonfinite.h
    if (verdict == StepVerdict::kStop) {
      // Never commit a non-finite update: the step is aborted, so no weights turn NaN.
      write_decision(encode_decision(Decision::kAbort));
      set_string(*store_, keys::abort(g_), "1");
      set_string(*store_, keys::next(g_), encode_next({.shutdown = true}));
      outcome_.kind = Outcome::kFailed;
      outcome_.config_error = true;
      outcome_.message = divergence_message(train, committed_, loss, norm, before,
                                            runtime::checkpoint_root(ctx_.config));
      phase_ = Phase::kDone;
      return;
    }
    // A non-finite step under train.nonfinite = "skip": every rank skips its update alike; a
    // join or a requested stop waits for the next step boundary.
    const bool skip = verdict == StepVerdict::kSkip;
    const bool last_step = committed_ + 1 == opt_.steps;
    const bool halt = stop_requested_ && !last_step && !skip;
    std::optional<Split> rebalance;
    if (!skip && !last_step && !halt && joiners_.empty()) rebalance = judge_rebalance(rec);
    const bool join = (!joiners_.empty() || halt || rebalance) && !last_step && !skip;
    // A checkpoint after this step: every checkpoint_every steps, the last one, or when
    // checkpoint.every_s has passed since the last (timed from the run's first commit).
    bool checkpoint = runtime::checkpoint_due(train, committed_);
    if (opt_.checkpoint_every_ms > 0) {
      if (last_checkpoint_ms_ < 0) last_checkpoint_ms_ = now;
      checkpoint = checkpoint || now - last_checkpoint_ms_ >= opt_.checkpoint_every_ms;
      if (checkpoint) last_checkpoint_ms_ = now;
    }
    write_decision(encode_decision(skip   ? Decision::kSkip
                                   : join ? Decision::kLast
                                          : Decision::kCommit,
                                   checkpoint));
    rec.skipped = skip;
    rec.skipped_total = skips_.total;
    rec.loss = rec.reports.front().loss;
    rec.grad_norm = rec.reports.front().grad_norm;
    rec.lr = rec.reports.front().lr;
    rec.samples = samples_digest(ids);
    rec.step_s = (now - last_commit_ms_) / 1000;
    last_commit_ms_ = now;
    ++committed_;
    if (checkpoint) {
      pending_checkpoints_[committed_] = {g_, run_};
      checkpoint_skips_[committed_] = skips_;
    }
    if (pending_ && !gen_committed_any_) report_recovery(rec.step, now);
    gen_committed_any_ = true;
    record(std::move(rec));
    if (halt) {
      stopping_ = true;
      begin_quiesce();
      return;
    }
    if (join && rebalance) {
      std::vector<int> before;
      for (const auto& p : run_.plan.pipelines) before.push_back(p.microbatches);
      Event e;
      e.kind = "rebalance";
      e.step = committed_;
      e.generation = g_;
      std::vector<std::string> times;
      for (double ms : pipeline_means_ms_) times.push_back(fmt::format("{:.0f}", ms));
      e.cause = fmt::format(
          "pipelines took {} ms a step with microbatches [{}]; [{}] predicts {:.0f} ms for the "
          "slowest ({:.0f}% faster)",
          fmt::join(times, "/"), fmt::join(before, ","), fmt::join(rebalance->microbatches, ","),
          rebalance->predicted_ms, 100.0 * rebalance->gain());
      if (on_event) on_event(e);
      rebalance_ = rebalance;
      start_recovery("rebalance", now, {});
      return;
    }
    if (join) {
      start_recovery("node_joined", now, {joiners_.begin(), joiners_.end()});
      return;
    }
    if (committed_ == opt_.steps) {
      phase_ = Phase::kFinish;
      finish_deadline_ms_ = now + opt_.step_timeout_ms;
    }
    regroups_ = 0;
  } else if (left_since_ms_ == 0 && counter(*store_, keys::num_left(g_)) > 0) {
    left_since_ms_ = now;
  } else if (left_since_ms_ > 0 && now - left_since_ms_ > opt_.stop_grace_ms) {
    // A rank gave up on the generation and no failure explains it: re-form the generation on
    // the same nodes (a transient fault), a few times at most.
    std::string why = "no message";
    for (int r = 0; r < world; ++r) {
      if (exists(*store_, keys::left(g_, r))) {
        why = fmt::format("rank {}: {}", r, get_string(*store_, keys::left(g_, r)));
        break;
      }
    }
    if (++regroups_ > 3) {
      for (auto& [node, st] : node_states_) nodes_.kill(node);
      set_string(*store_, keys::abort(g_), "1");
      outcome_.kind = Outcome::kStopped;
      outcome_.message =
          fmt::format("generation {} failed {} times in a row with every node alive ({}); stopped",
                      g_, regroups_, why);
      phase_ = Phase::kDone;
      return;
    }
    runtime::log(runtime::LogLevel::kWarn, "re-forming generation {} on the same nodes: {}", g_,
                 why);
    start_recovery("regroup", left_since_ms_, {});
    return;
  } else if (now - last_commit_ms_ > opt_.step_timeout_ms) {
    // Nobody died, yet the step is not done: the first rank that is not ready counts as hung.
    for (int r = 0; r < world; ++r) {
      if (!exists(*store_, keys::ready(g_, committed_, r))) {
        node_lost(run_.workers[r] / ctx_.devices_per_node,
                  fmt::format("rank {} did not finish step {} within elastic.step_timeout_s = {} s",
                              r, committed_, opt_.step_timeout_ms / 1000),
                  0);
        break;
      }
    }
  }
  settle_checkpoints(false);
}

bool Supervisor::shards_arrived(int steps_done, const PendingCheckpoint& p) const {
  return counter(*store_, keys::num_saved(p.g, steps_done - 1)) == p.run.layout.world_size();
}

void Supervisor::settle_checkpoints(bool ending) {
  for (auto it = pending_checkpoints_.begin(); it != pending_checkpoints_.end();) {
    const int steps_done = it->first;
    const auto& p = it->second;
    const int shards = p.run.layout.world_size();
    const auto prefix = keys::checkpoint_shards(p.g, steps_done);
    if (shards_arrived(steps_done, p)) {
      if (on_checkpoint) {
        const auto path = on_checkpoint(steps_done, shards, p.run, prefix);
        if (steps_done == committed_) outcome_.checkpoint = path;
      }
    } else if (ending) {
      if (on_checkpoint_dropped) on_checkpoint_dropped(prefix, shards);
      runtime::log(runtime::LogLevel::kWarn,
                   "checkpoint at step {} dropped: its shards were not all durable when the run "
                   "stopped",
                   steps_done);
    } else {
      ++it;
      continue;
    }
    it = pending_checkpoints_.erase(it);
  }
}

void Supervisor::drop_checkpoints_of(int node) {
  for (auto it = pending_checkpoints_.begin(); it != pending_checkpoints_.end();) {
    const int steps_done = it->first;
    const auto& p = it->second;
    const auto prefix = keys::checkpoint_shards(p.g, steps_done);
    bool missing = false;
    for (int r = 0; r < p.run.layout.world_size() && !missing; ++r) {
      missing = p.run.workers[r] / ctx_.devices_per_node == node &&
                !exists(*store_, keys::checkpoint_ack(prefix, r));
    }
    if (!missing || shards_arrived(steps_done, p)) {
      ++it;
      continue;
    }
    if (on_checkpoint_dropped) on_checkpoint_dropped(prefix, p.run.layout.world_size());
    runtime::log(runtime::LogLevel::kWarn,
                 "checkpoint at step {} dropped: node {} was lost before its shard was durable",
                 steps_done, node);
    it = pending_checkpoints_.erase(it);
  }
}

void Supervisor::poll_quiesce() {
  const auto expected = live_workers_in_generation();
  std::vector<std::string> names;
  for (int w : expected) names.push_back(keys::stopped(g_, w));
  const double now = clock_.now_ms();
  if (names.empty() || store_->check(names)) {
    holdings_.clear();
    for (int w : expected) {
      const auto stopped =
          decode_stopped(get_string(*store_, keys::stopped(g_, w)), keys::stopped(g_, w));
      const int64_t steps_done = stopped.steps_done;
      BW_CHECK(steps_done == committed_,
               "worker {} left generation {} having applied {} steps, but {} are committed", w, g_,
               steps_done, committed_);
      auto& held = holdings_[w];
      if (!stopped.layers) {
        for (const auto& [layer, range] : stopped.ranges) held[layer] = range;
      } else {
        for (int l : *stopped.layers) held[l] = {0, model::num_parameters(ctx_.model, l)};
      }
    }
    // A checkpoint whose shards all made it is complete. Shards written in the background may
    // still be on their way from live workers (they are acknowledged in a later generation; a
    // writer lost first dropped them, drop_checkpoints_of); shards uploaded through the store
    // inside the step that did not arrive never will.
    settle_checkpoints(/*ending=*/!opt_.async_checkpoints);
    if (recovery_) recovery_->quiesced_ms = now;
    if (stopping_) {
      stop("stopped on request (a signal)");
      if (outcome_.kind == Outcome::kStopped) outcome_.kind = Outcome::kInterrupted;
      return;
    }
    replan();
    return;
  }
  if (now > quiesce_deadline_ms_) {
    for (int w : expected) {
      if (!exists(*store_, keys::stopped(g_, w))) {
        node_lost(w / ctx_.devices_per_node,
                  fmt::format("worker {} did not stop within {:.1f} s of the abort", w,
                              opt_.stop_grace_ms / 1000),
                  0);
      }
    }
  }
}

void Supervisor::replan() {
  std::vector<NodeId> failed, joining;
  for (int n : failed_) failed.push_back(NodeId(n));
  for (int n : joiners_) joining.push_back(NodeId(n));
  plan::Plan next = run_.plan;
  RunPlan next_run;
  try {
    if (!failed.empty()) next = plan::reconfigure(next, ctx_.templates, failed, ctx_.cluster).plan;
    if (!joining.empty()) next = plan::join(next, ctx_.templates, joining, ctx_.cluster).plan;
    if (rebalance_ && failed.empty() && joining.empty() &&
        rebalance_->microbatches.size() == next.pipelines.size()) {
      // The same pipelines on the same nodes, with the batch split as measured (rebalance.h).
      for (size_t p = 0; p < next.pipelines.size(); ++p) {
        auto& pipe = next.pipelines[p];
        pipe.microbatches = rebalance_->microbatches[p];
        pipe.iteration_ms = pipe.tmpl.iteration_ms(pipe.microbatches);
      }
    }
    rebalance_.reset();  // a failure in the meantime re-plans from the planner's split
    if (!failed.empty() || !joining.empty()) rebalance_judge_.forget();  // other pipelines
    next.generation = g_ + 1;
    next_run = layout_plan(ctx_, next);
  } catch (const ConfigError& e) {
    stop(e.what());
    return;
  }
  // Copies: each range of a layer a rank of g+1 needs and its worker does not hold, from
  // survivors that hold it, spreading the sources over the holders.
  std::vector<Copy> copies;
  std::map<int, size_t> turn;
  for (int r = 0; r < next_run.layout.world_size(); ++r) {
    const int w = next_run.workers[r];
    const auto& have = holdings_[w];
    for (int l : next_run.layout.layers_of(r)) {
      const int64_t n = model::num_parameters(ctx_.model, l);
      const auto want = next_run.layout.segmented(l) ? next_run.layout.shard_range(r, n)
                                                     : std::make_pair(int64_t{0}, n);
      // What is missing: want minus the range held (at most two intervals).
      std::vector<std::pair<int64_t, int64_t>> missing{want};
      if (auto it = have.find(l); it != have.end()) {
        const auto [hb, he] = it->second;
        missing.clear();
        if (want.first < std::min(hb, want.second))
          missing.emplace_back(want.first, std::min(hb, want.second));
        if (std::max(he, want.first) < want.second)
          missing.emplace_back(std::max(he, want.first), want.second);
      }
      for (auto [pos, end] : missing) {
        while (pos < end) {
          std::vector<std::pair<int, int64_t>> holders;  // worker, end of its range
          for (const auto& [hw, held] : holdings_) {
            auto it = held.find(l);
            if (hw != w && it != held.end() && it->second.first <= pos && pos < it->second.second)
              holders.emplace_back(hw, it->second.second);
          }
          if (holders.empty()) {
            stop(fmt::format("no surviving worker holds layer {} (values {} on)", l, pos));
            return;
          }
          const auto& [from, held_end] = holders[turn[l]++ % holders.size()];
          const int64_t to = std::min(end, held_end);
          copies.emplace_back(l, from, w, pos, to);
          pos = to;
        }
      }
    }
  }
  for (int n : joiners_) {
    node_states_[n].in_plan = true;
    for (int w : workers_of(n)) {
      set_string(*store_, keys::worker_generation(w, node_states_[n].incarnation),
                 std::to_string(g_ + 1));
    }
  }
  const int old_g = g_;
  const int first_step = committed_;
  publish(next_run, first_step, copies);
  set_string(*store_, keys::next(old_g), encode_next({.generation = g_}));
  if (recovery_) {
    recovery_->published_ms = clock_.now_ms();
    pending_ = recovery_;
    recovery_.reset();
  }
  failed_.clear();
  joiners_.clear();
  holdings_.clear();
}

std::optional<Split> Supervisor::judge_rebalance(const StepRecord& rec) {
  if (!opt_.rebalance || run_.plan.pipelines.size() < 2 || !gen_committed_any_) return {};
  // A pipeline's time: its slowest rank's action list (forward, backward, p2p; the gradient
  // all-reduce that every pipeline then waits in is left out).
  std::vector<double> ms(run_.plan.pipelines.size(), 0.0);
  for (const auto& r : rec.reports) {
    if (r.rank < 0 || r.rank >= run_.layout.world_size()) continue;
    const int p = run_.layout.locate(r.rank).first;
    if (p < static_cast<int>(ms.size())) ms[p] = std::max(ms[p], r.exec_ms);
  }
  pipeline_ms_.push_back(ms);
  const size_t window = static_cast<size_t>(std::max(1, opt_.rebalance_window));
  if (pipeline_ms_.size() < window) return {};
  std::vector<PipelineSpeed> speeds;
  pipeline_means_ms_.assign(ms.size(), 0.0);
  for (size_t p = 0; p < ms.size(); ++p) {
    double sum = 0;
    for (size_t k = pipeline_ms_.size() - window; k < pipeline_ms_.size(); ++k)
      sum += pipeline_ms_[k][p];
    pipeline_means_ms_[p] = sum / static_cast<double>(window);
    const auto& pipe = run_.plan.pipelines[p];
    speeds.push_back({pipe.microbatches, pipeline_means_ms_[p], pipe.tmpl.estimate.fixed_ms,
                      pipe.tmpl.estimate.per_microbatch_ms});
  }
  return rebalance_judge_.judge(speeds, opt_.rebalance_gain);
}

void Supervisor::stop(const std::string& why) {
  const int num_layers = run_.layout.num_layers;
  std::map<int, std::vector<int>> by_writer;
  std::vector<int> lost;
  // Each layer from its first whole holder, and with checkpoint.replicas = R from up to R more
  // on other nodes (only a whole copy can be written on its own).
  const size_t copies = 1 + static_cast<size_t>(std::max(0, ctx_.config.checkpoint.replicas));
  for (int l = 0; l < num_layers; ++l) {
    std::vector<int> writers;
    std::set<int> nodes;
    const int64_t n = model::num_parameters(ctx_.model, l);
    for (const auto& [w, held] : holdings_) {
      auto it = held.find(l);
      if (it != held.end() && it->second.first == 0 && it->second.second == n &&
          nodes.insert(w / ctx_.devices_per_node).second) {
        writers.push_back(w);
        if (writers.size() == copies) break;
      }
    }
    if (writers.empty()) lost.push_back(l);
    for (int w : writers) by_writer[w].push_back(l);
  }
  Event e;
  e.kind = "stopped";
  e.step = committed_;
  e.generation = g_;
  e.nodes.assign(failed_.begin(), failed_.end());
  e.cause = why;
  outcome_.kind = Outcome::kStopped;
  outcome_.message = stopping_
                         ? fmt::format("stopped at step {} on request", committed_)
                         : fmt::format("cannot continue after losing node(s) {} at step {}: {}",
                                       fmt::join(failed_, ","), committed_, why);
  if (opt_.async_checkpoints && pending_checkpoints_.count(committed_) > 0) {
    // A periodic checkpoint of this very step is being written: it is the stop's checkpoint.
    set_string(*store_, keys::next(g_), encode_next({.shutdown = true}));
    save_is_pending_ = true;
    phase_ = Phase::kSave;
    save_deadline_ms_ = clock_.now_ms() + opt_.step_timeout_ms;
  } else if (lost.empty() && !by_writer.empty()) {
    save_dir_ = runtime::checkpoint_dir(runtime::checkpoint_root(ctx_.config), committed_);
    std::error_code ec;
    fs::remove_all(runtime::staging_dir(save_dir_), ec);
    StopSave save{save_dir_, {}};
    int index = 0;
    save_writers_.clear();
    for (const auto& [w, layers] : by_writer) {
      save.shards[w] = {index++, std::vector<int>(layers.begin(), layers.end())};
      save_writers_.push_back(w);
    }
    set_string(*store_, keys::next(g_), encode_next({.shutdown = true, .save = std::move(save)}));
    phase_ = Phase::kSave;
    save_deadline_ms_ = clock_.now_ms() + opt_.step_timeout_ms;
  } else {
    settle_checkpoints(true);
    const auto [step, path] = last_checkpoint(runtime::checkpoint_root(ctx_.config));
    outcome_.message += fmt::format(
        "; no surviving replica of layer(s) {}, so the state at step {} is lost; {}",
        fmt::join(lost, ","), committed_,
        step < 0 ? fmt::format("there is no checkpoint: start again (steps 0-{} will be redone)",
                               committed_ - 1)
                 : fmt::format("the last checkpoint is {} (step {}); resuming from it redoes steps "
                               "{}-{}",
                               path, step, step, committed_ - 1));
    outcome_.checkpoint = step < 0 ? "" : path;
    set_string(*store_, keys::next(g_), encode_next({.shutdown = true}));
    phase_ = Phase::kDone;
  }
  if (on_event) on_event(e);
}

void Supervisor::poll_save() {
  if (save_is_pending_) {
    // The state at committed_ is already being written by a periodic checkpoint: the stop waits
    // for it (settle_checkpoints sets outcome_.checkpoint when it commits).
    settle_checkpoints(false);
    if (pending_checkpoints_.count(committed_) == 0) {
      settle_checkpoints(true);
      if (outcome_.checkpoint.empty())
        outcome_.message += fmt::format("; the checkpoint at step {} was dropped", committed_);
      phase_ = Phase::kDone;
      return;
    }
  } else if (counter(*store_, keys::num_final(g_)) == static_cast<int64_t>(save_writers_.size())) {
    settle_checkpoints(true);  // earlier ones first: the stop save is the newest
    if (on_checkpoint) {
      outcome_.checkpoint = on_checkpoint(committed_, static_cast<int>(save_writers_.size()), run_,
                                          keys::final_shards(g_));
    }
    phase_ = Phase::kDone;
    return;
  }
  if (clock_.now_ms() > save_deadline_ms_) {
    outcome_.message += "; the survivors did not write the checkpoint in time";
    if (on_checkpoint_dropped && !save_is_pending_)
      on_checkpoint_dropped(keys::final_shards(g_), static_cast<int>(save_writers_.size()));
    settle_checkpoints(true);
    phase_ = Phase::kDone;
  }
}

void Supervisor::poll_finish() {
  const int world = run_.layout.world_size();
  const double now = clock_.now_ms();
  settle_checkpoints(false);
  if (pending_checkpoints_.empty() && counter(*store_, keys::num_done(g_)) == world) {
    // Every replica of every layer must be bitwise identical: parameters and AdamW state.
    // Keys: a whole layer "{layer}", or a segment of a segmented one "{layer}/{begin}-{end}".
    std::map<std::string, std::pair<int, std::string>> first;  // key -> (rank, checksums)
    for (int r = 0; r < world; ++r) {
      for (const auto& e : decode_done(get_string(*store_, keys::done(g_, r)), keys::done(g_, r))) {
        auto [pos, fresh] = first.emplace(e.part, std::make_pair(r, e.checksums));
        BW_CHECK(fresh || pos->second.second == e.checksums,
                 "replicas of layer {} diverged: rank {} has {}, rank {} has {}", e.part,
                 pos->second.first, pos->second.second, r, e.checksums);
        if (e.layer) outcome_.parameter_checksums[*e.layer] = e.first;
      }
    }
    if (held_) {  // the last step's validation loss, measured once training was done
      const auto key = keys::final_eval(g_);
      BW_CHECK(exists(*store_, key),
               "the run was due a validation loss after its last step, but "
               "rank 0 wrote none");
      const auto doc = nlohmann::json::parse(get_string(*store_, key), nullptr, false);
      if (!doc.is_object() || !doc.contains("val_loss")) {
        throw ConfigError(fmt::format("{}: not a validation loss: {}", key, doc.dump()));
      }
      const auto& v = doc.at("val_loss");
      release_held(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN(),
                   doc.value("eval_ms", 0.0));
    }
    if (on_end) on_end();
    if (pending_) report_recovery(committed_, now);
    set_string(*store_, keys::abort(g_), "1");
    set_string(*store_, keys::next(g_), encode_next({.shutdown = true}));
    outcome_.kind = Outcome::kFinished;
    phase_ = Phase::kDone;
    return;
  }
  if (now > finish_deadline_ms_) {
    for (int r = 0; r < world; ++r) {
      if (!exists(*store_, keys::done(g_, r))) {
        node_lost(run_.workers[r] / ctx_.devices_per_node,
                  fmt::format("rank {} did not finish within elastic.step_timeout_s", r), 0);
        break;
      }
    }
  }
}

void Supervisor::record(StepRecord rec) {
  if (runtime::eval_due(ctx_.config.train, rec.step + 1)) {
    held_ = std::move(rec);
  } else if (on_step) {
    on_step(rec);
  }
}

void Supervisor::release_held(std::optional<double> val_loss, double eval_ms) {
  StepRecord rec = std::move(*held_);
  held_.reset();
  rec.val_loss = val_loss;
  rec.eval_ms = eval_ms;
  if (on_step) on_step(rec);
}

bool Supervisor::tick() {
  if (phase_ == Phase::kDone) {
    // The run ended before the evaluation after the last committed step: its line goes out
    // without a validation loss.
    if (held_) release_held(std::nullopt, 0);
    return false;
  }
  detect();
  switch (phase_) {
    case Phase::kRun:
      poll_run();
      break;
    case Phase::kQuiesce:
      poll_quiesce();
      break;
    case Phase::kFinish:
      poll_finish();
      break;
    case Phase::kSave:
      poll_save();
      break;
    case Phase::kDone:
      break;
  }
  return phase_ != Phase::kDone;
}

}  // namespace bw::elastic
