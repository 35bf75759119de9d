// The one rule for a step whose loss or gradient norm is not finite (docs/runtime.md
// "Divergence"), used by the single process and by the supervisor alike: under
// train.nonfinite = "stop", or once train.skip_limit steps in a row were skipped, the run stops
// with the step unapplied; under "skip" the step's update is skipped on every rank.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "runtime/config.h"

namespace bw::elastic {

// Non-finite steps skipped so far, and in a row.
struct SkipCount {
  int total = 0;
  int consecutive = 0;
};

enum class StepVerdict { kApply, kSkip, kStop };

// The verdict on a step with this loss and gradient norm; `skips` is updated for kApply (no
// skip in a row any more) and kSkip (one more), left as it was for kStop.
StepVerdict judge_step(const runtime::TrainConfig& train, double loss, double grad_norm,
                       SkipCount& skips);

// The error of a kStop: the values, the skip count where it applies, the newest complete
// checkpoint under train.out_dir to resume from, and what to change.
std::string divergence_message(const runtime::TrainConfig& train, int step, double loss,
                               double grad_norm, const SkipCount& skips,
                               const std::string& checkpoint_root = {});

}  // namespace bw::elastic
