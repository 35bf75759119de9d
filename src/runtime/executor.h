// The executor: runs one device's action list for one step (docs/design.md "Runtime").
//
// Per action (after PyTorch's pipelining runtime and the lowering contract of schedule/):
//   RECV_F/RECV_B  post an irecv into a fresh buffer (shapes are known from the model config, so
//                  no metadata is exchanged); it is waited by the compute action that consumes it.
//   F              run the chunk's layers; on the last chunk, the loss scaled by the
//                  microbatch's share of the global batch (mbs / G), so gradients summed over all
//                  microbatches of all pipelines equal the full-batch gradient.
//   B              full backward of the chunk; parameter gradients accumulate in .grad.
//   I / W          zero-bubble split: backward to the chunk input only (keeping the graph), then
//                  to the parameters only (torch::autograd::backward with `inputs`).
//   SEND_F/SEND_B  isend the output activation / input gradient; all sends are waited before the
//                  step ends, so no buffer is reused while in flight.
// Consecutive chunks on the same device hand tensors over locally (no communication).
// Sharded stages (shard.h): each rank of a stage computes its rows (samples) of every microbatch,
// and activations and gradients go to the ranks of the neighbouring stage that compute the same
// rows (one message per overlapping pair). On a stage of several ranks every layer runs on its
// own: parameters gathered before the layer's forward and again before its backward, released
// after, its gradient reduced over the stage after each backward (zero-bubble I/W splits are
// not supported there).
//
// Invariants: each chunk's input is a leaf (detached) so chunk graphs are independent; every
// (chunk, microbatch) state is freed after its last backward action; a step ends with no pending
// receive and no live state (checked).
//
// Thread-safety: one Executor per worker thread.
#pragma once

#include <torch/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "model/placement.h"
#include "runtime/comm.h"
#include "runtime/layout.h"
#include "runtime/trace_events.h"

namespace bw::runtime {

// Inputs and targets (int64 [mbs, T]) of local microbatch m of the current step.
using BatchFn = std::function<std::pair<torch::Tensor, torch::Tensor>(int microbatch)>;

struct StepStats {
  double loss = 0.0;        // sum over this device's last-chunk microbatches of loss * mbs / G
  double compute_ms = 0.0;  // inside F/B/I/W LibTorch calls
  double wait_ms = 0.0;     // blocked on receives and sends
  double data_ms = 0.0;     // reading microbatches from the sampler
  double post_ms = 0.0;     // posting isend/irecv
  double free_ms = 0.0;     // releasing a finished microbatch graph and tensors
  double gather_ms = 0.0;   // sharded stage: parameter all-gathers (counted in compute_ms too)
  double reduce_ms = 0.0;   // sharded stage: gradient all-reduces (counted in compute_ms too)
  double total_ms = 0.0;    // the whole action list
  // Per chunk of the pipeline: milliseconds in F, B, I and W over the step (zero for chunks on
  // other devices): the op timings the simulator can be fed with.
  std::vector<std::array<double, 4>> chunk_ms;
  int num_actions = 0;
  std::vector<int> first_chunk_microbatches;  // local microbatches whose chunk-0 forward ran here
};

// Called with "forward", "backward" or "p2p" before each such action or wait (fault injection).
using PhaseHook = std::function<void(const char* phase)>;

class Executor {
 public:
  // `layers` maps layer index -> layer for every layer of this device's chunks. `transport` may
  // be null only when the pipeline has one rank. `loss_scale` = mbs / G. This rank computes rows
  // `rows` of every microbatch; `shards` (may be null) gathers and reduces a sharded stage's
  // layers.
  Executor(model::GptConfig config, const PipelineLayout& pipeline, int device,
           std::map<int, std::shared_ptr<model::Layer>> layers, Transport* transport,
           int microbatch_size, double loss_scale, std::pair<int, int> rows = {0, 0},
           class StageShards* shards = nullptr, bool recompute = false,
           model::Placement placement = {});

  StepStats run_step(const BatchFn& batch);
  // Forward only, for a validation loss: the action list's F, RECV_F and SEND_F in order
  // (a subsequence of a deadlock-free list is deadlock-free: every wait it keeps was already
  // there, and what it drops only waited on later work), without autograd. Returns, per local
  // microbatch, this rank's rows' mean loss weighted by their share of the microbatch (0 where
  // the last chunk is elsewhere): summed over a stage's ranks, the microbatch's mean loss. The
  // hook sees "eval" before each forward, and nothing else.
  std::vector<double> run_forward(const BatchFn& batch);
  void set_hook(PhaseHook hook) { hook_ = std::move(hook); }
  // Fault injection `slow` (elastic/inject.h): every forward and backward computation then takes
  // `factor` (>= 1) times as long, the rest of it spent asleep, as on a slower device.
  void set_slowdown(double factor) { slowdown_ = factor; }
  // While set (train.trace_steps), run_step appends a span per action to `out`: each compute
  // action from its start (or the end of the receive it waited for) to its end, each receive
  // from posted to completed, each send from posted to its wait's return. Null: nothing recorded.
  void set_trace(std::vector<TraceSpan>* out) { trace_ = out; }

