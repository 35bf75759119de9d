#include "runtime/worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/error.h"
#include "data/dataset.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/run_data.h"

namespace bw::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int64_t peak_rss_kb() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss;
}

Worker::Worker(const RunConfig& config, const RunLayout& layout, int rank, ModelState& state,
               std::unique_ptr<Transport> world, const TransportFactory& make_group, PhaseHook hook)
    : config_(config),
      layout_(layout),
      rank_(rank),
      state_(state),
      world_(std::move(world)),
      hook_(std::move(hook)) {
  std::tie(pipeline_, device_) = layout_.locate(rank);
  trace_steps_ = parse_trace_steps(config_.train.trace_steps, config_.train.steps);
  const auto& pl = layout_.pipelines[pipeline_];
  const auto& model = state_.model();
  BW_CHECK(model::num_layers(model) == layout_.num_layers, "model has {} layers, layout {}",
           model::num_layers(model), layout_.num_layers);
  std::map<int, std::shared_ptr<model::Layer>> layers;
  std::vector<int> segmented;
  for (int l : layout_.layers_of(rank)) {
    if (layout_.segmented(l)) {
      segmented.push_back(l);
      continue;
    }
    BW_CHECK(state_.holds(l), "rank {} needs layer {} but its state does not hold it", rank, l);
    layers[l] = state_.layer_map().at(l);
  }
  if (layout_.width_of(rank) > 1) {
    BW_CHECK(make_group, "a sharded stage needs a group factory");
    const auto stage = layout_.stage_ranks(rank);
    stage_group_ = make_group(fmt::format("g{}/stage/{}", layout_.generation, stage.front()),
                              layout_.member_of(rank), static_cast<int>(stage.size()));
  }
  shards_ =
      std::make_unique<StageShards>(layout_, rank, state_, segmented,
                                    static_cast<uint64_t>(config.model.seed), stage_group_.get());
  for (const auto& [l, layer] : shards_->compute_layers()) layers[l] = layer;
  // The layers this rank writes into checkpoints (RunLayout::checkpoint_writers): held whole,
  // or segmented and gathered by its stage, whose member 0 writes them. A sharded stage gathers
  // a segmented layer together when one of its members writes it.
  const auto stage = layout_.stage_ranks(rank);
  for (int l : layout_.layers_of(rank)) {
    for (int writer : layout_.checkpoint_writers(l, config_.checkpoint.replicas)) {
      if (writer == rank) owned_.push_back(l);
      if (layout_.segmented(l) && layout_.width_of(writer) > 1 &&
          std::find(stage.begin(), stage.end(), writer) != stage.end()) {
        segmented_gathered_.push_back(l);
      }
    }
  }
  // Only the ranks holding the first or the last chunk read data.
  const int last_chunk = pl.schedule.num_chunks - 1;
  if (pl.schedule.chunk_device[0] == device_ || pl.schedule.chunk_device[last_chunk] == device_) {
    // The tokenizer's vocabulary (when the data has one) bounds the ids, as in the coordinator.
    data::Sampler sampler(open_run_data(config.data).dataset, model.seq_len,
                          static_cast<uint64_t>(config.data.seed));
    sampler.require_global_batch(global_batch(config.pipeline));
    if (config.train.eval_every > 0) {
      val_sampler_.emplace(open_validation(config, model.seq_len, sampler.dataset().vocab_size()));
    }
    sampler_.emplace(std::move(sampler));
  }
  BW_CHECK(layout_.world_size() == 1 || (world_ && make_group),
           "a world of {} ranks needs a world group and a group factory", layout_.world_size());
  const double loss_scale = 1.0 / static_cast<double>(layout_.total_microbatches);
  executor_ =
      std::make_unique<Executor>(model, pl, device_, layers, world_.get(), layout_.microbatch_size,
                                 loss_scale, layout_.sample_range(rank), shards_.get(),
                                 config.pipeline.recompute == "full", state_.placement());
  if (hook_) executor_->set_hook(hook_);
  sync_ = std::make_unique<GradSync>(layout_, rank, layers, make_group, world_.get(), shards_.get(),
                                     model::tied_groups(model));
  log(LogLevel::kDebug, "pipeline {} device {}: layers {}, {} gradient buckets", pipeline_, device_,
      fmt::join(layout_.layers_of(rank), ","), sync_->num_buckets());
}

