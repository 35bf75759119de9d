#include "runtime/executor.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <thread>
#include <tuple>

#include "core/check.h"
#include "core/error.h"
#include "runtime/shard.h"

namespace bw::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

double Executor::compute_ms_since(Clock::time_point t0) const {
  const double ms = ms_since(t0);
  if (slowdown_ <= 1.0) return ms;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>((slowdown_ - 1.0) * ms));
  return ms_since(t0);
}

Executor::Executor(model::GptConfig config, const PipelineLayout& pipeline, int device,
                   std::map<int, std::shared_ptr<model::Layer>> layers, Transport* transport,
                   int microbatch_size, double loss_scale, std::pair<int, int> rows,
                   StageShards* shards, bool recompute, model::Placement placement)
    : config_(std::move(config)),
      pipeline_(pipeline),
      device_(device),
      layers_(std::move(layers)),
      transport_(transport),
      microbatch_size_(microbatch_size),
      loss_scale_(loss_scale),
      rows_(rows.second > rows.first ? rows : std::make_pair(0, microbatch_size)),
      shards_(shards),
      sharded_(shards != nullptr && shards->sharded()),
      recompute_(recompute),
      placement_(placement),
      last_chunk_(pipeline.schedule.num_chunks - 1) {
  BW_CHECK(transport_ != nullptr || pipeline.num_ranks() == 1,
           "a pipeline of {} ranks needs a transport", pipeline.num_ranks());
  if (sharded_ || recompute_) {
    for (const auto& a : pipeline.schedule.actions[device]) {
      if (a.kind == schedule::ActionKind::I || a.kind == schedule::ActionKind::W) {
        throw ConfigError(fmt::format(
            "schedule {} splits backward into I and W, which {} do not run; use 1f1b, "
            "interleaved, hanayo or gpipe with {}",
            pipeline.schedule.kind,
            sharded_ ? "sharded stages" : "recomputed activations (pipeline.recompute)",
            sharded_ ? "pipeline.devices_per_stage > 1" : "pipeline.recompute = \"full\""));
      }
    }
  }
  for (int c = 0; c <= last_chunk_; ++c) {
    if (!local(c)) continue;
    for (int l = pipeline.chunk_layers[c].first; l < pipeline.chunk_layers[c].second; ++l) {
      BW_CHECK(layers_.count(l) == 1, "device {} holds chunk {} but not its layer {}", device, c,
               l);
    }
  }
}

bool Executor::local(int chunk) const {
  return chunk >= 0 && chunk <= last_chunk_ && pipeline_.schedule.chunk_device[chunk] == device_;
}

std::vector<Executor::Peer> Executor::peers(int chunk) const {
  const int k = pipeline_.schedule.chunk_device[chunk];
  const int w = pipeline_.widths[k];
  std::vector<Peer> out;
  for (int j = 0; j < w; ++j) {
    auto [b, e] = split_range(microbatch_size_, w, j);
    const int lo = std::max<int>(static_cast<int>(b), rows_.first);
    const int hi = std::min<int>(static_cast<int>(e), rows_.second);
    if (lo < hi) out.push_back({pipeline_.stage_first_rank(k) + j, lo, hi});
  }
  return out;
}

int Executor::tag(Dir dir, int consumer_chunk, int mb) const {
  return (dir * pipeline_.schedule.num_chunks + consumer_chunk) * pipeline_.num_microbatches + mb;
}

std::vector<int64_t> Executor::chunk_output_shape(int chunk, int rows) const {
  return model::output_shape(config_, pipeline_.chunk_layers[chunk].second - 1, rows);
}

std::vector<torch::Tensor> Executor::chunk_parameters(int chunk) const {
  std::vector<torch::Tensor> out;
  for (int l = pipeline_.chunk_layers[chunk].first; l < pipeline_.chunk_layers[chunk].second; ++l) {
    for (const auto& [name, p] : layers_.at(l)->parameter_list()) out.push_back(p);
  }
  return out;
}