 private:
  enum Dir { kForward = 0, kBackward = 1 };
  // Milliseconds since t0 of a computation, stretched by the injected slowdown.
  double compute_ms_since(std::chrono::steady_clock::time_point t0) const;
  double slowdown_ = 1.0;
  struct Slot {              // one (chunk, microbatch) in flight
    torch::Tensor input;     // leaf; requires grad unless chunk 0
    torch::Tensor output;    // chunk output (last chunk: the scaled loss)
    torch::Tensor out_grad;  // gradient arriving for output (empty on the last chunk)
    torch::Tensor in_grad;   // gradient of input, after B or I
    // Sharded stage: each layer's (input leaf, output), the first input being `input`.
    // Recomputing: each layer's input only (outputs empty), and the last chunk's targets.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> layer_io;
    torch::Tensor targets;
  };
  struct Peer {  // a rank of a neighbouring stage and the rows it shares with this one
    int rank;
    int begin, end;
  };
  using Key = std::pair<int, int>;  // (chunk, microbatch)

  void forward(int chunk, int mb, const BatchFn& batch, StepStats& stats);
  void forward_only(int chunk, int mb, const BatchFn& batch, std::vector<double>& losses,
                    StepStats& stats);
  void post_recv_forward(int chunk, int mb);
  void send_forward(int chunk, int mb);
  void backward(int chunk, int mb, bool inputs_only, bool weights_only, StepStats& stats);
  // Per layer, last to first: (gather,) forward again from the kept input, backward, (release,
  // reduce). Leaves the chunk input's gradient in slot.input.grad().
  void recompute_backward(Slot& slot, int chunk, const std::vector<torch::Tensor>& grads);
  double rows_scale() const;
  torch::Tensor take_received(Dir dir, int chunk, int mb, StepStats& stats);
  std::vector<Peer> peers(int chunk) const;
  void sharded_backward(Slot& slot, int chunk, const std::vector<torch::Tensor>& grads);
  int tag(Dir dir, int consumer_chunk, int mb) const;
  std::vector<int64_t> chunk_output_shape(int chunk, int rows) const;
  std::vector<torch::Tensor> chunk_parameters(int chunk) const;
  bool local(int chunk) const;
  // Layer l's forward under the placement's autocast; every output but the head's logits leaves
  // in the compute dtype (bf16: the activation between layers and stages).
  torch::Tensor run_layer(int l, const torch::Tensor& x);

  model::GptConfig config_;
  const PipelineLayout& pipeline_;
  int device_;
  std::map<int, std::shared_ptr<model::Layer>> layers_;
  Transport* transport_;
  int microbatch_size_;
  double loss_scale_;
  std::pair<int, int> rows_;
  StageShards* shards_;
  bool sharded_;
  bool recompute_;
  model::Placement placement_;
  int last_chunk_;

  std::map<Key, Slot> slots_;
  std::map<std::tuple<int, int, int>,
           std::vector<std::pair<std::unique_ptr<Request>, torch::Tensor>>>
      recvs_;
  std::map<std::tuple<int, int, int>, torch::Tensor> handoff_;  // local chunk-to-chunk tensors
  std::map<Key, torch::Tensor> outgoing_grads_;                 // input gradients for SEND_B
  std::vector<std::unique_ptr<Request>> sends_;
  PhaseHook hook_;
  // Tracing (set_trace): when each receive was posted, where each send action's requests end
  // in sends_, and when the compute of the current action began.
  std::vector<TraceSpan>* trace_ = nullptr;
  std::map<std::tuple<int, int, int>, std::chrono::steady_clock::time_point> recv_posted_;
  struct SendMark {
    schedule::Action action;
    std::chrono::steady_clock::time_point posted;
    size_t begin, end;  // its requests in sends_
    bool done = false;  // its span is recorded
  };
  // Records the span of every send whose requests all completed (Request::completed), at the
  // action boundary where that is first seen.
  void trace_completed_sends();
  std::vector<SendMark> send_marks_;
  std::chrono::steady_clock::time_point compute_begin_;
  void trace_span(const schedule::Action& a, std::chrono::steady_clock::time_point begin,
                  std::chrono::steady_clock::time_point end);
};

}  // namespace bw::runtime