Worker::~Worker() = default;

std::vector<int64_t> sample_ids(const data::Sampler& sampler, const RunLayout& layout, int pipeline,
                                int step, const std::vector<int>& microbatches,
                                std::pair<int, int> rows) {
  const int64_t mbs = layout.microbatch_size;
  const int64_t step_first = int64_t{step} * layout.total_microbatches * mbs;
  std::vector<int64_t> out;
  for (int m : microbatches) {
    const int64_t first = step_first + (layout.pipelines[pipeline].first_microbatch + m) * mbs;
    for (int64_t j = rows.first; j < rows.second; ++j) out.push_back(sampler.window_of(first + j));
  }
  return out;
}

// The split's vocabulary is decided by open_split, the rule that decides the training split's
// (run_data.h); `vocab` is the training split's.
data::Sampler open_validation(const RunConfig& config, int seq_len, int vocab) {
  const auto& path = config.data.val_path;
  try {
    const RunData split = open_split(path, config.data);
    data::Sampler val(split.dataset, seq_len, 0, data::Sampler::Order::kSequential);
    if (split.dataset.vocab_size() != vocab) {
      // Where the training split's vocabulary comes from, for the message.
      const RunData training = open_run_data(config.data);
      throw ConfigError(fmt::format(
          "'{}' holds tokens of a vocabulary of {} but the training data (data.path) has {}; "
          "give a validation split of the same kind (the NAME_val_*.bin beside the training "
          "shards and their tokenizer.json), or name the tokenizer of both with data.tokenizer",
          path, vocabulary_of(split), vocabulary_of(training)));
    }
    const int64_t need = int64_t{config.train.eval_batches} * global_batch(config.pipeline);
    if (need > val.num_samples()) {
      throw ConfigError(fmt::format(
          "'{}' has {} samples of seq_len {}, fewer than train.eval_batches {} x a global batch "
          "of {} = {} samples; lower train.eval_batches or use a longer validation split",
          path, val.num_samples(), seq_len, config.train.eval_batches,
          global_batch(config.pipeline), need));
    }
    return val;
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("data.val_path: {}", e.what()));
  }
}

double Worker::evaluate() {
  const auto& pl = layout_.pipelines[pipeline_];
  const int64_t mbs = layout_.microbatch_size;
  const int64_t total = layout_.total_microbatches;
  const int batches = config_.train.eval_batches;
  auto losses = torch::zeros({batches * total}, torch::kFloat64);
  double* out = losses.data_ptr<double>();
  for (int b = 0; b < batches; ++b) {
    const int64_t batch_first = b * total * mbs;
    BatchFn batch = [&](int m) {
      BW_CHECK(val_sampler_.has_value(), "rank {} has no validation data but its chunk needs it",
               rank_);
      return val_sampler_->batch(batch_first + (pl.first_microbatch + m) * mbs,
                                 static_cast<int>(mbs));
    };
    const auto mine = executor_->run_forward(batch);
    for (int m = 0; m < pl.num_microbatches; ++m)
      out[b * total + pl.first_microbatch + m] += mine[m];
  }
  // Each microbatch's loss comes from one rank (or a sharded stage's ranks), the others add 0.
  if (world_ && world_->size() > 1) world_->allreduce_sum(losses);
  double sum = 0.0;
  for (int64_t i = 0; i < losses.numel(); ++i) sum += out[i];
  return sum / static_cast<double>(losses.numel());
}

void Worker::set_slowdown(double factor) { executor_->set_slowdown(factor); }

bool Worker::traced(int step) const {
  return std::binary_search(trace_steps_.begin(), trace_steps_.end(), step);
}

