#include "elastic/worker_main.h"

#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "elastic/keys.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/layout.h"
#include "runtime/log.h"
#include "runtime/worker.h"

namespace bw::elastic {
namespace {

std::string get_string(c10d::Store& store, const std::string& key) {
  auto bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

void set_string(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// Bumps the rank's heartbeat counter every `period` on its own store connection, so the
// coordinator sees a stopped or hung process (SIGSTOP, a livelock) within heartbeat_timeout_s
// even while the main thread is blocked in a collective.
class Heartbeat {
 public:
  Heartbeat(const std::string& host, int port, std::string key, std::chrono::milliseconds period)
      : key_(std::move(key)), period_(period) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(port);
    opts.isServer = false;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::seconds(30);
    store_ = c10::make_intrusive<c10d::TCPStore>(host, opts);
    store_->add(key_, 1);
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
      try {
        store_->add(key_, 1);
      } catch (...) {
        return;  // the coordinator is gone; the main thread will notice on its next wait
      }
    }
  }

  std::string key_;
  std::chrono::milliseconds period_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

void run_worker_process(const WorkerArgs& args) {
  using std::chrono::milliseconds;
  runtime::set_log_prefix(args.generation, args.rank);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(args.store_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = milliseconds(static_cast<int64_t>(args.connect_timeout_s * 1000));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(args.store_host, opts);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("worker {} cannot reach the coordinator's store at {}:{}: {}",
                                args.rank, args.store_host, args.store_port, e.what()));
  }
  const int g = args.generation;
  try {
    const auto config = runtime::parse_run_config(get_string(*store, keys::config(g)),
                                                  "the coordinator's config", {});
    store->setTimeout(milliseconds(static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0)));
    const auto period = std::chrono::milliseconds(std::clamp<int64_t>(
        static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000.0 / 4), 50, 1000));
    Heartbeat heartbeat(args.store_host, args.store_port, keys::heartbeat(g, args.rank), period);
    const auto layout =
        runtime::layout_from_json(nlohmann::json::parse(get_string(*store, keys::layout(g))));
    const auto start = nlohmann::json::parse(get_string(*store, keys::start(g)));
    const int first_step = start.at("first_step");
    const std::string resume = start.at("resume");

    torch::set_num_threads(std::max(1, config.train.threads_per_worker));
    runtime::Worker worker(config, layout, args.rank, store);
    if (!resume.empty()) {
      auto ckpt = runtime::load_checkpoint(resume);
      worker.load_state(ckpt.weights, &ckpt.optimizer);
    }
    for (int step = first_step; step < config.train.steps; ++step) {
      auto report = worker.run_step(step);
      if (runtime::checkpoint_due(config.train, step)) {
        runtime::write_shard(worker, runtime::checkpoint_dir(config.train.out_dir, step + 1));
      }
      set_string(*store, keys::metrics(g, step, args.rank), report.to_json().dump());
    }
    nlohmann::json done = nlohmann::json::object();
    for (const auto& [layer, hash] : worker.layer_checksums()) {
      done[std::to_string(layer)] = fmt::format("{:016x}", hash);
    }
    set_string(*store, keys::done(g, args.rank), done.dump());
  } catch (const std::exception& e) {
    // The class travels with the message, so the coordinator reports a worker's bad input as
    // bad input (exit status 2) rather than as a failed peer.
    const char* kind = dynamic_cast<const ConfigError*>(&e) ? keys::kConfigError : "other";
    try {
      set_string(*store, keys::error(g, args.rank),
                 nlohmann::json{{"kind", kind}, {"message", e.what()}}.dump());
    } catch (...) {
      // The store is gone too; the exit status still tells the coordinator.
    }
    throw;
  }
}

}  // namespace bw::elastic
