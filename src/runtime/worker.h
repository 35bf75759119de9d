// A worker: one device's share of training (DESIGN.md "Runtime"). It builds only the layers of
// its chunks, runs its action list each step (executor.h), syncs gradients per layer across
// pipelines and computes the global norm (grad_sync.h), clips, and applies AdamW with the
// scheduled learning rate. Checkpoint shards and state loading go through named tensors
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
#include "runtime/optimizer.h"

namespace bw::runtime {

struct StepReport {
  int step = 0;
  int rank = 0;
  double loss = 0.0;       // global-batch loss (every rank reports the same value)
  double grad_norm = 0.0;  // before clipping
  double lr = 0.0;
  double step_ms = 0.0;     // the whole step on this rank
  double exec_ms = 0.0;     // the action list (forward, backward, p2p)
  double compute_ms = 0.0;  // inside F/B/I/W
  double wait_ms = 0.0;     // blocked on p2p
  double data_ms = 0.0;     // reading microbatches
  double post_ms = 0.0;     // posting isend/irecv
  double free_ms = 0.0;     // releasing finished microbatches
  double sync_ms = 0.0;     // gradient sync + norm + optimizer
  int num_actions = 0;
  int64_t peak_rss_kb = 0;
  std::vector<std::array<double, 4>> chunk_ms;  // per chunk of the pipeline: F, B, I, W ms

  nlohmann::json to_json() const;
  static StepReport from_json(const nlohmann::json& doc);
};

class Worker {
 public:
  // `store` is null when the world has one rank (no communication).
  Worker(const RunConfig& config, const RunLayout& layout, int rank,
         c10::intrusive_ptr<c10d::Store> store);
  ~Worker();

  StepReport run_step(int step);

  int rank() const { return rank_; }
  const model::GptConfig& model_config() const { return model_; }
  const std::map<int, std::shared_ptr<model::Layer>>& layers() const { return layers_; }

  // Parameters and optimizer state of the layers this rank owns (the lowest rank of each replica
  // set): "layers.{i}.{param}" and "layers.{i}.{param}.exp_avg" / ".exp_avg_sq" / ".step".
  NamedTensors owned_parameters() const;
  NamedTensors owned_optimizer_state() const;
  // Loads every held layer's parameters (and optimizer state when given) by name; ConfigError
  // naming the first missing tensor or a shape mismatch.
  void load_state(const std::map<std::string, torch::Tensor>& params,
                  const std::map<std::string, torch::Tensor>* optimizer_state);

  // Whether this rank saves tensor "layers.{i}...." (it is the lowest rank holding layer i).
  bool owns(const std::string& tensor_name) const;

  // FNV-1a of each held layer's parameter bytes.
  std::vector<std::pair<int, uint64_t>> layer_checksums() const;

 private:
  RunConfig config_;
  RunLayout layout_;
  int rank_;
  int pipeline_;
  int device_;
  model::GptConfig model_;
  std::map<int, std::shared_ptr<model::Layer>> layers_;
  std::optional<data::Sampler> sampler_;
  std::unique_ptr<Transport> world_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<Optimizer> optimizer_;
};

// Peak resident set size of this process in KiB (0 where unknown).
int64_t peak_rss_kb();

}  // namespace bw::runtime