RankTrace Worker::take_trace(int step) {
  RankTrace out{step, rank_, std::move(trace_)};
  trace_.clear();
  return out;
}

PreparedStep Worker::prepare(int step) {
  std::optional<double> val_loss;
  double eval_ms = 0.0;
  if (step < config_.train.steps && eval_due(config_.train, step)) {
    const auto t_eval = Clock::now();
    val_loss = evaluate();
    eval_ms = ms_since(t_eval);
  }
  const auto t0 = Clock::now();
  const auto& pl = layout_.pipelines[pipeline_];
  const int64_t mbs = layout_.microbatch_size;
  const int64_t step_first = int64_t{step} * layout_.total_microbatches * mbs;
  const torch::Device device = state_.placement().device;
  BatchFn batch = [&, device](int m) {
    BW_CHECK(sampler_.has_value(), "rank {} has no data but its chunk needs a batch", rank_);
    auto data =
        sampler_->batch(step_first + (pl.first_microbatch + m) * mbs, static_cast<int>(mbs));
    if (!device.is_cpu()) {
      // From pinned host memory, copied asynchronously on the current stream (ordered before
      // the forward that reads it).
      data.first = data.first.pin_memory().to(device, /*non_blocking=*/true);
      data.second = data.second.pin_memory().to(device, /*non_blocking=*/true);
    }
    return data;
  };
  zero_gradients(state_.layer_map());
  shards_->zero_gradients();
  const bool traced_step = traced(step);
  if (traced_step) executor_->set_trace(&trace_);
  const DeviceMemory memory_before = device_memory(device);
  StepStats stats = executor_->run_step(batch);
  executor_->set_trace(nullptr);
  auto tied = sync_->tied_checksums();  // the parameters this step ran with

  const auto t_sync = Clock::now();
  if (hook_) hook_("grad_sync");
  shards_->collect_gradients();
  sync_->sync_gradients();
  auto [sq_norm, loss] = sync_->global_norm_and_loss(stats.loss);
  if (traced_step) {
    trace_.push_back({"GRAD_SYNC", "sync", trace_time_us(t_sync), trace_time_us(Clock::now())});
  }

  PreparedStep out;
  out.clip = clip_scale(sq_norm, config_.train.grad_clip);
  StepReport& r = out.report;
  r.step = step;
  r.rank = rank_;
  r.loss = loss;
  r.grad_norm = std::sqrt(sq_norm);
  r.lr = lr_at(static_cast<int>(step - state_.steps_skipped), config_.train);
  r.compute_ms = stats.compute_ms;
  r.exec_ms = stats.total_ms;
  r.wait_ms = stats.wait_ms;
  r.data_ms = stats.data_ms;
  r.post_ms = stats.post_ms;
  r.free_ms = stats.free_ms;
  r.gather_ms = stats.gather_ms;
  r.reduce_ms = stats.reduce_ms;
  r.sync_ms = ms_since(t_sync);
  r.num_actions = stats.num_actions;
  r.tied = std::move(tied);
  r.chunk_ms = stats.chunk_ms;
  if (sampler_ && !stats.first_chunk_microbatches.empty()) {
    r.samples = sample_ids(*sampler_, layout_, pipeline_, step, stats.first_chunk_microbatches,
                           layout_.sample_range(rank_));
  }
  r.step_ms = ms_since(t0);
  r.peak_rss_kb = peak_rss_kb();
  const DeviceMemory memory_after = device_memory(device);
  r.device_bytes = memory_before.current_bytes;
  r.device_step_allocated_bytes =
      memory_after.allocated_total_bytes - memory_before.allocated_total_bytes;
  r.val_loss = val_loss;
  r.eval_ms = eval_ms;
  return out;
}

