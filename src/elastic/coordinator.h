// The coordinator: the process that owns a training run (DESIGN.md "Elastic control plane").
// It loads the data and model shapes, computes the layout of generation 0 (planning.h), hosts the
// c10d TCPStore (it must outlive the workers), publishes the config, layout and start position
// under the generation's keys (keys.h), spawns one worker process per device (our own binary's
// hidden `worker` subcommand), and then follows the run through the store: per-step metrics from
// every rank, checkpoints merged from the ranks' shards, and at the end a check that all replicas
// of every layer are bitwise identical. `--devices 1` runs the whole model in this process
// instead: the single-process reference of the transparency tests.
//
// Liveness: every wait polls the children and has a deadline (elastic.step_timeout_s). A worker
// that exits early or a step that does not finish in time stops every worker and raises
// CommError naming the rank, its exit status and its error message; nothing hangs. The elastic
// layer extends this loop with reconfiguration (a new generation) instead of stopping.
//
// Thread-safety: run_training is called from one thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

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
  double elapsed_s = 0.0;
  double eta_s = 0.0;
  std::vector<runtime::StepReport> reports;  // one per rank
};

struct RunSummary {
  runtime::RunLayout layout;
  std::vector<std::string> notes;  // planning adjustments
  int first_step = 0;
  int steps_done = 0;
  double first_loss = 0.0;
  double final_loss = 0.0;
  double total_s = 0.0;
  double tokens_per_s = 0.0;          // over the run, excluding start-up
  std::vector<int64_t> peak_rss_kb;   // per rank
  std::vector<double> compute_share;  // per rank: compute_ms / step_ms, averaged
  std::string checkpoint;             // sidecar path of the final checkpoint
  std::string sample;                 // generated text (bytes as text, or token ids for .bin data)
  std::string metrics_path;
};

struct CoordinatorOptions {
  int devices = 0;         // > 0 overrides cluster.nodes * cluster.devices_per_node
  std::string executable;  // binary with the `worker` subcommand; empty = this one
  std::function<void(const runtime::RunLayout&, const std::vector<std::string>& notes)> on_plan;
  std::function<void(const StepSummary&)> on_step;
};

RunSummary run_training(const runtime::RunConfig& config, const CoordinatorOptions& options);

}  // namespace bw::elastic
