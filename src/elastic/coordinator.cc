#include "elastic/coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/check.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "elastic/keys.h"
#include "elastic/planning.h"
#include "elastic/process.h"
#include "model/sample.h"
#include "runtime/checkpointing.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using runtime::StepReport;

// Where the steps run: in this process (one device) or in worker processes.
class Fleet {
 public:
  virtual ~Fleet() = default;
  // Runs (or waits for) step `step`; returns one report per rank, with the step's checkpoint
  // shards written when due.
  virtual std::vector<StepReport> step(int step) = 0;
  // Per rank: layer -> checksum of its parameters after the last step.
  virtual std::vector<std::map<int, std::string>> finish() = 0;
  virtual int world_size() const = 0;
};

class LocalFleet final : public Fleet {
 public:
  LocalFleet(const runtime::RunConfig& config, const runtime::RunLayout& layout,
             const std::string& resume)
      : config_(config), worker_(config, layout, 0, {}) {
    if (!resume.empty()) {
      auto ckpt = runtime::load_checkpoint(resume);
      worker_.load_state(ckpt.weights, &ckpt.optimizer);
    }
  }
  std::vector<StepReport> step(int step) override {
    auto r = worker_.run_step(step);
    if (runtime::checkpoint_due(config_.train, step)) {
      runtime::write_shard(worker_, runtime::checkpoint_dir(config_.train.out_dir, step + 1));
    }
    return {r};
  }
  std::vector<std::map<int, std::string>> finish() override { return {{}}; }
  int world_size() const override { return 1; }

 private:
  runtime::RunConfig config_;
  runtime::Worker worker_;
};

std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}
std::vector<uint8_t> as_bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

