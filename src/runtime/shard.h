// Segmented layers on a rank (docs/runtime.md "Sharded stages"; layout.h for the terms).
//
// A rank keeps a segmented layer as a Shard of ModelState: its slice of the flat parameters, of
// both AdamW moments and of the gradient. Compute runs on a full-shape "compute layer"
// (model::Layer) whose parameters are filled from the shards:
// - on a stage of one rank the shard is the whole layer, and the compute layer's parameters stay
//   materialised (refreshed after every update);
// - on a stage of w > 1 ranks (FULL_SHARD, as FSDP does it) the compute layer's parameter storage
//   is empty except between gather() and release(): gather() all-gathers the stage's shards into
//   it, release() frees it. Autograd's saved tensors share that storage, so the executor gathers
//   again before a layer's backward. The gather goes straight into one buffer that the
//   parameters point into (no copy). Each microbatch's backward of a layer accumulates into one
//   flat gradient buffer (prepare_gradients()); reduce_gradients() all-reduces it over the stage
//   (Gloo in LibTorch 1.13 has no reduce-scatter), adds this rank's slice to the shard's gradient
//   and frees the rest.
//
// The update is AdamW per piece: a piece is one parameter's elements inside one segment, so the
// replicas of a segment (one rank per pipeline) run the same operations on tensors of the same
// length and stay bitwise identical, however each pipeline cuts the layer.
//
// Thread-safety: one thread drives a StageShards.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "runtime/comm.h"
#include "runtime/config.h"
#include "runtime/layout.h"
#include "runtime/model_state.h"

namespace bw::runtime {

// One parameter's elements [begin, end) of a layer's flat vector, within one segment.
struct Piece {
  int layer = 0;
  int64_t begin = 0, end = 0;  // in the layer's flat vector
  bool decay = false;          // weight decay applies (a matrix)
};

class StageShards {
 public:
  // `layers`: this rank's segmented layers; `group`: its stage (null when the stage has one rank).
  StageShards(const RunLayout& layout, int rank, ModelState& state, const std::vector<int>& layers,
              uint64_t seed, Transport* group);

  const std::map<int, std::shared_ptr<model::Layer>>& compute_layers() const { return compute_; }
  bool empty() const { return compute_.empty(); }
  bool sharded() const { return group_ != nullptr; }

  void gather(int layer);
  void release(int layer);
  // Milliseconds spent in gather() and in prepare_gradients() + reduce_gradients() (collective
  // and copies) since the last call; the executor reports them per step.
  std::pair<double, double> take_comm_ms();
  // Stage of w > 1 ranks: before one microbatch's backward of `layer`, its parameters' gradients
  // become views of one zeroed flat buffer, which autograd accumulates into in place; after the
  // backward, reduce_gradients() all-reduces that buffer over the stage.
  void prepare_gradients(int layer);
  void reduce_gradients(int layer);
  // Before a step: shard gradients zero, compute gradients cleared.
  void zero_gradients();
  // After the step's backward: stage of one rank: the compute layers' gradients into the shards.
  void collect_gradients();
  // The shard gradient of a segmented layer this rank runs.
  torch::Tensor shard_gradient(int layer) { return state_.shard(layer).grad; }
  // Squared norm of this rank's counted pieces, in double (segments whose lowest rank this is).
  double counted_sq_norm() const;
  // AdamW on every piece with gradient factor `clip` and learning rate `lr`; then the compute
  // layers of a one-rank stage are refreshed.
  void apply(double clip, double lr, const TrainConfig& train);

  // Full named tensors of `layer` (parameters, and AdamW state when it has any) assembled from
  // the stage's shards: a collective over the stage when it has several ranks.
  NamedTensors full_parameters(int layer);
  NamedTensors full_optimizer_state(int layer);
  // Loads this rank's slices from full named tensors (a checkpoint).
  void load(int layer, const std::map<std::string, torch::Tensor>& params,
            const std::map<std::string, torch::Tensor>* optimizer_state);
  // FNV-1a of (parameters) and (AdamW moments, step) of every segment this rank holds, keyed
  // "{layer}/{begin}-{end}".
  std::map<std::string, std::pair<uint64_t, uint64_t>> segment_checksums() const;

 private:
  torch::Tensor gather_flat(const torch::Tensor& slice, int layer);

  const RunLayout& layout_;
  int rank_;
  ModelState& state_;
  Transport* group_;
  std::map<int, std::shared_ptr<model::Layer>> compute_;
  std::vector<Piece> pieces_;
  std::vector<Segment> segments_;  // of this rank's layers, the ones it holds
  std::map<int, torch::Tensor> grad_buffer_;  // layer -> its full flat gradient being computed
  double gather_ms_ = 0, reduce_ms_ = 0;
};

// AdamW (decoupled weight decay) on flat tensors, in the operation order of
// torch::optim::AdamW; `step` is the update's 1-based count.
void adamw_update(torch::Tensor param, const torch::Tensor& grad, torch::Tensor exp_avg,
                  torch::Tensor exp_avg_sq, int64_t step, double lr, double weight_decay,
                  const TrainConfig& train);

}  // namespace bw::runtime