void Worker::apply(int step, const PreparedStep& prepared) {
  BW_CHECK(state_.steps_done == step, "rank {} applies step {} but has applied {} steps", rank_,
           step, state_.steps_done);
  const int lr_step = static_cast<int>(step - state_.steps_skipped);
  const auto t0 = Clock::now();
  state_.optimizer().step(lr_step, prepared.clip);
  if (!shards_->empty())
    shards_->apply(prepared.clip, lr_at(lr_step, config_.train), config_.train);
  if (traced(step)) {
    trace_.push_back({"OPTIMIZER", "optimizer", trace_time_us(t0), trace_time_us(Clock::now())});
  }
  state_.steps_done = step + 1;
}

void Worker::skip(int step) {
  BW_CHECK(state_.steps_done == step, "rank {} skips step {} but has applied {} steps", rank_, step,
           state_.steps_done);
  zero_gradients(state_.layer_map());
  state_.steps_done = step + 1;
  state_.steps_skipped += 1;
}

StepReport Worker::run_step(int step) {
  auto prepared = prepare(step);
  const auto t0 = Clock::now();
  apply(step, prepared);
  prepared.report.sync_ms += ms_since(t0);
  prepared.report.step_ms += ms_since(t0);
  return prepared.report;
}

std::vector<std::unique_ptr<Transport>> Worker::release_transports() {
  std::vector<std::unique_ptr<Transport>> out;
  if (sync_) out = sync_->release_groups();
  executor_.reset();
  sync_.reset();
  if (stage_group_) out.push_back(std::move(stage_group_));
  if (world_) out.push_back(std::move(world_));
  return out;
}

std::vector<int> Worker::owned_layers() const { return owned_; }

// Appends the segmented layers' full tensors, assembled by `full` (a collective over the stage
// for layers the stage gathers), where this rank writes them.
void Worker::append_segmented(NamedTensors& out, NamedTensors (StageShards::*full)(int)) {
  auto has = [](const std::vector<int>& v, int l) {
    return std::find(v.begin(), v.end(), l) != v.end();
  };
  for (int l : layout_.layers_of(rank_)) {
    if (!layout_.segmented(l)) continue;
    const bool mine = has(owned_, l);
    if (!mine && !has(segmented_gathered_, l)) continue;
    auto tensors = ((*shards_).*full)(l);
    if (mine) out.insert(out.end(), tensors.begin(), tensors.end());
  }
}

std::vector<int> Worker::owned_whole_layers() const {
  std::vector<int> out;
  for (int l : owned_layers())
    if (!layout_.segmented(l)) out.push_back(l);
  return out;
}

NamedTensors Worker::owned_parameters() {
  NamedTensors out = state_.parameters_of(owned_whole_layers());
  append_segmented(out, &StageShards::full_parameters);
  return out;
}

NamedTensors Worker::owned_optimizer_state() {
  NamedTensors out = state_.optimizer_state_of(owned_whole_layers());
  append_segmented(out, &StageShards::full_optimizer_state);
  return out;
}

void Worker::load_state(const std::map<std::string, torch::Tensor>& params,
                        const std::map<std::string, torch::Tensor>* optimizer_state) {
  torch::NoGradGuard no_grad;
  for (const auto& [l, layer] : shards_->compute_layers()) {
    shards_->load(l, params, optimizer_state);
  }
  for (const auto& [name, p] : state_.optimizer().params()) {
    auto it = params.find(name);
    if (it == params.end()) {
      throw ConfigError(fmt::format("the checkpoint has no tensor '{}'", name));
    }
    if (it->second.sizes() != p.sizes()) {
      throw ConfigError(fmt::format("checkpoint tensor '{}' has shape [{}], the model needs [{}]",
                                    name, fmt::join(it->second.sizes(), ", "),
                                    fmt::join(p.sizes(), ", ")));
    }
    p.copy_(it->second);
  }
  if (optimizer_state != nullptr) state_.optimizer().load_state_tensors(*optimizer_state);
}

std::vector<std::pair<int, uint64_t>> Worker::layer_checksums() const {
  std::vector<std::pair<int, uint64_t>> out;
  for (const auto& [l, h] : state_.parameter_checksums()) {
    if (state_.holds(l)) out.emplace_back(l, h);
  }
  return out;
}

}  // namespace bw::runtime
