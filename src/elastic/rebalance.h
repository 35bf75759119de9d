// Re-fitting the split of the global batch across pipelines to their measured speed
// (elastic.rebalance, docs/elastic.md "Rebalancing the batch").
//
// The planner splits a step's microbatches by its estimate of each pipeline, T(m) = fixed +
// per_microbatch x m (plan/templates.h). A slow or throttled device makes that estimate wrong for
// its pipeline, and the whole step then waits for it at the gradient all-reduce. fit_split
// calibrates each pipeline's estimate by what it measured at its current count (factor =
// measured / T(m)), then gives the same total of microbatches out again, one at a time, to the
// pipeline whose calibrated time after taking it is the least: for increasing T this minimises
// the slowest pipeline's time. Every pipeline keeps at least one microbatch. The global batch and
// its sample order do not change (a step consumes the same global microbatches whatever the
// split), so exactly-once holds across a rebalance.
//
// The calibration is linear, so where the pipelines' real times are not, a split can look better
// from one side and worse from the other: a 3x-slow pipeline with a planner estimate that
// overstates the fixed cost swings between [2, 6] and [3, 5] forever on the estimate alone.
// RebalanceJudge remembers what each split measured on the current pipelines and judges a split
// it has measured by that measurement, not the estimate (docs/elastic.md).
//
// Pure; thread-safety: the functions are pure; a RebalanceJudge is not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <vector>

namespace bw::elastic {

struct PipelineSpeed {
  int microbatches = 0;    // its share now
  double measured_ms = 0;  // its action list's time per step (slowest rank), mean over a window
  double fixed_ms = 0;     // the planner's estimate T(m) = fixed_ms + per_microbatch_ms x m
  double per_microbatch_ms = 0;
};

struct Split {
  std::vector<int> microbatches;  // per pipeline, summing to the same total
  double current_ms = 0;          // the slowest pipeline now (measured)
  double predicted_ms = 0;        // the slowest pipeline under `microbatches` (calibrated)
  double gain() const { return predicted_ms > 0 ? current_ms / predicted_ms - 1.0 : 0.0; }
};

// The best split of the pipelines' current total; always returned (the same split when nothing
// is better). An estimate that is not positive at the current count is taken as proportional to
// the microbatches.
Split fit_split(const std::vector<PipelineSpeed>& pipelines);

// fit_split, when it is a change and its predicted gain is at least `min_gain` (0.1: the
// slowest pipeline 10% faster); nullopt otherwise.
std::optional<Split> worth_rebalancing(const std::vector<PipelineSpeed>& pipelines,
                                       double min_gain);

// worth_rebalancing with a memory of measured splits (see the top comment).
class RebalanceJudge {
 public:
  // Records `pipelines`' current split with its slowest measured pipeline, then returns
  // worth_rebalancing(pipelines, min_gain), except a split measured before whose slowest
  // pipeline was not faster than now's by min_gain (then nullopt).
  std::optional<Split> judge(const std::vector<PipelineSpeed>& pipelines, double min_gain);
  // The pipelines changed (a node lost or joined): earlier measurements no longer apply.
  void forget() { measured_ms_.clear(); }

 private:
  std::map<std::vector<int>, double> measured_ms_;  // microbatches -> slowest pipeline's time
};

}  // namespace bw::elastic