class ProcessFleet final : public Fleet {
 public:
  ProcessFleet(const runtime::RunConfig& config, const runtime::RunLayout& layout,
               const std::string& executable, int first_step, const std::string& resume)
      : layout_(layout),
        g_(layout.generation),
        timeout_(std::chrono::milliseconds(
            static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0))),
        heartbeat_timeout_(std::chrono::milliseconds(
            static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000.0))) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(config.elastic.store_port);
    opts.isServer = true;
    opts.waitWorkers = false;
    opts.timeout = timeout_;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format(
          "cannot host the store on port {}: {}; choose another elastic.store_port (0 = any)",
          config.elastic.store_port, e.what()));
    }
    store_->set(keys::config(g_), as_bytes(runtime::to_toml(config)));
    store_->set(keys::layout(g_), as_bytes(runtime::to_json(layout).dump()));
    store_->set(keys::start(g_),
                as_bytes(nlohmann::json{{"first_step", first_step}, {"resume", resume}}.dump()));
    const int port = store_->getPort();
    for (int r = 0; r < layout.world_size(); ++r) {
      children_.push_back(ChildProcess::spawn(
          executable,
          {executable, "worker", "--store-host", "127.0.0.1", "--store-port", std::to_string(port),
           "--rank", std::to_string(r), "--generation", std::to_string(g_)}));
    }
    beats_.assign(children_.size(), {0, Clock::now()});
    runtime::log(runtime::LogLevel::kInfo, "store on port {}, {} workers started", port,
                 children_.size());
  }

  ~ProcessFleet() override {
    for (auto& c : children_) c.kill();
  }

  int world_size() const override { return static_cast<int>(children_.size()); }

  std::vector<StepReport> step(int step) override {
    std::vector<std::string> names;
    for (int r = 0; r < world_size(); ++r) names.push_back(keys::metrics(g_, step, r));
    wait_for(names, fmt::format("step {}", step));
    std::vector<StepReport> out;
    for (const auto& k : names) {
      out.push_back(StepReport::from_json(nlohmann::json::parse(as_string(store_->get(k)))));
      store_->deleteKey(k);
    }
    return out;
  }

  std::vector<std::map<int, std::string>> finish() override {
    std::vector<std::string> names;
    for (int r = 0; r < world_size(); ++r) names.push_back(keys::done(g_, r));
    wait_for(names, "the end of training");
    std::vector<std::map<int, std::string>> out;
    for (const auto& k : names) {
      std::map<int, std::string> sums;
      const auto doc = nlohmann::json::parse(as_string(store_->get(k)));
      for (auto it = doc.begin(); it != doc.end(); ++it) {
        sums[std::stoi(it.key())] = it.value().get<std::string>();
      }
      out.push_back(std::move(sums));
    }
    for (int r = 0; r < world_size(); ++r) {
      const int status = children_[r].wait_or_kill(std::chrono::seconds(10));
      if (status != 0) fail(r, status, "shutdown");
    }
    return out;
  }

 private:
  // Waits until every key exists, polling the children; a dead child or the deadline stops all.
  void wait_for(const std::vector<std::string>& names, const std::string& what) {
    const auto deadline = Clock::now() + timeout_;
    std::vector<std::string> missing = names;
    while (true) {
      // One round trip while everything is on time; per key only to name who is missing.
      if (store_->check(missing)) return;
      std::vector<std::string> still;
      for (const auto& k : missing) {
        if (!store_->check({k})) still.push_back(k);
      }
      missing.swap(still);
      if (missing.empty()) return;
      for (int r = 0; r < world_size(); ++r) {
        if (auto status = children_[r].poll()) {
          // A clean exit before its last report is a failure too.
          if (*status != 0 ||
              std::find(missing.begin(), missing.end(), names[r]) != missing.end()) {
            fail(r, *status, what);
          }
        }
      }
      check_heartbeats(what);
      if (Clock::now() > deadline) {
        stop_all();
        throw CommError(fmt::format(
            "{} did not complete within elastic.step_timeout_s = {} s (ranks still missing: {}); "
            "stopped every worker",
            what, timeout_.count() / 1000.0, missing.size()));
      }
      // Workers never wait for the coordinator, so a coarse poll costs them nothing, while a
      // tight one would take CPU from them on a small machine.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // A rank whose heartbeat counter has not moved for heartbeat_timeout_s is hung or stopped.
  void check_heartbeats(const std::string& what) {
    const auto now = Clock::now();
    if (now - last_beat_check_ < std::chrono::milliseconds(100)) return;
    last_beat_check_ = now;
    for (int r = 0; r < world_size(); ++r) {
      const int64_t count = store_->add(keys::heartbeat(g_, r), 0);
      if (count != beats_[r].first) {
        beats_[r] = {count, now};
      } else if (now - beats_[r].second > (count == 0 ? timeout_ : heartbeat_timeout_)) {
        // Before its first beat a worker is still starting (loading LibTorch): the step
        // deadline applies instead.
        stop_all();
        const auto [p, d] = layout_.locate(r);
        throw CommError(fmt::format(
            "worker rank {} (pipeline {} device {}, pid {}) sent no heartbeat for {} s during {} "
            "(stopped or hung; elastic.heartbeat_timeout_s); stopped every worker",
            r, p, d, children_[r].pid(), heartbeat_timeout_.count() / 1000.0, what));
      }
    }
  }

  // The error a rank published before exiting: {kind, message}, or nullopt.
  std::optional<std::pair<std::string, std::string>> published_error(int rank) {
    try {
      if (!store_->check({keys::error(g_, rank)})) return std::nullopt;
      const auto doc = nlohmann::json::parse(as_string(store_->get(keys::error(g_, rank))));
      return std::make_pair(doc.at("kind").get<std::string>(),
                            doc.at("message").get<std::string>());
    } catch (...) {
      return std::nullopt;
    }
  }

  // A ConfigError in any worker is the user's bad input (exit status 2), even when a peer that
  // lost its partner was noticed first; anything else is a failed peer (CommError).
  [[noreturn]] void fail(int rank, int status, const std::string& what) {
    // Give the other ranks a moment to publish: the first to exit may be a victim.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int r = 0; r < world_size(); ++r) {
      auto e = published_error(r);
      if (e && e->first == keys::kConfigError) {
        stop_all();
        throw ConfigError(e->second);
      }
    }
    std::string message = "no message";
    if (auto e = published_error(rank)) message = e->second;
    stop_all();
    const auto [p, d] = layout_.locate(rank);
    throw CommError(fmt::format(
        "worker rank {} (pipeline {} device {}, pid {}) exited with status {} during {}: {}; "
        "stopped every worker",
        rank, p, d, children_[rank].pid(), status, what, message));
  }

  void stop_all() {
    for (auto& c : children_) c.kill();
  }

  runtime::RunLayout layout_;
  int g_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds heartbeat_timeout_;
  std::vector<std::pair<int64_t, Clock::time_point>> beats_;  // per rank: counter, when it moved
  Clock::time_point last_beat_check_{};
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::vector<ChildProcess> children_;
};

void check_replicas(const runtime::RunLayout& layout,
                    const std::vector<std::map<int, std::string>>& sums) {
  if (sums.size() <= 1) return;
  for (int l = 0; l < layout.num_layers; ++l) {
    const auto ranks = layout.replicas(l);
    for (int r : ranks) {
      BW_CHECK(sums[r].at(l) == sums[ranks.front()].at(l),
               "replicas of layer {} diverged: rank {} has checksum {}, rank {} has {}", l, r,
               sums[r].at(l), ranks.front(), sums[ranks.front()].at(l));
    }
  }
}

