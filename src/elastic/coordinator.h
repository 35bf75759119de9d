// The coordinator: the process that owns a training run (docs/elastic.md). It loads the data and
// model shapes, plans generation 0 (planning.h), hosts the c10d TCPStore for the whole run (it
// must outlive every worker), starts one agent per node (local child processes, `breakwater
// agent`; or, for a multi-host run, waits for agents on other hosts to register themselves), and
// runs the supervisor (supervisor.h) until the run ends: steps committed, failures
// and joins turned into new generations, checkpoints merged from the ranks' shards, and at the
// end a check that all replicas of every layer are bitwise identical (parameters and AdamW
// state). It writes metrics.jsonl (a line per committed step and per event) and reports events
// to the CLI as they happen. `--devices 1` runs the whole model in this process instead: the
// single-process reference of the transparency tests.
//
// Liveness: every wait has a deadline. More failures than the plan survives stop the run with
// CommError (exit status 3) whose message says what was saved and how to resume; a worker's bad
// input is a ConfigError (2), a worker's bug an InternalError (1).
//
// Thread-safety: run_training is called from one thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "elastic/supervisor.h"
#include "runtime/config.h"
#include "runtime/layout.h"
#include "runtime/worker.h"

namespace bw::elastic {

struct StepSummary {
  int step = 0;   // 0-based
  int steps = 0;  // total steps of the run
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  double step_s = 0.0;  // wall time of the step seen by the coordinator
  double tokens_per_s = 0.0;
  double flops_per_s = 0.0;  // model FLOPs (model/flops.h) per second, all devices together
  double mfu = 0.0;          // flops_per_s / (devices x peak per device)
  double elapsed_s = 0.0;
  double eta_s = 0.0;
  int generation = 0;
  int world = 0;
  std::string samples;    // digest of the step's sample ids
  bool skipped = false;   // not finite, its update skipped (train.nonfinite = "skip")
  int skipped_total = 0;  // steps skipped so far in the run, this one included
  // The validation loss after this step's update, where one was due (runtime::eval_due).
  std::optional<double> val_loss;
  double eval_ms = 0.0;
  std::vector<runtime::StepReport> reports;  // one per rank
  // Slow ranks (elastic/slow_ranks.h), in runs of more than one rank: each rank's compute per
  // unit of work over the median rank's (0 = not judged), and the ranks flagged after this step.
  std::vector<double> relative_compute;
  std::vector<int> slow_ranks;
};

// A rank flagged slow at some step of the run (elastic/slow_ranks.h).
struct SlowRank {
  int generation = 0;
  int rank = 0;
  int worker = -1;          // the worker process (node * devices_per_node + device); -1 = unknown
  int first_step = 0;       // the step after which it was first flagged
  int steps = 0;            // committed steps it was flagged after
  double max_relative = 0;  // its largest relative compute while flagged
};

struct RunSummary {
  runtime::RunLayout layout;
  std::vector<std::string> notes;  // planning adjustments
  int first_step = 0;
  int steps_done = 0;
  double first_loss = 0.0;
  std::optional<int> first_loss_step;  // the step of first_loss: first_step, or a later one when
                                       // this coordinator took the run over
  double final_loss = 0.0;
  std::optional<double> final_val_loss;  // the last validation loss of the run, if any
  int final_val_step = 0;                // steps done when it was measured
  double total_s = 0.0;
  double tokens_per_s = 0.0;     // over the run, excluding start-up
  double flops_per_token = 0.0;  // model FLOPs (model/flops.h)
  double flops_per_s = 0.0;      // over the run, all devices together
  double mfu = 0.0;              // flops_per_s / (devices x peak_flops_per_device)
  double peak_flops_per_device = 0.0;
  std::string peak_source;           // the table row or the probe that gave the peak
  std::string precision;             // train.precision
  std::vector<int64_t> peak_rss_kb;  // per rank
  // Per rank of the final layout: the planner's estimate of its memory (estimate_device_bytes:
  // parameters, gradients, optimizer state and the activations it keeps in flight).
  std::vector<double> predicted_bytes;
  std::vector<double> compute_share;  // per rank: compute_ms / step_ms, averaged
  std::string checkpoint;             // sidecar path of the final checkpoint
  std::string sample;                 // generated text (bytes as text, or token ids for .bin data)
  std::string metrics_path;
  std::string trace_path;            // out_dir/trace.json when train.trace_steps names steps
  std::vector<Event> events;         // failures, joins, recoveries, in order
  std::vector<int> skipped_steps;    // non-finite steps skipped by this run (train.nonfinite)
  std::vector<SlowRank> slow_ranks;  // one entry per (generation, rank) flagged
  int generations = 1;
  bool idle = false;  // a standby that found the run over: it ran nothing
};

struct CoordinatorOptions {
  int devices = 0;         // > 0 overrides cluster.nodes * cluster.devices_per_node
  std::string executable;  // binary with the `worker` subcommand; empty = this one
  // Multi-host (docs/multihost.md): host the store on this ADDR:PORT and wait for
  // cluster.nodes agents to register (remote_nodes.h) instead of starting local ones.
  std::string listen;
  double wait_s = 300;  // longest wait for the agents to register
  // Multi-host only: "etcd://HOST:PORT[,...]" keeps the leadership and every step's decision in
  // etcd, fenced (leadership.h; docs/elastic.md "Leadership and fenced decisions"); empty or
  // "embedded": the run's own store is the record. run_id names the run's keys there
  // (bw/{run_id}/).
  std::string control;
  std::string run_id;
  int64_t lease_ttl_s = 5;
  double leaderless_timeout_s = 30;
  // With control: stand by, and take the run over when its coordinator goes (leadership.h,
  // Supervisor::adopt); the same config (train.out_dir aside) and run id as the active one.
  bool standby = false;
  std::vector<std::string> expected_names;  // named in the message when some are missing
  // The store is up (multi-host): the address agents connect to.
  std::function<void(const std::string& address, int port)> on_listen;
  // The first plan (generation 0) once every check before the start has passed (data, plan,
  // faults, resume, out_dir and its lock, config.toml written), before any worker starts; then
  // each new plan after a reconfiguration.
  std::function<void(const runtime::RunLayout&, const std::vector<std::string>& notes)> on_plan;
  std::function<void(const StepSummary&)> on_step;
  std::function<void(const Event&)> on_event;
};

// The run token (elastic.run_token) never leaves this function: the config that agents, workers,
// config.toml and checkpoints see has it cleared.
RunSummary run_training(const runtime::RunConfig& config, const CoordinatorOptions& options);

}  // namespace bw::elastic
