// The supervisor: the coordinator's state machine over one training run (docs/elastic.md).
//
//   RUN(g) --failure--> QUIESCE --all survivors stopped--> REPLAN --> publish g+1 --> RUN(g+1)
//   RUN(g) --join due--> (commit the step as "last") QUIESCE --> REPLAN (plan::join) --> RUN(g+1)
//   RUN(g) --last step committed--> FINISH (final shards, checksums) --> DONE
//   REPLAN --no plan / a layer without replica--> STOP (save what survives) --> DONE
//
// Failures and joins are events seen by polling, never exceptions: an agent's exit (Nodes), an
// agent's exit report in the store, a stale heartbeat of an agent or a worker, a survivor that
// does not stop in time. A step is committed (decision key) only when every rank of the
// generation reported it ready; a failure before that replays it in g+1 with the same samples.
//
// Everything external goes through interfaces, so tests drive the machine with an in-memory
// store (c10d::HashStore), a fake clock and fake nodes, one tick() at a time.
//
// Thread-safety: one thread calls tick().
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/inject.h"
#include "elastic/nonfinite.h"
#include "elastic/planning.h"
#include "elastic/rebalance.h"
#include "runtime/worker.h"

namespace c10d {
class Store;
}

namespace bw::elastic {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now_ms() = 0;  // wall clock, comparable across processes
};

class SystemClock final : public Clock {
 public:
  double now_ms() override;
};

// The nodes' agents: started, killed and watched by the coordinator (local child processes,
// local_nodes.h), or agents on other hosts that register themselves (remote_nodes.h).
class Nodes {
 public:
  virtual ~Nodes() = default;
  virtual void start(int node, int incarnation) = 0;
  virtual void kill(int node) = 0;  // idempotent; the node's workers die with its agent
  // Agents that exited since the last call: (node, exit status; 128 + signal when killed).
  virtual std::vector<std::pair<int, int>> poll() = 0;
  // Lost nodes whose agent came back by itself (remote agents register again): start() them.
  virtual std::vector<int> arrived() { return {}; }
  // The node's agent's own start-up (exec and loading LibTorch, as its workers must do), when
  // the agent measured it; 0 when the coordinator times the start itself (local agents).
  virtual double launch_ms(int /*node*/) const { return 0; }
};

struct StepRecord {
  int step = 0;
  int generation = 0;
  int world = 0;  // devices in the plan
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double step_s = 0;      // since the previous commit
  std::string samples;    // hex FNV-1a of the sorted sample ids the step trained on
  bool skipped = false;   // not finite, update skipped (train.nonfinite = "skip")
  int skipped_total = 0;  // steps skipped so far, this one included
  // The validation loss after this step's update (runtime::eval_due(step + 1)). It is measured
  // at the start of the next step, or after the last one, so on_step for this step waits until
  // then (a recovery in between evaluates again, from the same parameters).
  std::optional<double> val_loss;
  double eval_ms = 0;
  std::vector<runtime::StepReport> reports;  // one per rank
};

struct Event {
  std::string kind;  // node_lost | node_joined | recovered | stopped
  int step = 0;      // the step in flight (lost, joined) or the first step of the new generation
  std::vector<int> nodes;
  int generation = 0;
  std::string cause;  // how it was detected (node_lost), or the message (stopped)
  std::string old_plan, new_plan;
  double detect_ms = 0, quiesce_ms = 0, plan_ms = 0, regroup_ms = 0, transfer_ms = 0, replay_ms = 0,
         recovery_ms = 0;
  // cause "coordinator" (a takeover; detect_ms is then the campaign): from the old leader's last
  // sign of life to this coordinator's lead, and from its lead to the agents back and the run
  // state read.
  double campaign_ms = 0, reconcile_ms = 0;
  int64_t transfer_bytes = 0;  // recovered: layer state the new generation's ranks received
};

