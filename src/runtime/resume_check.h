// Whether a checkpoint fits the run that resumes from it. A resume continues the data order of
// the run that wrote the checkpoint: step k consumes samples [k*G, (k+1)*G) of the permutation
// seeded by data.seed, G = pipeline.microbatches x pipeline.microbatch_size (DESIGN.md "Data").
// So the sidecar's step must agree with its data position (next_sample = step x G of the
// config it records), and the resuming run must use the same global batch and data seed (and
// model); otherwise samples would be skipped or repeated without a word. Re-deriving the position
// for a different G is not done: the error says which keys to restore.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/checkpoint.h"
#include "runtime/config.h"

namespace bw::runtime {

// What a sidecar's recorded config says about the data order; read leniently (only these keys),
// so checkpoints of older builds whose configs no longer validate still load.
struct CheckpointRunFacts {
  std::optional<int64_t> microbatches, microbatch_size, data_seed;
  std::optional<std::string> model_name;
  bool tie_embeddings = false;  // model.tie_embeddings (absent, as before the key: false)
  std::optional<int64_t> global_batch() const {
    if (!microbatches || !microbatch_size) return std::nullopt;
    return *microbatches * *microbatch_size;
  }
};
CheckpointRunFacts run_facts(const CheckpointInfo& info);

// ConfigError unless next_sample == step x G of the recorded config (when it records one).
// `where` names the sidecar.
void check_sidecar_fits(const CheckpointInfo& info, const std::string& where);

// ConfigError, naming the keys and the values to restore, unless `config` can resume from
// `info`: the sidecar fits, step < train.steps, and the global batch, data.seed and model.name
// equal the recorded ones.
void check_resume(const RunConfig& config, const CheckpointInfo& info, const std::string& where);

}  // namespace bw::runtime
