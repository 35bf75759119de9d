// Slow ranks (docs/observability.md "Slow ranks"): which rank of a generation computes more
// slowly than the others doing comparable work.
//
// A rank's work per step is the model FLOPs of what it computes: the FLOPs per token of the
// layers it holds (shape::TransformerShape::layer_flops_per_token) times the tokens it runs them
// on (its pipeline's microbatches x its rows of each microbatch x seq_len). Its speed is its
// compute time (forward and backward, StepReport::compute_ms) per unit of that work, and its
// relative compute is that over the median rank's. Ranks doing the same work (the same stage
// in pipelines of the same shape) are so compared with each other directly; ranks of different
// stages or pipelines through the model's own FLOPs, so a heterogeneous plan needs no peers.
// A rank with no work (one that holds only the embedding lookup) is not judged.
//
// A rank is flagged slow when its relative compute was above `threshold` in each of the last
// `window` committed steps of the generation, and stays flagged until a step brings it under.
// The history restarts with every generation (its ranks and work are new).
//
// Thread-safety: not thread-safe (the coordinator's thread only). Pure: no LibTorch.
#pragma once

#include <vector>

namespace bw::elastic {

class SlowRanks {
 public:
  SlowRanks(double threshold, int window);
  // A new generation: each rank's work per step (any unit, > 0; 0 = not judged).
  void reset(std::vector<double> work);
  // One committed step: each rank's compute milliseconds (one per rank of reset()'s list).
  void add(const std::vector<double>& compute_ms);
  // Each rank's relative compute in the last step (0 for a rank not judged).
  const std::vector<double>& relative() const { return relative_; }
  // The ranks flagged after the last step, ascending.
  std::vector<int> slow() const;
  bool judged() const;  // at least two ranks with work: a median means something

 private:
  double threshold_;
  int window_;
  std::vector<double> work_;
  std::vector<double> relative_;
  std::vector<int> over_;  // steps in a row over the threshold
};

}  // namespace bw::elastic