struct SupervisorOptions {
  int steps = 0;       // train.steps
  int first_step = 0;  // resume position
  std::string resume;  // checkpoint to load in generation 0
  double step_timeout_ms = 120000;
  // checkpoint.every_s in ms: a step whose commit comes this long after the last checkpoint (or
  // the run's first commit) is checkpointed too (the decision says so); 0 = steps only.
  double checkpoint_every_ms = 0;
  double heartbeat_timeout_ms = 5000;
  double rejoin_after_ms = 0;   // 0 = lost nodes stay out
  double stop_grace_ms = 2000;  // survivors must stop within this after an abort
  // An agent's first heartbeat is due heartbeat_timeout_ms + agent_startup_ms after it was
  // started (local) or its registration was accepted (remote); the allowance grows to twice the
  // longest start-up of an agent seen in the run. The coordinator derives it from its own
  // measured start-up (docs/elastic.md "Start-up"); `agent_startup_basis` says how, for messages.
  double agent_startup_ms = 2000;
  std::string agent_startup_basis;
  // Least start-up counted for a node's workers (they load LibTorch as its agent did): a worker's
  // first beat is due heartbeat_timeout_ms + twice max(its agent's measured start-up, this)
  // after its agent came up. A remote agent's measured start-up starts at its registration, after
  // it loaded, and local workers load all at once after their agents.
  double worker_startup_floor_ms = 0;
  bool agents_register = false;  // remote agents: count from the accepted registration
  double tick_sleep_ms = 3;
  // Resume position of the non-finite skips (the checkpoint's): steps skipped so far, and how
  // many of the last steps in a row (train.skip_limit bounds those).
  int skipped = 0;
  int consecutive_skips = 0;
  // elastic.rebalance: re-fit the batch split over the last rebalance_window steps of a
  // generation (its first step left out) when the predicted gain is at least rebalance_gain.
  bool rebalance = false;
  double rebalance_gain = 0.1;
  int rebalance_window = 5;
  // Workers write their own checkpoint shards in the background (runtime/checkpoint_sink.h) and
  // acknowledge each when durable, possibly in a later generation; false: shards are uploaded
  // through the store inside the step (shard_store.h).
  bool async_checkpoints = true;
};

// A node as the supervisor sees it (RunState's nodes, without the names).
struct NodeView {
  int node = 0, incarnation = 0;
  bool live = false, in_plan = false;
};

// A run another coordinator led, as a coordinator that took it over found it (leadership.h):
// the generation its predecessor published last, the decisions of that generation that stand in
// the control store, and which nodes' agents came back to this coordinator.
struct Adoption {
  RunPlan run;
  int first_step = 0;
  std::string start;                     // the generation's start message (keys::start)
  SkipCount skips;                       // as of first_step
  std::map<int, std::string> decisions;  // step -> decision text, generation run.generation
  std::vector<NodeView> nodes;
  std::set<int> back;  // nodes whose agents registered again
  // For the "recovered" event: the last sign of life of the old leader (its store answered),
  // when this one led, when the agents were back and the state read (Clock ms).
  double fail_ms = 0, led_ms = 0, reconciled_ms = 0;
};

// How the run ended.
struct Outcome {
  enum Kind { kRunning, kFinished, kStopped, kFailed, kInterrupted } kind = kRunning;
  std::string message;        // kStopped / kFailed
  bool config_error = false;  // kFailed: a worker's bad input (exit 2) rather than a bug (1)
  std::string checkpoint;     // kStopped: written from the survivors, if any
  std::map<int, std::string> parameter_checksums;  // kFinished: per layer
};

class Supervisor {
 public:
  Supervisor(c10::intrusive_ptr<c10d::Store> store, Clock& clock, Nodes& nodes, PlanContext context,
             RunPlan first, SupervisorOptions options);

  // Publishes generation 0 and starts every node's agent.
  void start();
  // Instead of start(): takes over a run another coordinator led. The decisions that stand are
  // published again (a worker waiting for one gets it from this store), and the generation is
  // re-formed as generation g+1 through the quiesce and re-plan of a recovery: the step in flight
  // is aborted (unless it stands decided) and replayed on the same samples. Nodes that did not
  // come back are lost.
  void adopt(const Adoption& adoption);
  // Every node's state, for the run state a successor would adopt.
  std::vector<NodeView> node_views() const;
  // One iteration; false once the run has ended (see outcome()).
  bool tick();
  const Outcome& outcome() const { return outcome_; }

