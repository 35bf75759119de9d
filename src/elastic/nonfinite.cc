#include "elastic/nonfinite.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/checkpointing.h"

namespace bw::elastic {

StepVerdict judge_step(const runtime::TrainConfig& train, double loss, double grad_norm,
                       SkipCount& skips) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    skips.consecutive = 0;
    return StepVerdict::kApply;
  }
  if (train.nonfinite != "skip" || skips.consecutive >= train.skip_limit) return StepVerdict::kStop;
  skips.total += 1;
  skips.consecutive += 1;
  return StepVerdict::kSkip;
}

std::string divergence_message(const runtime::TrainConfig& train, int step, double loss,
                               double grad_norm, const SkipCount& skips,
                               const std::string& checkpoint_root) {
  int ck_step = -1;
  const auto ck =
      runtime::latest_checkpoint(checkpoint_root.empty() ? train.out_dir : checkpoint_root, &ck_step);
  return fmt::format(
      "training diverged at step {}: the loss is {} and the gradient norm {}{}; the step was "
      "not applied. {}; lower train.lr, raise train.warmup_steps or tighten train.grad_clip",
      step, loss, grad_norm,
      train.nonfinite == "skip"
          ? fmt::format(" after {} skipped steps in a row (train.skip_limit)", skips.consecutive)
          : std::string(),
      ck.empty() ? std::string("There is no checkpoint")
                 : fmt::format("The last good checkpoint is {} (step {}): resume with "
                               "--train.resume={}",
                               ck, ck_step, ck));
}

}  // namespace bw::elastic