torch::Tensor Executor::take_received(Dir dir, int chunk, int mb, StepStats& stats) {
  auto key = std::make_tuple(static_cast<int>(dir), chunk, mb);
  if (auto it = handoff_.find(key); it != handoff_.end()) {
    auto t = std::move(it->second);
    handoff_.erase(it);
    return t;
  }
  auto it = recvs_.find(key);
  BW_CHECK(it != recvs_.end(), "device {}: {} of chunk {} microbatch {} needed but never received",
           device_, dir == kForward ? "activation" : "gradient", chunk, mb);
  if (hook_) hook_("p2p");
  const auto t0 = Clock::now();
  std::vector<torch::Tensor> parts;
  for (auto& [request, buffer] : it->second) {
    request->wait();
    parts.push_back(std::move(buffer));
  }
  stats.wait_ms += ms_since(t0);
  recvs_.erase(it);
  if (trace_ != nullptr) {
    const auto done = Clock::now();
    const schedule::Action recv{
        dir == kForward ? schedule::ActionKind::RECV_F : schedule::ActionKind::RECV_B, chunk, mb};
    const auto posted = recv_posted_.find(key);
    trace_span(recv, posted != recv_posted_.end() ? posted->second : t0, done);
    if (posted != recv_posted_.end()) recv_posted_.erase(posted);
    compute_begin_ = done;  // the compute that needed it starts now
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

void Executor::forward(int chunk, int mb, const BatchFn& batch, StepStats& stats) {
  Slot& slot = slots_[{chunk, mb}];
  std::pair<torch::Tensor, torch::Tensor> data;
  const bool need_data = chunk == 0 || chunk == last_chunk_;
  if (need_data) {
    const auto t_data = Clock::now();
    data = batch(mb);
    if (rows_.first != 0 || rows_.second != microbatch_size_) {
      data.first = data.first.narrow(0, rows_.first, rows_.second - rows_.first);
      data.second = data.second.narrow(0, rows_.first, rows_.second - rows_.first);
    }
    stats.data_ms += ms_since(t_data);
  }
  if (hook_) hook_("forward");
  if (chunk == 0) {
    stats.first_chunk_microbatches.push_back(mb);
    slot.input = data.first;
  } else {
    slot.input = take_received(kForward, chunk, mb, stats).requires_grad_(true);
  }
  const auto t0 = Clock::now();
  torch::Tensor x = slot.input;
  if (recompute_) {
    // Only each layer's input is kept; recompute_backward() runs the layers again.
    torch::NoGradGuard no_grad;
    for (int l = pipeline_.chunk_layers[chunk].first; l < pipeline_.chunk_layers[chunk].second;
         ++l) {
      slot.layer_io.emplace_back(x, torch::Tensor());
      if (sharded_) shards_->gather(l);
      x = run_layer(l, x);
      if (sharded_) shards_->release(l);
    }
    if (chunk == last_chunk_) {
      // The logits are not kept: the loss stands for the chunk's output.
      slot.targets = data.second;
      auto loss = model::lm_loss(x, data.second);
      stats.loss += loss.item<double>() * rows_scale();
      x = loss * rows_scale();
    }
    const double f_ms = compute_ms_since(t0);
    stats.compute_ms += f_ms;
    stats.chunk_ms[chunk][0] += f_ms;
    slot.output = x;
    if (chunk < last_chunk_ && local(chunk + 1)) handoff_[{kForward, chunk + 1, mb}] = x.detach();
    return;
  }
  for (int l = pipeline_.chunk_layers[chunk].first; l < pipeline_.chunk_layers[chunk].second; ++l) {
    if (sharded_) {
      // Each layer its own graph, so its backward can run between gathers of its parameters.
      torch::Tensor in = slot.layer_io.empty() ? x : x.detach().requires_grad_(true);
      shards_->gather(l);
      x = run_layer(l, in);
      shards_->release(l);
      slot.layer_io.emplace_back(in, x);
    } else {
      x = run_layer(l, x);
    }
  }
  if (chunk == last_chunk_) {
    // The rows' mean loss weighted by their share of the microbatch: summed over the stage's
    // ranks, the microbatch's mean.
    const double scale = rows_scale();
    auto loss = model::lm_loss(x, data.second);
    stats.loss += loss.item<double>() * scale;
    x = loss * scale;
    if (sharded_) slot.layer_io.back().second = x;
  }
  const double f_ms = compute_ms_since(t0);
  stats.compute_ms += f_ms;
  stats.chunk_ms[chunk][0] += f_ms;
  slot.output = x;
  if (chunk < last_chunk_ && local(chunk + 1)) {
    handoff_[{kForward, chunk + 1, mb}] = x.detach();
  }
}

void Executor::backward(int chunk, int mb, bool inputs_only, bool weights_only, StepStats& stats) {
  auto it = slots_.find({chunk, mb});
  BW_CHECK(it != slots_.end() && it->second.output.defined(),
           "device {}: backward of chunk {} microbatch {} before its forward", device_, chunk, mb);
  Slot& slot = it->second;
  if (chunk < last_chunk_ && !slot.out_grad.defined()) {
    slot.out_grad = take_received(kBackward, chunk, mb, stats);
  }
  if (hook_) hook_("backward");
  std::vector<torch::Tensor> grads;
  if (chunk < last_chunk_) grads.push_back(slot.out_grad);
  const bool has_input_grad = chunk > 0;
  const auto t0 = Clock::now();
  if (recompute_) {
    recompute_backward(slot, chunk, grads);
  } else if (sharded_) {
    sharded_backward(slot, chunk, grads);
  } else if (inputs_only) {
    // I: gradient of the chunk input only; the graph is kept for W. Chunk 0 has no input
    // gradient (its input is tokens), so its I does nothing and its W does all the work.
    if (has_input_grad) {
      torch::autograd::backward({slot.output}, grads, /*retain_graph=*/true,
                                /*create_graph=*/false, {slot.input});
    }
  } else if (weights_only) {
    torch::autograd::backward({slot.output}, grads, /*retain_graph=*/false,
                              /*create_graph=*/false, chunk_parameters(chunk));
  } else {
    torch::autograd::backward({slot.output}, grads);
  }
  const double b_ms = compute_ms_since(t0);
  stats.compute_ms += b_ms;
  stats.chunk_ms[chunk][inputs_only ? 2 : weights_only ? 3 : 1] += b_ms;
  if (!weights_only && has_input_grad) {
    slot.in_grad = slot.input.grad();
    BW_CHECK(slot.in_grad.defined(), "chunk {} microbatch {}: no input gradient", chunk, mb);
    if (local(chunk - 1)) {
      handoff_[{kBackward, chunk - 1, mb}] = slot.in_grad;
    } else {
      outgoing_grads_[{chunk, mb}] = slot.in_grad;
    }
  }
  // After B or W the chunk is done with this microbatch; SEND_B reads outgoing_grads_.
  if (!inputs_only) {
    const auto t_free = Clock::now();
    slots_.erase(it);
    stats.free_ms += ms_since(t_free);
  }
}

void Executor::sharded_backward(Slot& slot, int chunk, const std::vector<torch::Tensor>& grads) {
  const int first = pipeline_.chunk_layers[chunk].first;
  torch::Tensor grad = grads.empty() ? torch::Tensor() : grads[0];
  for (int i = static_cast<int>(slot.layer_io.size()) - 1; i >= 0; --i) {
    const int l = first + i;
    auto& [in, out] = slot.layer_io[i];
    shards_->gather(l);
    shards_->prepare_gradients(l);
    if (grad.defined()) {
      torch::autograd::backward({out}, {grad});
    } else {
      torch::autograd::backward({out});
    }
    shards_->release(l);
    shards_->reduce_gradients(l);
    out = torch::Tensor();
    if (i > 0) {
      grad = in.grad();
      BW_CHECK(grad.defined(), "chunk {}: layer {} got no input gradient", chunk, l);
      in = torch::Tensor();
    }
  }
}

torch::Tensor Executor::run_layer(int l, const torch::Tensor& x) {
  model::AutocastGuard autocast(placement_);
  torch::Tensor y = layers_.at(l)->forward(x);
  if (model::layer_kind(config_, l) != model::LayerKind::kHead &&
      y.scalar_type() != placement_.compute_dtype) {
    y = y.to(placement_.compute_dtype);
  }
  return y;
}

double Executor::rows_scale() const {
  return loss_scale_ * (rows_.second - rows_.first) / static_cast<double>(microbatch_size_);
}

void Executor::recompute_backward(Slot& slot, int chunk, const std::vector<torch::Tensor>& grads) {
  const int first = pipeline_.chunk_layers[chunk].first;
  const int last = static_cast<int>(slot.layer_io.size()) - 1;
  torch::Tensor grad = grads.empty() ? torch::Tensor() : grads[0];
  for (int i = last; i >= 0; --i) {
    const int l = first + i;
    // The chunk's own input (a received activation, a leaf that requires grad; or token ids)
    // starts layer 0; every other layer starts from a new leaf of its kept input.
    torch::Tensor in = slot.layer_io[i].first;
    if (i > 0) in = in.detach().requires_grad_(true);
    if (sharded_) {
      shards_->gather(l);
      shards_->prepare_gradients(l);
    }
    torch::Tensor out = run_layer(l, in);
    if (chunk == last_chunk_ && i == last) out = model::lm_loss(out, slot.targets) * rows_scale();
    if (grad.defined()) {
      torch::autograd::backward({out}, {grad});
    } else {
      torch::autograd::backward({out});
    }
    if (sharded_) {
      shards_->release(l);
      shards_->reduce_gradients(l);
    }
    if (i > 0) {
      grad = in.grad();
      BW_CHECK(grad.defined(), "chunk {}: layer {} got no input gradient", chunk, l);
    }
    slot.layer_io[i].first = torch::Tensor();
  }
  slot.targets = torch::Tensor();
}

void Executor::post_recv_forward(int c, int m) {
  auto& list = recvs_[{kForward, c, m}];
  for (const auto& peer : peers(c - 1)) {
    auto buf =
        torch::empty(chunk_output_shape(c - 1, peer.end - peer.begin), placement_.activations());
    list.emplace_back(transport_->irecv(buf, peer.rank, tag(kForward, c, m)), buf);
  }
}

void Executor::send_forward(int c, int m) {
  auto& slot = slots_.at({c, m});
  auto out = slot.output.detach();
  for (const auto& peer : peers(c + 1)) {
    auto part = out.narrow(0, peer.begin - rows_.first, peer.end - peer.begin).contiguous();
    sends_.push_back(transport_->isend(part, peer.rank, tag(kForward, c + 1, m)));
  }
}

void Executor::forward_only(int chunk, int mb, const BatchFn& batch, std::vector<double>& losses,
                            StepStats& stats) {
  std::pair<torch::Tensor, torch::Tensor> data;
  if (chunk == 0 || chunk == last_chunk_) {
    data = batch(mb);
    if (rows_.first != 0 || rows_.second != microbatch_size_) {
      data.first = data.first.narrow(0, rows_.first, rows_.second - rows_.first);
      data.second = data.second.narrow(0, rows_.first, rows_.second - rows_.first);
    }
  }
  torch::Tensor x = chunk == 0 ? data.first : take_received(kForward, chunk, mb, stats);
  for (int l = pipeline_.chunk_layers[chunk].first; l < pipeline_.chunk_layers[chunk].second; ++l) {
    if (sharded_) shards_->gather(l);
    x = run_layer(l, x);
    if (sharded_) shards_->release(l);
  }
  if (chunk == last_chunk_) {
    // As in training (forward()), without the 1 / microbatches of the global batch.
    losses[mb] += model::lm_loss(x, data.second).item<double>() * (rows_.second - rows_.first) /
                  static_cast<double>(microbatch_size_);
  } else if (local(chunk + 1)) {
    handoff_[{kForward, chunk + 1, mb}] = x;
  } else {
    slots_[{chunk, mb}].output = x;  // until its SEND_F
  }
}

std::vector<double> Executor::run_forward(const BatchFn& batch) {
  torch::NoGradGuard no_grad;
  // Only "eval" reaches the hook: a fault injected into a training phase stays in training.
  struct HookSwap {
    PhaseHook& slot;
    PhaseHook saved;
    ~HookSwap() { slot = std::move(saved); }
  } restore{hook_, std::move(hook_)};
  hook_ = {};
  StepStats stats;  // take_received counts its waits here; not reported
  std::vector<double> losses(pipeline_.num_microbatches, 0.0);
  using schedule::ActionKind;
  for (const auto& a : pipeline_.schedule.actions[device_]) {
    switch (a.kind) {
      case ActionKind::F:
        if (restore.saved) restore.saved("eval");
        forward_only(a.chunk, a.microbatch, batch, losses, stats);
        break;
      case ActionKind::RECV_F:
        post_recv_forward(a.chunk, a.microbatch);
        break;
      case ActionKind::SEND_F:
        send_forward(a.chunk, a.microbatch);
        slots_.erase(Key{a.chunk, a.microbatch});
        break;
      default:
        break;  // backward work and its messages
    }
  }
  for (auto& s : sends_) s->wait();
  sends_.clear();
  BW_CHECK(recvs_.empty() && handoff_.empty() && slots_.empty(),
           "device {}: evaluation ended with {} unconsumed receives, {} local hand-offs and {} "
           "unsent activations",
           device_, recvs_.size(), handoff_.size(), slots_.size());
  return losses;
}

void Executor::trace_span(const schedule::Action& a, Clock::time_point begin,
                          Clock::time_point end) {
  trace_->push_back({schedule::to_string(a),
                     schedule::is_compute(a.kind) ? std::string(schedule::kind_name(a.kind))
                                                  : std::string("comm"),
                     trace_time_us(begin), trace_time_us(end)});
}

void Executor::trace_completed_sends() {
  const auto now = Clock::now();
  for (auto& m : send_marks_) {
    if (m.done) continue;
    bool all = true;
    for (size_t i = m.begin; i < m.end && all; ++i) all = sends_[i]->completed();
    if (all) {
      trace_span(m.action, m.posted, now);
      m.done = true;
    }
  }
}

StepStats Executor::run_step(const BatchFn& batch) {
  StepStats stats;
  stats.chunk_ms.assign(pipeline_.schedule.num_chunks, {0.0, 0.0, 0.0, 0.0});
  if (shards_ != nullptr) shards_->take_comm_ms();
  const auto t_step = Clock::now();
  using schedule::ActionKind;
  for (const auto& a : pipeline_.schedule.actions[device_]) {
    ++stats.num_actions;
    const int c = a.chunk, m = a.microbatch;
    const auto t_action = Clock::now();
    compute_begin_ = t_action;
    const size_t sends_before = sends_.size();
    switch (a.kind) {
      case ActionKind::F:
        forward(c, m, batch, stats);
        break;
      case ActionKind::B:
        backward(c, m, false, false, stats);
        break;
      case ActionKind::I:
        backward(c, m, true, false, stats);
        break;
      case ActionKind::W:
        backward(c, m, false, true, stats);
        break;
      case ActionKind::RECV_F:
        post_recv_forward(c, m);
        break;
      case ActionKind::RECV_B: {
        auto& list = recvs_[{kBackward, c, m}];
        for (const auto& peer : peers(c + 1)) {
          auto buf =
              torch::empty(chunk_output_shape(c, peer.end - peer.begin), placement_.activations());
          list.emplace_back(transport_->irecv(buf, peer.rank, tag(kBackward, c, m)), buf);
        }
        break;
      }
      case ActionKind::SEND_F:
        send_forward(c, m);
        break;
      case ActionKind::SEND_B: {
        auto it = outgoing_grads_.find({c, m});
        BW_CHECK(it != outgoing_grads_.end(),
                 "device {}: SEND_B of chunk {} microbatch {} before its I/B", device_, c, m);
        auto grad = it->second;
        outgoing_grads_.erase(it);
        for (const auto& peer : peers(c - 1)) {
          auto part = grad.narrow(0, peer.begin - rows_.first, peer.end - peer.begin).contiguous();
          sends_.push_back(transport_->isend(part, peer.rank, tag(kBackward, c - 1, m)));
        }
        break;
      }
    }
    if (schedule::is_comm(a.kind)) stats.post_ms += ms_since(t_action);
    if (trace_ != nullptr) {
      trace_completed_sends();
      if (schedule::is_compute(a.kind)) {
        trace_span(a, compute_begin_, Clock::now());
      } else if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) {
        recv_posted_[{a.kind == ActionKind::RECV_F ? kForward : kBackward, c, m}] = t_action;
      } else if (sends_.size() > sends_before) {
        send_marks_.push_back({a, t_action, sends_before, sends_.size()});
      }
    }
  }
  const auto t0 = Clock::now();
  size_t mark = 0;
  for (size_t i = 0; i < sends_.size(); ++i) {
    sends_[i]->wait();
    // A send action is complete once its last request is (requests are waited in post order).
    for (; trace_ != nullptr && mark < send_marks_.size() && send_marks_[mark].end == i + 1;
         ++mark) {
      if (!send_marks_[mark].done)
        trace_span(send_marks_[mark].action, send_marks_[mark].posted, Clock::now());
    }
  }
  sends_.clear();
  send_marks_.clear();
  recv_posted_.clear();
  stats.wait_ms += ms_since(t0);
  BW_CHECK(recvs_.empty() && handoff_.empty(),
           "device {}: step ended with {} unconsumed receives and {} local hand-offs", device_,
           recvs_.size(), handoff_.size());
  BW_CHECK(slots_.empty() && outgoing_grads_.empty(),
           "device {}: step ended with {} chunk states and {} unsent gradients", device_,
           slots_.size(), outgoing_grads_.size());
  stats.total_ms = ms_since(t_step);
  if (shards_ != nullptr) std::tie(stats.gather_ms, stats.reduce_ms) = shards_->take_comm_ms();
  return stats;
}

}  // namespace bw::runtime