// A checkpoint must hold every parameter of this model with its shape (and its optimizer state),
// else the run would fail inside the workers; say so before any process starts.
void check_checkpoint_matches(const runtime::LoadedCheckpoint& ckpt, const model::GptConfig& model,
                              int64_t seed, const std::string& where) {
  for (int l = 0; l < model::num_layers(model); ++l) {
    auto layer = model::build_layer(model, l, static_cast<uint64_t>(seed));
    for (const auto& [name, p] : layer->parameter_list()) {
      const auto key = runtime::checkpoint_tensor_name(l, name);
      auto it = ckpt.weights.find(key);
      if (it == ckpt.weights.end()) {
        throw ConfigError(fmt::format(
            "checkpoint {} has no tensor '{}' for model {} ({} layers); resume with the model it "
            "was written for (model.name)",
            where, key, model.name, model::num_layers(model)));
      }
      if (it->second.sizes() != p.sizes()) {
        throw ConfigError(fmt::format(
            "checkpoint {} tensor '{}' has shape [{}] but model {} needs [{}]; resume with the "
            "model and data it was written for",
            where, key, fmt::join(it->second.sizes(), ", "), model.name,
            fmt::join(p.sizes(), ", ")));
      }
      if (ckpt.optimizer.count(key + ".exp_avg") == 0) {
        throw ConfigError(fmt::format("checkpoint {} has no optimizer state for '{}'", where, key));
      }
    }
  }
}

std::string render_sample(const std::vector<int64_t>& tokens, int vocab_size) {
  std::string out;
  if (vocab_size == data::kTextVocab) {
    for (int64_t t : tokens) {
      const char c = static_cast<char>(t);
      out += (c == '\n' || c == '\t' || (t >= 32 && t < 127)) ? c : '?';
    }
    return out;
  }
  return fmt::format("(token ids) {}", fmt::join(tokens, " "));
}

}  // namespace