  // Stop at the next step boundary and checkpoint the committed state (Ctrl-C, SIGTERM).
  void request_stop() { stop_requested_ = true; }

  const RunPlan& current() const { return run_; }
  int committed() const { return committed_; }
  // The skips as of `steps_done` steps (a checkpoint's), known for due checkpoints and now.
  SkipCount skips_at(int steps_done) const;

  std::function<void(const StepRecord&)> on_step;
  std::function<void(const Event&)> on_event;
  std::function<void(const RunPlan&)> on_plan;
  // A generation is about to be published (before any worker can read it): its first step, the
  // start message, and the skips then; the run state a takeover needs is made durable here.
  std::function<void(int first_step, const std::string& start, const SkipCount& skips)> on_publish;
  // A checkpoint's shards are all uploaded under `prefix` (shard_store.h; steps_done = the
  // checkpoint's step): write, merge and publish them; returns the sidecar.
  std::function<std::string(int steps_done, int shards, const RunPlan&, const std::string& prefix)>
      on_checkpoint;
  // Where a step's decision is made durable before any worker can read it (a fenced write in the
  // control store, leadership.h): given the decision key and text, returns the text that stands
  // there (an earlier write's, if any), which the workers then read. Unset: the store is the
  // record.
  std::function<std::string(const std::string& key, const std::string& text)> on_decide;
  // Every worker reported the end of the run and the final checkpoint is committed; the end is
  // not published yet (elastic.inject kill_coordinator:phase=end acts here).
  std::function<void()> on_end;
  // A checkpoint that will not complete (a writer was lost): erase what its writers uploaded.
  std::function<void(const std::string& prefix, int shards)> on_checkpoint_dropped;

 private:
  enum class Phase { kRun, kQuiesce, kFinish, kSave, kDone };
  // The decision for the step in flight (committed_), through on_decide, then to the workers.
  void write_decision(const std::string& text);
  struct NodeState {
    int incarnation = 0;
    bool live = true;
    bool in_plan = false;
    double lost_at_ms = 0;
    bool joining = false;    // started again, waiting for its workers to be up
    double started_ms = 0;   // when its agent was (re)started (remote: registration accepted)
    double agent_up_ms = 0;  // when that agent's first heartbeat was seen; 0 = not yet
    double launch_ms = 0;    // the agent's own measure of its start-up (Nodes::launch_ms)
  };
  struct Beat {
    int64_t count = -1;
    double since_ms = 0;
    bool starting = true;  // no beat seen since the process (re)started: the startup grace
  };
  struct Recovery {
    std::vector<int> nodes;
    std::string kind;  // node_lost | node_joined
    double fail_ms = 0, detect_ms = 0, quiesced_ms = 0, published_ms = 0;
    double campaign_ms = 0, reconcile_ms = 0;  // a takeover's (Event)
    int step = 0;
    std::string old_plan;
  };

  // A state-transfer copy: layer, from worker, to worker, range [begin, end) of its flat values.
  using Copy = std::tuple<int, int, int, int64_t, int64_t>;
  void publish(const RunPlan& run, int first_step, const std::vector<Copy>& copies);
  void detect();
  // When a worker of `node` that has not sent its first heartbeat counts as hung (see detect()).
  double worker_startup_deadline_ms(const NodeState& node) const;
  double worker_launch_ms(const NodeState& node) const;  // the start-up it is allowed twice
  // The start-up allowance of an agent (beyond the heartbeat timeout) and when its first beat is
  // due; the agent is hung while starting up after that.
  double agent_startup_allowance_ms() const;
  // Starts node's agent; its heartbeat counters (which outlive a restart) are read as the
  // baseline first, so only a beat of the new process counts as its first.
  void start_node(int node, int incarnation);
  void ended_cleanly(int node);  // a clean exit during the stop save (supervisor.cc)
  void node_lost(int node, const std::string& cause, double fail_ms);
  void fail_run(int worker, int status);
  void poll_run();
  void poll_quiesce();
  void poll_finish();
  // Hands a committed step to on_step, or holds it until its validation loss is known.
  void record(StepRecord rec);
  void release_held(std::optional<double> val_loss, double eval_ms);
  void poll_save();
  void replan();
  // elastic.rebalance: adds step `rec`'s pipeline times to the window; the split to change to,
  // when the window is full and worth_rebalancing says so.
  std::optional<Split> judge_rebalance(const StepRecord& rec);
  void stop(const std::string& why);
  // Records what started a recovery (for its event) and aborts the generation.
  void start_recovery(const std::string& kind, double fail_ms, std::vector<int> nodes);
  void begin_quiesce();
  void report_recovery(int first_step, double now);  // the pending recovery's event
  void maybe_start_joins();
  std::string plan_string(const RunPlan& run) const;
  std::vector<int> workers_of(int node) const;
  std::vector<int> live_workers_in_generation() const;

