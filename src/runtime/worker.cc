#include "runtime/worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/error.h"
#include "data/dataset.h"
#include "runtime/log.h"

namespace bw::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

nlohmann::json StepReport::to_json() const {
  return {{"step", step},
          {"rank", rank},
          {"loss", loss},
          {"grad_norm", grad_norm},
          {"lr", lr},
          {"step_ms", step_ms},
          {"exec_ms", exec_ms},
          {"compute_ms", compute_ms},
          {"wait_ms", wait_ms},
          {"data_ms", data_ms},
          {"post_ms", post_ms},
          {"free_ms", free_ms},
          {"sync_ms", sync_ms},
          {"num_actions", num_actions},
          {"peak_rss_kb", peak_rss_kb},
          {"chunk_ms", chunk_ms}};
}

StepReport StepReport::from_json(const nlohmann::json& d) {
  StepReport r;
  r.step = d.at("step");
  r.rank = d.at("rank");
  r.loss = d.at("loss");
  r.grad_norm = d.at("grad_norm");
  r.lr = d.at("lr");
  r.step_ms = d.at("step_ms");
  r.exec_ms = d.at("exec_ms");
  r.compute_ms = d.at("compute_ms");
  r.wait_ms = d.at("wait_ms");
  r.data_ms = d.value("data_ms", 0.0);
  r.post_ms = d.value("post_ms", 0.0);
  r.free_ms = d.value("free_ms", 0.0);
  r.sync_ms = d.at("sync_ms");
  r.num_actions = d.at("num_actions");
  r.peak_rss_kb = d.at("peak_rss_kb");
  if (d.contains("chunk_ms"))
    r.chunk_ms = d.at("chunk_ms").get<std::vector<std::array<double, 4>>>();
  return r;
}

int64_t peak_rss_kb() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss;
}

Worker::Worker(const RunConfig& config, const RunLayout& layout, int rank,
               c10::intrusive_ptr<c10d::Store> store)
    : config_(config), layout_(layout), rank_(rank) {
  std::tie(pipeline_, device_) = layout_.locate(rank);
  const auto& pl = layout_.pipelines[pipeline_];
  model_ = model::named_config(config.model.name, layout_.vocab_size);
  BW_CHECK(model::num_layers(model_) == layout_.num_layers, "model has {} layers, layout {}",
           model::num_layers(model_), layout_.num_layers);
  for (int l : layout_.layers_of(rank)) {
    layers_[l] = model::build_layer(model_, l, static_cast<uint64_t>(config.model.seed));
  }
  // Only the ranks holding the first or the last chunk read data.
  const int last_chunk = pl.schedule.num_chunks - 1;
  if (pl.schedule.chunk_device[0] == device_ || pl.schedule.chunk_device[last_chunk] == device_) {
    const std::string path =
        config.data.path.empty() ? data::default_corpus_path() : config.data.path;
    data::Sampler sampler(data::TokenDataset::open(path), model_.seq_len,
                          static_cast<uint64_t>(config.data.seed));
    sampler.require_global_batch(global_batch(config.pipeline));
    sampler_.emplace(std::move(sampler));
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0));
  if (layout_.world_size() > 1) {
    BW_CHECK(store, "a world of {} ranks needs a store", layout_.world_size());
    world_ = make_gloo_transport(store, fmt::format("g{}/world", layout_.generation), rank,
                                 layout_.world_size(), timeout);
  }
  const double loss_scale = 1.0 / static_cast<double>(layout_.total_microbatches);
  executor_ = std::make_unique<Executor>(model_, pl, device_, layers_, world_.get(),
                                         layout_.microbatch_size, loss_scale);
  sync_ = std::make_unique<GradSync>(layout_, rank, layers_, store, world_.get(), timeout);

  NamedTensors params;
  for (const auto& [l, layer] : layers_) {
    for (const auto& [name, p] : layer->parameter_list()) {
      params.emplace_back(checkpoint_tensor_name(l, name), p);
    }
  }
  optimizer_ = std::make_unique<Optimizer>(std::move(params), config.train);
  log(LogLevel::kInfo, "pipeline {} device {}: layers {}, {} gradient buckets", pipeline_, device_,
      fmt::join(layout_.layers_of(rank), ","), sync_->num_buckets());
}

Worker::~Worker() = default;

StepReport Worker::run_step(int step) {
  const auto t0 = Clock::now();
  const auto& pl = layout_.pipelines[pipeline_];
  const int64_t mbs = layout_.microbatch_size;
  const int64_t step_first = int64_t{step} * layout_.total_microbatches * mbs;
  BatchFn batch = [&](int m) {
    BW_CHECK(sampler_.has_value(), "rank {} has no data but its chunk needs a batch", rank_);
    return sampler_->batch(step_first + (pl.first_microbatch + m) * mbs, static_cast<int>(mbs));
  };
  zero_gradients(layers_);
  StepStats stats = executor_->run_step(batch);

  const auto t_sync = Clock::now();
  sync_->sync_gradients();
  auto [sq_norm, loss] = sync_->global_norm_and_loss(stats.loss);
  const double norm = std::sqrt(sq_norm);
  const double lr = optimizer_->step(step, clip_scale(sq_norm, config_.train.grad_clip));

  StepReport r;
  r.step = step;
  r.rank = rank_;
  r.loss = loss;
  r.grad_norm = norm;
  r.lr = lr;
  r.compute_ms = stats.compute_ms;
  r.exec_ms = stats.total_ms;
  r.wait_ms = stats.wait_ms;
  r.data_ms = stats.data_ms;
  r.post_ms = stats.post_ms;
  r.free_ms = stats.free_ms;
  r.sync_ms = ms_since(t_sync);
  r.num_actions = stats.num_actions;
  r.chunk_ms = stats.chunk_ms;
  r.step_ms = ms_since(t0);
  r.peak_rss_kb = peak_rss_kb();
  return r;
}

bool Worker::owns(const std::string& tensor_name) const {
  // "layers.{i}.{...}"
  const int layer = std::stoi(tensor_name.substr(7));
  return layout_.replicas(layer).front() == rank_;
}

NamedTensors Worker::owned_parameters() const {
  NamedTensors out;
  for (const auto& [name, p] : optimizer_->params()) {
    if (owns(name)) out.emplace_back(name, p.detach());
  }
  return out;
}

NamedTensors Worker::owned_optimizer_state() const {
  NamedTensors out;
  for (auto& [name, t] : optimizer_->state_tensors()) {
    if (owns(name)) out.emplace_back(name, t);
  }
  return out;
}

void Worker::load_state(const std::map<std::string, torch::Tensor>& params,
                        const std::map<std::string, torch::Tensor>* optimizer_state) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : optimizer_->params()) {
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
  if (optimizer_state != nullptr) optimizer_->load_state_tensors(*optimizer_state);
}

std::vector<std::pair<int, uint64_t>> Worker::layer_checksums() const {
  std::vector<std::pair<int, uint64_t>> out;
  for (const auto& [l, layer] : layers_) {
    uint64_t h = 1469598103934665603ULL;
    for (const auto& [name, p] : layer->parameter_list()) {
      auto c = p.detach().contiguous();
      const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
      for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
    }
    out.emplace_back(l, h);
  }
  return out;
}

}  // namespace bw::runtime
