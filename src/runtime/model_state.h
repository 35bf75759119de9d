// A worker's model state that outlives generations (docs/elastic.md "Model state"): the layers it
// holds, with their parameters and AdamW state, and how many committed steps have been applied to
// them. The per-generation parts (transport, executor, gradient sync) are rebuilt from each
// generation's layout around the same ModelState, so a reconfiguration never touches a surviving
// layer's bytes.
//
// A layer can be exported as one flat master-dtype (float32) tensor [parameters..., exp_avg..., exp_avg_sq...]
// (parameter order of model::Layer::parameter_list) plus its AdamW step count, imported from that
// on another worker, and dropped. Import then export is the identity, bit for bit, so a layer
// received during state transfer is a bitwise replica of its source.
//
// Invariants: every held layer has exactly one entry in the optimizer; the optimizer is rebuilt
// (carrying every held layer's state over by name) whenever the set of layers changes.
//
// Thread-safety: none; one thread drives a ModelState.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/placement.h"
#include "runtime/checkpoint.h"
#include "runtime/config.h"
#include "runtime/optimizer.h"

namespace bw::runtime {

// The flat per-layer state, the one definition of its wire format (state transfer, export and
// import): the `values` parameters of a layer, or of a range of one, as one master-dtype tensor
// of kParts * values elements, [parameters | exp_avg | exp_avg_sq], each part in parameter_list
// order, flattened; the AdamW step count travels beside it.
struct LayerState {
  static constexpr int kParts = 3;
  enum Part { kParam = 0, kExpAvg = 1, kExpAvgSq = 2 };

  torch::Tensor flat;
  int64_t adam_step = 0;

  // An uninitialised state of `values` parameters (a receive buffer).
  static LayerState empty(int64_t values, const model::Placement& placement) {
    return {torch::empty({kParts * values}, placement.master()), 0};
  }
  // The three parts, each of the same length, joined.
  static LayerState join(const torch::Tensor& param, const torch::Tensor& exp_avg,
                         const torch::Tensor& exp_avg_sq, int64_t step) {
    return {torch::cat({param, exp_avg, exp_avg_sq}), step};
  }
  int64_t values() const { return flat.numel() / kParts; }
  // [begin, begin + len) of one part (a view).
  torch::Tensor part(Part p, int64_t begin, int64_t len) const {
    return flat.narrow(0, p * values() + begin, len);
  }
  torch::Tensor part(Part p) const { return part(p, 0, values()); }
};

// A contiguous slice [begin, end) of one layer's flat parameters (parameter_list order, each
// flattened) with the same slice of its AdamW moments and of its gradient: what a rank of a
// sharded stage keeps of a segmented layer (layout.h). `step` counts the AdamW updates applied.
struct Shard {
  int64_t begin = 0, end = 0;
  torch::Tensor param, exp_avg, exp_avg_sq, grad;  // float32 [end - begin]
  int64_t step = 0;

  int64_t size() const { return end - begin; }
};

class ModelState {
 public:
  // On the CPU, in train.precision ("auto" = fp32 there).
  ModelState(const TrainConfig& train, model::GptConfig model, uint64_t seed);
  // On `placement` (runtime/device.h worker_placement): layers, moments and flat exports live on
  // its device.
  ModelState(const TrainConfig& train, model::GptConfig model, uint64_t seed,
             model::Placement placement);

  const model::GptConfig& model() const { return model_; }
  // Device and dtypes of this worker (train.precision): master weights, moments and the flat
  // export are in placement().master_dtype.
  const model::Placement& placement() const { return placement_; }
  // Whether the layer is held whole (holds) or as a shard (holds_shard); layers() lists both.
  bool holds(int layer) const { return layers_.count(layer) > 0; }
  bool holds_shard(int layer) const { return shards_.count(layer) > 0; }
  std::vector<int> layers() const;
  // [begin, end) of the layer's flat parameters held: [0, n) when whole, {0, 0} when not held.
  std::pair<int64_t, int64_t> held_range(int layer) const;
  Shard& shard(int layer);
  const std::map<int, Shard>& shards() const { return shards_; }
  // Flat [parameters | exp_avg | exp_avg_sq] of [begin, end) (within held_range) and the AdamW
  // step: a piece for state transfer.
  LayerState export_range(int layer, int64_t begin, int64_t end) const;
  // Makes the layer a shard of [begin, end) from `pieces` (export_range output with their begin
  // offsets) and what is held locally; InternalError when they do not cover the range. With
  // [0, n) and `whole`, the layer is held whole instead.
  void assemble(int layer, int64_t begin, int64_t end, bool whole,
                const std::vector<std::pair<int64_t, LayerState>>& pieces);
  const std::map<int, std::shared_ptr<model::Layer>>& layer_map() const { return layers_; }

  // Adds layer `layer` with its initial weights (from the model seed) and no AdamW state; no-op
  // when held.
  void add_initial(int layer);
  // Adds the slice [begin, end) of layer `layer`'s initial weights as a shard (no AdamW state),
  // without keeping the whole layer; no-op when the layer is held.
  void add_initial_shard(int layer, int64_t begin, int64_t end);
  void drop(int layer);
  // Keeps exactly `layers` (adding missing ones with initial weights).
  void keep_only(const std::vector<int>& layers);

  // Elements of a layer's flat export.
  int64_t flat_numel(int layer) const;
  LayerState export_layer(int layer) const;
  // Replaces (or adds) the layer's parameters and AdamW state. InternalError on a size mismatch.
  void import_layer(int layer, const LayerState& state);

  Optimizer& optimizer();

  // Steps committed and applied so far (the next step to run).
  int64_t steps_done = 0;
  // Of those, steps skipped for a non-finite loss or gradient norm (train.nonfinite = "skip"):
  // they consumed their samples but applied no update, and the learning-rate schedule does not
  // advance over them (it runs on steps_done - steps_skipped updates, as Megatron-LM's does).
  int64_t steps_skipped = 0;

  // Named parameters and optimizer tensors ("layers.{i}...") of `layers`, for checkpoint shards.
  // A tied matrix is stored once, as its primary copy (model::tied_groups): the other copies are
  // left out (load_checkpoint fills them back in).
  NamedTensors parameters_of(const std::vector<int>& layers) const;
  NamedTensors optimizer_state_of(const std::vector<int>& layers);

  // FNV-1a 64 of each held layer's parameter bytes, and of its AdamW state.
  std::map<int, uint64_t> parameter_checksums() const;
  std::map<int, uint64_t> optimizer_checksums();
  // Per tied group (model::tied_groups), FNV-1a 64 of each held copy and of its AdamW state.
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> tied_copy_checksums();

 private:
  void invalidate();

  TrainConfig train_;
  model::GptConfig model_;
  uint64_t seed_;
  model::Placement placement_;
  std::map<int, std::shared_ptr<model::Layer>> layers_;
  std::unique_ptr<Optimizer> optimizer_;
  std::map<std::string, ParamState> pending_state_;  // state to install at the next rebuild
  std::map<int, Shard> shards_;
  std::set<std::string> tied_copies_;  // checkpoint names of the non-primary tied copies
};

// FNV-1a 64 over the bytes of `tensors`, in order.
uint64_t fnv1a(const std::vector<torch::Tensor>& tensors, uint64_t h = 1469598103934665603ULL);

}  // namespace bw::runtime