  c10::intrusive_ptr<c10d::Store> store_;
  Clock& clock_;
  Nodes& nodes_;
  PlanContext ctx_;
  RunPlan run_;
  SupervisorOptions opt_;
  Outcome outcome_;
  Phase phase_ = Phase::kRun;

  int g_ = 0;
  int committed_ = 0;  // steps committed (the next step to commit)
  bool gen_committed_any_ = false;
  double last_commit_ms_ = 0;
  double last_checkpoint_ms_ = -1;  // checkpoint_every_ms: when the last one was due (-1: none yet)
  int64_t exits_seen_ = 0;
  double last_beat_check_ms_ = 0;
  double longest_agent_startup_ms_ = 0;  // measured in this run (start to first beat)
  std::map<int, NodeState> node_states_;
  std::map<int, Beat> node_beats_, worker_beats_;
  std::set<int> failed_;   // nodes lost in the current generation (not yet re-planned)
  std::set<int> joiners_;  // nodes whose workers are up, waiting for the next step boundary
  double quiesce_deadline_ms_ = 0;
  std::optional<Recovery> recovery_;
  std::optional<Recovery> pending_;  // published, waiting for the first commit of g+1
  // Checkpoints whose shards are being written, by steps done: the generation and plan they
  // were saved under (their shards are that plan's ranks).
  struct PendingCheckpoint {
    int g = 0;
    RunPlan run;
  };
  std::map<int, PendingCheckpoint> pending_checkpoints_;
  // Commits the pending checkpoints whose shards are all there; with `ending` (the run stops)
  // drops the others. Sets outcome_.checkpoint when the one at committed_ is committed.
  void settle_checkpoints(bool ending);
  // Drops the pending checkpoints that a shard of `node`'s workers is still missing from.
  void drop_checkpoints_of(int node);
  bool shards_arrived(int steps_done, const PendingCheckpoint& p) const;
  bool save_is_pending_ = false;  // the stop waits for the pending checkpoint at committed_
  double finish_deadline_ms_ = 0;
  // worker -> layer -> range [begin, end) of its flat values held, from stopped reports.
  std::map<int, std::map<int, std::pair<int64_t, int64_t>>> holdings_;
  std::vector<int> save_writers_;
  std::string save_dir_;
  double save_deadline_ms_ = 0;
  std::set<int> used_faults_;
  double left_since_ms_ = 0;        // a rank left the generation with no failure detected (yet)
  int regroups_ = 0;                // generations re-formed with no failure, since the last commit
  SkipCount skips_;                 // as of committed_
  std::optional<StepRecord> held_;  // committed, waiting for the validation loss after it
  std::map<int, SkipCount> checkpoint_skips_;  // steps done of a due checkpoint -> skips then
  bool stop_requested_ = false;
  std::vector<std::vector<double>> pipeline_ms_;  // this generation's steps: each pipeline's time
  std::optional<Split> rebalance_;                // the split the next generation takes
  std::vector<double> pipeline_means_ms_;         // over the last window, as last judged
  // Splits measured on the current pipelines: a split already measured is judged by its
  // measurement, not by the estimate (no oscillation; rebalance.h).
  RebalanceJudge rebalance_judge_;
  bool stopping_ = false;  // the generation ends for a requested stop, not a re-plan  // injected
                           // faults already matched to a lost node
};

// FNV-1a 64 of the sorted ids, as 16 hex digits.
std::string samples_digest(std::vector<int64_t> ids);

}  // namespace bw::elastic
