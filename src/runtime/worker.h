// A worker: one device's share of training in one generation (docs/design.md "Runtime"). It runs
// its action list each step (executor.h) on the layers of a ModelState that outlives it, syncs
// gradients per layer across pipelines and computes the global norm (grad_sync.h); once the step
// is committed it clips and applies AdamW with the scheduled learning rate (prepare / apply).
// Checkpoint shards and state loading go through named tensors
// ("layers.{i}.{param}"), so a checkpoint written under one plan loads under any other.
//
// Data: step k consumes global samples [k*G, (k+1)*G); this rank's pipeline computes global
// microbatches [first_microbatch, first_microbatch + num_microbatches) of each step.
//
// Invariants: replicas of a layer apply the same update to bitwise identical parameters, so they
// stay bitwise identical (layer_checksums() lets the coordinator verify it).
//
// Thread-safety: one thread drives a Worker.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "model/gpt.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/config.h"
#include "runtime/executor.h"
#include "runtime/grad_sync.h"
#include "runtime/layout.h"
#include "runtime/model_state.h"
#include "runtime/optimizer.h"
#include "runtime/shard.h"
#include "runtime/step_report.h"
#include "runtime/trace_events.h"

namespace bw::runtime {

// What a step computed before its commit: gradients are synced and clipped-to-be, nothing is
// applied yet (the optimizer runs only once the coordinator commits the step).
struct PreparedStep {
  StepReport report;
  double clip = 1.0;  // factor for the gradients
};

class Worker {
 public:
  // One generation's view of a rank: `state` (which outlives the worker) must hold every layer of
  // layout.layers_of(rank); `world` is the generation's group of all ranks and `make_group`
  // builds the gradient groups (both unused, and may be null, when the world has one rank).
  // `hook` sees the phases of each step.
  Worker(const RunConfig& config, const RunLayout& layout, int rank, ModelState& state,
         std::unique_ptr<Transport> world, const TransportFactory& make_group, PhaseHook hook = {});
  ~Worker();

  // Forward, backward and gradient sync of 0-based step `step` (samples [step*G, (step+1)*G)).
  PreparedStep prepare(int step);
  // Applies a prepared step (AdamW with the step's learning rate); state.steps_done = step + 1.
  void apply(int step, const PreparedStep& prepared);
  // Skips a prepared step whose loss or gradient norm is not finite: no update, gradients
  // zeroed, state.steps_done = step + 1 and state.steps_skipped + 1 (train.nonfinite = "skip").
  void skip(int step);
  // prepare + apply, for runs without a coordinator's commit (one process).
  StepReport run_step(int step);
  // The validation loss of the current parameters: the mean loss over the first
  // train.eval_batches global batches of data.val_path in order (sample i = window i), each
  // split into microbatches as a training step is, this rank's share computed forward only
  // (Executor::run_forward). Per-microbatch losses are summed over the world, then added in
  // microbatch order, so the value does not depend on the plan. Collective over the world;
  // changes no parameter, gradient or optimizer state. The hook sees "eval".
  double evaluate();

  // Every later forward and backward computation takes `factor` times as long (fault injection
  // `slow`, Executor::set_slowdown).
  void set_slowdown(double factor);

  // train.trace_steps: whether `step` is traced. Its prepare records every action (executor.h,
  // set_trace) and the gradient sync, its apply the optimizer; add_trace adds what happened
  // outside them (the state transfer of a new generation); take_trace hands the record over.
  bool traced(int step) const;
  void add_trace(TraceSpan span) { trace_.push_back(std::move(span)); }
  RankTrace take_trace(int step);

  int rank() const { return rank_; }
  const RunLayout& layout() const { return layout_; }
  const model::GptConfig& model_config() const { return state_.model(); }
  ModelState& state() { return state_; }
  Transport* world() { return world_.get(); }

  // Layers whose checkpoint tensors this rank writes (RunLayout::checkpoint_writers with
  // checkpoint.replicas): with no replicas, each layer once, by the lowest rank holding it whole,
  // else by member 0 of the first pipeline's stage.
  std::vector<int> owned_layers() const;
  // Full tensors of the owned layers. Collective over sharded stages: every rank calls it.
  NamedTensors owned_parameters();
  NamedTensors owned_optimizer_state();
  // Loads every held layer's parameters (and optimizer state when given) by name; ConfigError
  // naming the first missing tensor or a shape mismatch.
  void load_state(const std::map<std::string, torch::Tensor>& params,
                  const std::map<std::string, torch::Tensor>* optimizer_state);

  // FNV-1a of each held layer's parameter bytes.
  std::vector<std::pair<int, uint64_t>> layer_checksums() const;
  const StageShards& shards() const { return *shards_; }

  // The generation's transports, for discard_in_background() (the worker is unusable after).
  std::vector<std::unique_ptr<Transport>> release_transports();

 private:
  std::vector<int> owned_whole_layers() const;
  void append_segmented(NamedTensors& out, NamedTensors (StageShards::*full)(int));

  RunConfig config_;
  RunLayout layout_;
  int rank_;
  int pipeline_;
  int device_;
  ModelState& state_;
  std::optional<data::Sampler> sampler_;
  std::optional<data::Sampler> val_sampler_;  // data.val_path, when evaluations are due
  std::unique_ptr<Transport> world_;
  std::unique_ptr<Transport> stage_group_;  // the ranks of this rank's stage, when more than one
  std::unique_ptr<StageShards> shards_;     // this rank's segmented layers
  std::vector<int> owned_;  // layers this rank writes into checkpoints, ascending
  std::vector<int> segmented_gathered_;     // sharded stage: segmented layers it gathers for one
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<GradSync> sync_;
  PhaseHook hook_;
  std::vector<int> trace_steps_;  // sorted
  std::vector<TraceSpan> trace_;
};

// Global sample ids (window indices of the data) of rows [rows.first, rows.second) of local
// microbatches `microbatches` of `pipeline` at step `step`, for the exactly-once check.
std::vector<int64_t> sample_ids(const data::Sampler& sampler, const RunLayout& layout, int pipeline,
                                int step, const std::vector<int>& microbatches,
                                std::pair<int, int> rows);

// Whether a validation loss is due with `steps_done` updates applied: every train.eval_every
// steps and after the last step (never with eval_every = 0). The evaluation after d < steps
// updates runs at the start of step d (Worker::prepare reports it); the one after the last step
// runs once training is done.
inline bool eval_due(const TrainConfig& train, int steps_done) {
  return train.eval_every > 0 && steps_done > 0 &&
         (steps_done % train.eval_every == 0 || steps_done == train.steps);
}

// Opens data.val_path as the validation stream for a model of `seq_len` and `vocab` ids, checking
// it holds train.eval_batches global batches; ConfigError naming data.val_path otherwise.
data::Sampler open_validation(const RunConfig& config, int seq_len, int vocab);

// Peak resident set size of this process in KiB (0 where unknown).
int64_t peak_rss_kb();

}  // namespace bw::runtime
