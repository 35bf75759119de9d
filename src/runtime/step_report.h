// What one rank reports to the coordinator after each step (the store key g{g}/ready/{step}/{rank},
// elastic/keys.h): the loss, timings and the samples it fed. Pure (no LibTorch), so the fuzz
// target of the coordinator's store messages reads it as the coordinator does (fuzz/).
//
// Thread-safety: a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  double gather_ms = 0.0;   // sharded stage: all-gathers of parameters (inside compute_ms)
  double reduce_ms = 0.0;   // sharded stage: gradient all-reduces (inside compute_ms)
  double sync_ms = 0.0;     // gradient sync + norm + optimizer
  // Blocked handing the last checkpoint shard to its sink, at the end of the previous step
  // (checkpoint_sink.h: waiting for the write before it, plus the snapshot); 0 when none.
  double checkpoint_ms = 0.0;
  int num_actions = 0;
  int64_t peak_rss_kb = 0;
  // On a GPU (0 on the CPU; runtime/device.h): the bytes the CUDA caching allocator held on the
  // rank's device when the step began (its parameters, gradients and optimizer state), and the
  // bytes allocated there during the step (inputs, activations, gradients: kernels' outputs).
  int64_t device_bytes = 0;
  int64_t device_step_allocated_bytes = 0;
  std::vector<std::array<double, 4>> chunk_ms;  // per chunk of the pipeline: F, B, I, W ms
  std::vector<int64_t> samples;  // data window ids this rank fed into chunk 0 (any order)
  // Tied copies this rank holds, per group, as GradSync::tied_checksums of the parameters the
  // step ran with; the coordinator checks that every copy agrees (empty when untied).
  std::map<std::string, std::vector<int64_t>> tied;
  // The validation loss of the parameters this step started from (after `step` updates), when
  // an evaluation was due then (worker.h, eval_due); every rank reports the same value.
  std::optional<double> val_loss;
  double eval_ms = 0.0;  // the evaluation's forward passes and reduction

  nlohmann::json to_json() const;
  // ConfigError naming the field when `doc` is not a report (a missing field, a wrong type, a
  // count out of range): a worker of another build, or not a worker at all.
  static StepReport from_json(const nlohmann::json& doc);
};

}  // namespace bw::runtime
