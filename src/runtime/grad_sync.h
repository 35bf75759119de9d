// Gradient sync across pipelines, per layer (docs/design.md "Runtime"; Oobleck §5 syncs per layer
// because heterogeneous pipelines split the model differently).
//
// The replicas of a layer (one rank per pipeline) all-reduce (sum) its gradient. Consecutive
// layers with the same replica set share one flat bucket and one process group; groups are cached
// per member set (a ProcessGroupGloo on the store prefix "g{generation}/grp/{r0}-{r1}-..."), and
// two buckets with the same members reuse one group. Groups come from the generation's
// TransportFactory, so tests can inject faults. Buckets are visited in one global layer
// order on every rank, so collectives on overlapping groups cannot deadlock.
//
// Segmented layers (layout.h) sync per Segment instead: the holders of a segment (one rank per
// pipeline) all-reduce that slice of their shard gradients, on a group cached the same way; units
// (buckets and segments) are visited in layer order, so the global order argument holds for both.
//
// Tied parameters (model::tied_groups, docs/runtime.md "Tied embeddings across stages"): after
// the buckets, the copies of a tied matrix within each pipeline are summed (Megatron-LM's
// embedding group): on one rank when it holds every copy, else over the group of the pipeline's
// ranks holding them (its first and last stage). Each copy then holds the pipelines' summed
// gradient of its own use (the bucket all-reduce), so the tied sum gives every copy in every
// pipeline the same bits: the sum over both uses and the global batch, as in one process. Summing
// within pipelines after the cross-pipeline sum, never across all copies at once, counts each
// use once. A rank takes part in at most one such group, after all its buckets, so the global
// order argument still holds. Tied layers must not be segmented (ConfigError).
//
// Then the global gradient norm: each layer's squared norm is counted once (by the lowest rank of
// its replica set), a tied matrix once (by its primary copy's counter), summed over the world
// together with the step's loss in one all-reduce.
//
// Thread-safety: one GradSync per worker thread.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "runtime/comm.h"
#include "runtime/layout.h"

namespace bw::runtime {

class GradSync {
 public:
  // `world` may be null when the world has one rank.
  GradSync(const RunLayout& layout, int rank, std::map<int, std::shared_ptr<model::Layer>> layers,
           const TransportFactory& make_group, Transport* world,
           class StageShards* shards = nullptr, const std::vector<model::TiedGroup>& ties = {});

  // All-reduces every bucket this rank belongs to (gradients summed in place).
  void sync_gradients();

  // Returns {total squared grad norm, summed loss} over the world; `local_loss` is this rank's
  // share of the step loss.
  std::pair<double, double> global_norm_and_loss(double local_loss);

  int num_buckets() const { return static_cast<int>(mine_.size()); }
  // Tied groups this rank sums, and of those the ones summed over a group of ranks.
  int num_tied() const { return static_cast<int>(tied_.size()); }
  int num_tied_across() const;
  // Per tied group, a checksum of each copy this rank holds (the int64 sum of the copy's 32-bit
  // words: any single differing value changes it); copies that are bitwise equal agree.
  std::map<std::string, std::vector<int64_t>> tied_checksums() const;
  // Hands the sub-group transports over (to be discarded in the background).
  std::vector<std::unique_ptr<Transport>> release_groups();

 private:
  struct MyBucket {
    Bucket bucket;
    std::vector<torch::Tensor> params;  // in layer order, then parameter order
    Transport* group = nullptr;
    // A segment of a segmented layer instead: its slice of this rank's shard gradient.
    bool segment = false;
    int layer = 0;
    int64_t offset = 0, count = 0;  // within the shard
  };
  const RunLayout& layout_;
  int rank_;
  std::map<int, std::shared_ptr<model::Layer>> layers_;
  Transport* world_;
  std::map<std::vector<int>, std::unique_ptr<Transport>> groups_;
  std::vector<MyBucket> mine_;
  // A tied group's copies held by this rank, summed locally, then over `group` when not null.
  struct MyTie {
    std::string name;
    std::vector<torch::Tensor> params;
    Transport* group = nullptr;
  };
  std::vector<MyTie> tied_;
  std::set<std::pair<int, std::string>> norm_skip_;  // non-primary tied copies
  std::vector<int> owned_layers_;  // layers whose norm this rank counts
  class StageShards* shards_;
};

// Every parameter of `layers` gets a defined, zeroed .grad.
void zero_gradients(const std::map<int, std::shared_ptr<model::Layer>>& layers);

}  // namespace bw::runtime