RunSummary run_training(const runtime::RunConfig& config, const CoordinatorOptions& options) {
  const auto t_start = Clock::now();
  // Data and shapes first: a bad corpus is a clear error before any process starts.
  const std::string data_path =
      config.data.path.empty() ? data::default_corpus_path() : config.data.path;
  auto dataset = data::TokenDataset::open(data_path);
  const auto model = model::named_config(config.model.name, dataset.vocab_size());
  {
    data::Sampler sampler(dataset, model.seq_len, static_cast<uint64_t>(config.data.seed));
    sampler.require_global_batch(runtime::global_batch(config.pipeline));
  }
  if (config.cluster.device != "cpu") {
    throw ConfigError(fmt::format(
        "cluster.device = '{}' is not available in this build (CPU with gloo only); use "
        "cluster.device = \"cpu\"",
        config.cluster.device));
  }
  const int world = options.devices > 0 ? options.devices
                                        : config.cluster.nodes * config.cluster.devices_per_node;

  RunSummary summary;
  if (world == 1) {
    summary.layout = single_device_layout(config, model, 0);
  } else {
    auto plan = plan_layout(config, model, world, 0);
    summary.layout = std::move(plan.layout);
    summary.notes = std::move(plan.notes);
  }
  if (options.on_plan) options.on_plan(summary.layout, summary.notes);

  int first_step = 0;
  std::string resume;
  if (!config.train.resume.empty()) {
    auto ckpt = runtime::load_checkpoint(config.train.resume);
    check_checkpoint_matches(ckpt, model, config.model.seed, config.train.resume);
    const auto& info = ckpt.info;
    first_step = static_cast<int>(info.step);
    resume = config.train.resume;
    if (first_step >= config.train.steps) {
      throw ConfigError(fmt::format(
          "the checkpoint {} is at step {} but train.steps is {}; raise train.steps to continue",
          config.train.resume, first_step, config.train.steps));
    }
  }

  fs::create_directories(config.train.out_dir);
  {
    std::ofstream toml(fs::path(config.train.out_dir) / "config.toml");
    toml << runtime::to_toml(config, /*with_comments=*/false);
  }
  summary.metrics_path = (fs::path(config.train.out_dir) / "metrics.jsonl").string();
  std::ofstream metrics(summary.metrics_path, first_step > 0 ? std::ios::app : std::ios::trunc);

  torch::set_num_threads(std::max(1, config.train.threads_per_worker));
  std::unique_ptr<Fleet> fleet;
  if (world == 1) {
    fleet = std::make_unique<LocalFleet>(config, summary.layout, resume);
  } else {
    const std::string exe = options.executable.empty() ? self_executable() : options.executable;
    fleet = std::make_unique<ProcessFleet>(config, summary.layout, exe, first_step, resume);
  }

  const int steps = config.train.steps;
  const double tokens_per_step =
      static_cast<double>(runtime::global_batch(config.pipeline)) * model.seq_len;
  summary.first_step = first_step;
  summary.peak_rss_kb.assign(world, 0);
  summary.compute_share.assign(world, 0.0);
  auto t_prev = Clock::now();
  const auto t_loop = t_prev;
  double timed_s = 0;
  int timed_steps = 0;
  for (int step = first_step; step < steps; ++step) {
    auto reports = fleet->step(step);
    const auto now = Clock::now();
    StepSummary s;
    s.step = step;
    s.steps = steps;
    s.loss = reports.front().loss;
    s.grad_norm = reports.front().grad_norm;
    s.lr = reports.front().lr;
    s.step_s = std::chrono::duration<double>(now - t_prev).count();
    t_prev = now;
    s.tokens_per_s = tokens_per_step / std::max(s.step_s, 1e-9);
    s.elapsed_s = std::chrono::duration<double>(now - t_loop).count();
    // The first step includes start-up (process launch, connections); leave it out of rates.
    if (step > first_step || steps - first_step == 1) {
      timed_s += s.step_s;
      ++timed_steps;
    }
    const double mean_s = timed_steps > 0 ? timed_s / timed_steps : s.step_s;
    s.eta_s = mean_s * (steps - step - 1);
    for (const auto& r : reports) {
      summary.peak_rss_kb[r.rank] = std::max(summary.peak_rss_kb[r.rank], r.peak_rss_kb);
      summary.compute_share[r.rank] += r.compute_ms / std::max(r.step_ms, 1e-9);
    }
    s.reports = std::move(reports);
    if (step == first_step) summary.first_loss = s.loss;
    summary.final_loss = s.loss;
    nlohmann::json line = {{"step", step},
                           {"loss", s.loss},
                           {"grad_norm", s.grad_norm},
                           {"lr", s.lr},
                           {"step_s", s.step_s},
                           {"tokens_per_s", s.tokens_per_s},
                           {"generation", summary.layout.generation}};
    line["ranks"] = nlohmann::json::array();
    for (const auto& r : s.reports) line["ranks"].push_back(r.to_json());
    metrics << line.dump() << "\n" << std::flush;
    if (runtime::checkpoint_due(config.train, step)) {
      runtime::CheckpointInfo info;
      info.step = step + 1;
      info.next_sample = int64_t{step + 1} * runtime::global_batch(config.pipeline);
      info.config_toml = runtime::to_toml(config);
      info.extra = {{"generation", summary.layout.generation},
                    {"layout", runtime::to_json(summary.layout)}};
      summary.checkpoint = runtime::merge_shards(
          runtime::checkpoint_dir(config.train.out_dir, step + 1), fleet->world_size(), info);
    }
    if (options.on_step) options.on_step(s);
  }
  check_replicas(summary.layout, fleet->finish());
  fleet.reset();
  summary.steps_done = steps - first_step;
  for (auto& share : summary.compute_share) share /= std::max(1, summary.steps_done);
  summary.tokens_per_s = timed_steps > 0 ? tokens_per_step * timed_steps / timed_s : 0.0;

  if (config.train.sample_tokens > 0 && !summary.checkpoint.empty()) {
    auto ckpt = runtime::load_checkpoint(summary.checkpoint);
    std::vector<std::shared_ptr<model::Layer>> layers;
    torch::NoGradGuard no_grad;
    for (int l = 0; l < model::num_layers(model); ++l) {
      auto layer = model::build_layer(model, l, static_cast<uint64_t>(config.model.seed));
      for (const auto& [name, p] : layer->parameter_list()) {
        p.copy_(ckpt.weights.at(runtime::checkpoint_tensor_name(l, name)));
      }
      layers.push_back(layer);
    }
    const int64_t prompt = dataset.vocab_size() == data::kTextVocab ? '\n' : 50256;
    model::SampleOptions so;
    so.num_tokens = config.train.sample_tokens;
    so.seed = static_cast<uint64_t>(config.model.seed);
    summary.sample =
        render_sample(model::sample_tokens(layers, model, {prompt}, so), dataset.vocab_size());
  }
  summary.total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return summary;
}

}  // namespace bw::elastic
