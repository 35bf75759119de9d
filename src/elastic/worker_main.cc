#include "elastic/worker_main.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"
#include "elastic/control_store_etcd.h"
#include "elastic/failover_store.h"
#include "elastic/inject.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/resume_fetch.h"
#include "elastic/shard_store.h"
#include "elastic/store_text.h"
#include "runtime/checkpoint_sink.h"
#include "runtime/checkpointing.h"
#include "runtime/comm.h"
#include "runtime/config.h"
#include "runtime/device.h"
#include "runtime/layout.h"
#include "runtime/log.h"
#include "runtime/model_state.h"
#include "runtime/state_transfer.h"
#include "runtime/worker.h"

namespace bw::elastic {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs whose control store is etcd: every store client of this process follows the run's
// leadership (failover_store.h), so a takeover finds this worker waiting where it was.
std::shared_ptr<LeaderFollower> g_follower;

c10::intrusive_ptr<c10d::Store> connect(const std::string& host, int port, milliseconds timeout) {
  if (g_follower) return c10::make_intrusive<FailoverStore>(g_follower, timeout);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// The coordinator's store did not answer in time: the process cannot go on (exit status 3).
class CoordinatorLost : public CommError {
 public:
  using CommError::CommError;
};

// Waits for `key` (get() blocks up to the store's timeout). A timeout leaves the connection out
// of step with the server, so it is fatal: CoordinatorLost naming what was awaited.
std::string await(c10d::Store& store, const std::string& key, const std::string& what) {
  try {
    return get_string(store, key);
  } catch (const std::exception& e) {
    throw CoordinatorLost(
        fmt::format("no {} from the coordinator ('{}'): {}", what, key,
                    std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
}

// A store call the run cannot go on without (uploading a checkpoint shard, reading the resume
// state): a store error means the coordinator is gone, CoordinatorLost; the worker's own errors
// (bad input, a bug) pass through.
template <class Fn>
auto over_store(const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const ConfigError&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CoordinatorLost(
        fmt::format("cannot {} through the coordinator's store: {}", what,
                    std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
}

// Uploads this rank's shard of a checkpoint (shard_store.h); the coordinator writes it.
void upload_shard(c10d::Store& store, const std::string& prefix, int shard,
                  const runtime::NamedTensors& parameters,
                  const runtime::NamedTensors& optimizer_state) {
  over_store("upload checkpoint shard " + std::to_string(shard),
             [&] { return put_shard(store, prefix, shard, parameters, optimizer_state); });
}

// Bumps a heartbeat counter every `period` on its own store connection, so the coordinator sees a
// stopped or hung process within heartbeat_timeout_s even while the main thread is blocked.
class Heartbeat {
 public:
  Heartbeat(const std::string& host, int port, std::string key, milliseconds period)
      : key_(std::move(key)), period_(period) {
    // Following the leadership, a beat must not wait long on a coordinator that was replaced.
    store_ =
        connect(host, port,
                g_follower ? std::max(period * 2, milliseconds(500)) : std::chrono::seconds(30));
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
      } catch (const c10::DistNetworkError&) {
        return;  // the coordinator is gone; the main thread notices on its next wait
      } catch (const c10::DistError&) {
        if (!g_follower) return;  // following the leadership: a late beat, not the end
      } catch (...) {
        return;
      }
    }
  }

  std::string key_;
  milliseconds period_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Waits for the generation's abort key on its own connection and fires the AbortSignal.
class AbortWatcher {
 public:
  AbortWatcher(const std::string& host, int port, int generation,
               std::shared_ptr<runtime::AbortSignal> signal)
      : signal_(std::move(signal)) {
    auto store = connect(host, port, std::chrono::seconds(1));
    const std::string key = keys::abort(generation);
    // Polled (a timed-out wait() would leave the connection out of step with the server).
    thread_ = std::thread([this, store, key] {
      while (!stop_) {
        try {
          if (store->check({key})) break;
        } catch (const c10::DistNetworkError&) {
          break;  // the store is gone (and no coordinator took over): abort too
        } catch (const c10::DistError&) {
          if (!g_follower) break;
          // Following the leadership: a slow answer is no reason to abort the step.
        } catch (...) {
          break;
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
      signal_->abort();
      done_ = true;
    });
  }
  ~AbortWatcher() {
    stop_ = true;
    thread_.join();
  }
  // Waits until the abort key was seen (or `timeout`); true if seen.
  bool wait_seen(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done_ && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
    return done_;
  }

 private:
  std::shared_ptr<runtime::AbortSignal> signal_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

struct Context {
  WorkerArgs args;
  runtime::RunConfig config;
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Injector> injector;
  std::unique_ptr<runtime::ModelState> state;
  model::Placement placement;  // this worker's device and dtypes (runtime/device.h)
  milliseconds timeout{120000};
  int step = 0;           // the step in flight, for fault injection
  bool via_store = true;  // keys::checkpoint_io(): checkpoints and resume through the store
  bool on_hosts = false;  // keys::checkpoint_io() "hosts": checkpoint.dir is each host's own
  std::string host;       // the host name this worker's shards record
  // Where this worker's checkpoint shards go when they do not travel through the store.
  std::unique_ptr<runtime::CheckpointSink> sink;
  // Shards handed to the sink and not yet acknowledged, oldest first: the prefix their record
  // goes under and the counter it bumps.
  std::deque<std::pair<std::string, std::string>> unacked;
  double checkpoint_ms = 0.0;  // blocked in the last save, for the next step's report
};

// Tells the coordinator which shards are durable (the sink's records, in the order saved).
void acknowledge(Context& cx, const std::vector<runtime::DurableShard>& durable) {
  for (const auto& d : durable) {
    BW_CHECK(!cx.unacked.empty(), "a durable shard of step {} that was never saved", d.steps_done);
    const auto [prefix, counter] = cx.unacked.front();
    cx.unacked.pop_front();
    set_string(*cx.store, keys::checkpoint_ack(prefix, d.files.shard), to_json(d).dump());
    cx.store->add(counter, 1);
  }
}

// Waits until every shard this worker handed over is durable, and says so (before it reports
// anything the coordinator would take for the end of the generation).
void drain_checkpoints(Context& cx) {
  if (cx.sink) {
    runtime::drain_all(*cx.sink, cx.timeout,
                       [&](std::vector<runtime::DurableShard> d) { acknowledge(cx, d); });
  }
}

// This rank's shard of a checkpoint of `steps` steps: handed to the sink (written where the
// workers are, in the background), or uploaded for the coordinator to write
// (keys::checkpoint_io()).
void save_shard(Context& cx, runtime::Worker& worker, int g, int rank, int steps) {
  // In this order on every rank: both gather over sharded stages.
  const auto parameters = worker.owned_parameters();
  const auto optimizer_state = worker.owned_optimizer_state();
  if (!cx.via_store) {
    cx.unacked.emplace_back(keys::checkpoint_shards(g, steps), keys::num_saved(g, steps - 1));
    cx.checkpoint_ms =
        cx.sink->save(runtime::checkpoint_dir(runtime::checkpoint_root(cx.config), steps), steps,
                      rank, worker.owned_layers(), parameters, optimizer_state);
    return;
  }
  upload_shard(*cx.store, keys::checkpoint_shards(g, steps), rank, parameters, optimizer_state);
  cx.store->add(keys::num_saved(g, steps - 1), 1);
}

nlohmann::json checksums(runtime::ModelState& state, const runtime::Worker& worker,
                         const std::vector<int>& layers) {
  const auto params = state.parameter_checksums();
  const auto adam = state.optimizer_checksums();
  nlohmann::json out = nlohmann::json::object();
  for (int l : layers) {
    if (!params.count(l)) continue;  // segmented: per segment below
    out[std::to_string(l)] = {fmt::format("{:016x}", params.at(l)),
                              fmt::format("{:016x}", adam.at(l))};
  }
  for (const auto& [key, sums] : worker.shards().segment_checksums()) {
    out[key] = {fmt::format("{:016x}", sums.first), fmt::format("{:016x}", sums.second)};
  }
  // Every copy of a tied matrix, in every pipeline, must end bitwise equal: one key per group,
  // which the supervisor's replica check compares across ranks.
  for (const auto& [group, sums] : state.tied_copy_checksums()) {
    for (const auto& s : sums) {
      const auto key = "tied/" + group;
      const nlohmann::json value = {fmt::format("{:016x}", s.first),
                                    fmt::format("{:016x}", s.second)};
      if (out.contains(key)) {
        BW_CHECK(out[key] == value, "the copies of tied matrix '{}' on this rank differ", group);
      }
      out[key] = value;
    }
  }
  return out;
}

// Tells the coordinator this rank left generation g on its own: it may be the first to see a
// peer's death, or the only one to see a fault nobody else does.
void left(Context& cx, int g, int rank, const std::string& why) {
  runtime::log(runtime::LogLevel::kInfo, "leaving generation {}: {}", g, why);
  set_string(*cx.store, keys::left(g, rank), why);
  cx.store->add(keys::num_left(g), 1);
}

// One generation; returns when it ended (finished, aborted or a peer was lost).
// Generation g's steps on this rank, from first_step until the coordinator's decision ends them
// (the commit protocol of docs/elastic.md "Protocol of one generation"), then, after the last
// step, the final shard, evaluation and checksums.
void train_generation(Context& cx, int g, int rank, int first_step, runtime::Worker& worker,
                      const std::vector<int>& mine) {
  auto& state = *cx.state;
  bool committed_any = false;
  const int steps = cx.config.train.steps;
  for (int step = first_step; step < steps; ++step) {
    cx.step = step;
    worker.set_slowdown(cx.injector->slowdown(step));
    auto prepared = worker.prepare(step);
    prepared.report.checkpoint_ms = std::exchange(cx.checkpoint_ms, 0.0);
    set_string(*cx.store, keys::ready(g, step, rank), prepared.report.to_json().dump());
    cx.store->add(keys::num_ready(g, step), 1);
    const auto decision_key = keys::decision(g, step);
    bool checkpoint = false;
    const Decision decision =
        decode_decision(await(*cx.store, decision_key, "the commit"), decision_key, &checkpoint);
    if (decision == Decision::kAbort) break;
    if (decision == Decision::kSkip) {  // not finite (train.nonfinite = "skip"): no update anywhere
      worker.skip(step);
    } else {
      cx.injector->at(step, "commit");
      worker.apply(step, prepared);
      cx.injector->at(step, "optimizer");
    }
    if (worker.traced(step)) {  // before the next report: the coordinator reads it then
      set_string(*cx.store, keys::trace(g, step, rank),
                 runtime::to_json(worker.take_trace(step)).dump());
    }
    if (!committed_any) {
      // The layers this worker no longer runs are dropped once the new plan has committed
      // a step (until then they are still a valid source should this generation fail).
      committed_any = true;
      state.keep_only(mine);
    }
    if (checkpoint) save_shard(cx, worker, g, rank, step + 1);
    if (cx.sink) acknowledge(cx, cx.sink->take_durable());
    if (decision == Decision::kLast) break;
  }
  if (state.steps_done == steps) {
    if (first_step == steps) {  // a generation formed after the last commit
      save_shard(cx, worker, g, rank, steps);
    }
    drain_checkpoints(cx);  // the final checkpoint is durable before the run can end
    if (runtime::eval_due(cx.config.train, steps)) {
      // The validation loss after the last step; a generation formed after a failure here
      // evaluates again, from the same parameters.
      cx.step = steps;
      const auto t_eval = Clock::now();
      const double val_loss = worker.evaluate();
      if (rank == 0) {
        set_string(*cx.store, keys::final_eval(g),
                   nlohmann::json{{"val_loss", val_loss}, {"eval_ms", ms_since(t_eval)}}.dump());
      }
    }
    set_string(*cx.store, keys::done(g, rank), checksums(state, worker, mine).dump());
    cx.store->add(keys::num_done(g), 1);
  }
}

// train.resume when its shards are on each host's own disk (resume_fetch.h): this host's shards
// of the manifest, and what it lacks from a peer's over `world`, for this rank's layers.
runtime::LoadedCheckpoint load_resume_on_hosts(Context& cx, int g, int rank,
                                               const runtime::RunLayout& layout,
                                               runtime::Transport* world,
                                               const runtime::AbortSignal& abort,
                                               const std::string& where) {
  const auto info = runtime::parse_sidecar(
      nlohmann::json::parse(await(*cx.store, keys::resume_manifest(), "the resume manifest")),
      "the manifest of " + where);
  const auto dir =
      runtime::checkpoint_dir(runtime::checkpoint_root(cx.config), static_cast<int>(info.step));
  const auto fetched_dir = fmt::format("{}.fetched-w{}", dir, cx.args.worker);
  auto local = [&](const runtime::ShardFiles&, const std::string& file) {
    return find_shard_file(info, dir, file);
  };
  std::set<int> mine;
  for (int s = 0; s < static_cast<int>(info.shards.size()); ++s) {
    const auto& sh = info.shards[s];
    if (!local(sh, sh.model).empty() && !local(sh, sh.optimizer).empty()) mine.insert(s);
  }
  set_string(*cx.store, keys::resume_have(g, rank),
             nlohmann::json{{"host", cx.host}, {"shards", mine}}.dump());
  cx.store->add(keys::num_resume_have(g), 1);
  const int world_size = layout.world_size();
  const auto deadline = Clock::now() + cx.timeout;
  while (cx.store->add(keys::num_resume_have(g), 0) < world_size) {
    // A rank lost before it said: the coordinator aborts the generation.
    if (abort.aborted()) {
      throw CommError(
          fmt::format("generation {} was aborted while its ranks said which shards "
                      "of {} they hold",
                      g, where));
    }
    if (Clock::now() > deadline) {
      throw CommError(
          fmt::format("not every rank said which shards of {} its host holds within "
                      "{} s",
                      where, cx.timeout.count() / 1000));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::set<int>> have(world_size), needed(world_size);
  std::vector<std::string> hosts(world_size);
  for (int r = 0; r < world_size; ++r) {
    const auto key = keys::resume_have(g, r);
    const auto doc =
        nlohmann::json::parse(await(*cx.store, key, "a rank's shards"), nullptr, false);
    if (!doc.is_object() || !doc.contains("shards") || !doc.at("shards").is_array()) {
      throw InternalError(fmt::format("'{}' is not a list of shards: {}", key, doc.dump()));
    }
    hosts[r] = doc.value("host", std::string("?"));
    for (const auto& s : doc.at("shards")) have[r].insert(s.get<int>());
    needed[r] = runtime::layers_to_load(info, layout.layers_of(r));
  }
  const auto plan = plan_shard_fetches(info, have, needed, hosts, where);
  int64_t bytes = 0;
  const bool involved = std::any_of(plan.begin(), plan.end(), [&](const ShardFetch& f) {
    return f.from == rank || f.to == rank;
  });
  if (involved) {
    BW_CHECK(world != nullptr, "a shard fetch in a world of one rank");
    bytes = fetch_shards(info, plan, rank, *world, local, fetched_dir);
  }
  auto found = [&](const runtime::ShardFiles& sh, const std::string& file) {
    auto p = local(sh, file);
    if (p.empty()) {
      std::error_code ec;
      const auto f = std::filesystem::path(fetched_dir) / file;
      if (std::filesystem::exists(f, ec)) p = f.string();
    }
    return p;
  };
  auto ckpt = runtime::load_checkpoint_layers(info, where, found, layout.layers_of(rank));
  std::error_code ec;
  std::filesystem::remove_all(fetched_dir, ec);
  if (bytes > 0) {
    runtime::log(runtime::LogLevel::kInfo, "fetched {} of {}'s shards from peers",
                 io::human_bytes(bytes), where);
  }
  return ckpt;
}

void run_generation(Context& cx, int g) {
  const auto doc = nlohmann::json::parse(await(*cx.store, keys::layout(g), "the layout"));
  const auto layout = runtime::layout_from_json(doc.at("layout"));
  const auto workers = doc.at("workers").get<std::vector<int>>();
  const auto start_key = keys::start(g);
  const Start start = decode_start(await(*cx.store, start_key, "the start"), start_key);
  const int first_step = start.first_step;
  const auto it = std::find(workers.begin(), workers.end(), cx.args.worker);
  if (it == workers.end()) return;  // not in this generation's plan
  const int rank = static_cast<int>(it - workers.begin());
  runtime::set_log_prefix(g, rank);
  cx.step = first_step;
  if (!cx.state) {
    auto model =
        model::resolve_config(cx.config.model.family, cx.config.model.name, cx.config.model.seq_len,
                              cx.config.model.init_from, layout.vocab_size);
    if (cx.config.model.tie_embeddings) model.tie_embeddings = true;
    cx.state = std::make_unique<runtime::ModelState>(
        cx.config.train, model, static_cast<uint64_t>(cx.config.model.seed), cx.placement);
    cx.state->steps_done = first_step;
    // Generation 0's layers exist from the start, so a failure while the generation forms
    // still finds a replica of each (and a later generation loads train.resume into them).
    // A sharded rank builds one layer at a time and keeps only its slice.
    if (g == 0) {
      for (int l : layout.layers_of(rank)) {
        if (layout.segmented(l)) {
          auto [b, e] = layout.shard_range(rank, model::num_parameters(model, l));
          cx.state->add_initial_shard(l, b, e);
        } else {
          cx.state->add_initial(l);
        }
      }
    }
  }
  auto& state = *cx.state;
  BW_CHECK(state.steps_done == first_step,
           "worker {} has applied {} steps but generation {} starts at step {}", cx.args.worker,
           state.steps_done, g, first_step);
  state.steps_skipped = start.skipped_steps;

  auto signal = std::make_shared<runtime::AbortSignal>();
  AbortWatcher watcher(cx.args.store_host, cx.args.store_port, g, signal);
  std::vector<std::unique_ptr<runtime::Transport>> transports;
  try {
    const auto t0 = Clock::now();
    if (g > 0) cx.injector->at(first_step, "reconfigure");
    // Groups rendezvous on their own connection: an abort may leave a join behind, blocked.
    auto group_store = connect(cx.args.store_host, cx.args.store_port, cx.timeout);
    runtime::TransportOptions transport_options;
    transport_options.backend = runtime::parse_backend(cx.config.cluster.backend);
    transport_options.timeout = cx.timeout;
    transport_options.hostname = cx.args.gloo_host;
    transport_options.abort = signal;
    transport_options.gpu = cx.placement.cuda() ? cx.placement.device.index() : -1;
    runtime::TransportFactory factory = [&](const std::string& prefix, int r, int size) {
      return runtime::make_transport(transport_options, group_store, prefix, r, size);
    };
    std::unique_ptr<runtime::Transport> world;
    if (layout.world_size() > 1)
      world = factory(fmt::format("g{}/world", g), rank, layout.world_size());
    double transfer_ms = 0;
    int64_t transfer_bytes = 0;
    // Copies: [layer, from worker, to worker] and, for a range, [begin, end) of its flat values.
    std::vector<runtime::LayerCopy> copies;
    for (const auto& c : start.copies) {
      const auto [begin, end] = c.range.value_or(
          std::make_pair(int64_t{0}, model::num_parameters(state.model(), c.layer)));
      copies.push_back({c.layer, c.from, c.to, begin, end});
    }
    runtime::ReceivedPieces received;
    const auto t_transfer = Clock::now();
    if (!copies.empty()) {
      BW_CHECK(world, "state transfer in a world of one rank");
      auto moved = runtime::transfer_state(state, *world, copies, cx.args.worker, workers,
                                           [&] { cx.injector->at(cx.step, "state_transfer"); });
      received = std::move(moved.received);
      transfer_ms = moved.ms;
      transfer_bytes = moved.bytes_in;
    } else if (g > 0) {
      cx.injector->at(first_step, "state_transfer");
    }
    const auto mine = layout.layers_of(rank);
    for (int l : mine) {
      const auto held = state.held_range(l);
      BW_CHECK(held.first < held.second || received.count(l),
               "worker {} needs layer {} in generation {} but no copy brings it", cx.args.worker, l,
               g);
    }
    runtime::install(state, layout, rank, mine, received);
    runtime::PhaseHook hook = [&cx](const char* phase) {
      if (cx.injector->at(cx.step, phase)) poison_gradients(cx.state->layer_map());
    };
    // Shards on each host's own disk travel over the world before the worker takes it.
    std::optional<runtime::LoadedCheckpoint> from_hosts;
    if (!start.resume.empty() && cx.on_hosts && cx.store->check({keys::resume_manifest()})) {
      from_hosts = load_resume_on_hosts(cx, g, rank, layout, world.get(), *signal, start.resume);
    }
    runtime::Worker worker(cx.config, layout, rank, state, std::move(world), factory, hook);
    const double regroup_ms = ms_since(t0) - transfer_ms;
    if (!copies.empty() && worker.traced(first_step)) {  // the new generation's first step
      const auto begin = runtime::trace_time_us(t_transfer);
      worker.add_trace(
          {"STATE_TRANSFER", "state", begin, begin + static_cast<int64_t>(transfer_ms * 1000.0)});
    }
    const std::string& resume = start.resume;
    if (from_hosts) {
      worker.load_state(from_hosts->weights, &from_hosts->optimizer);
    } else if (!resume.empty() && !cx.via_store && !cx.on_hosts) {
      auto ckpt = runtime::load_checkpoint(resume);
      worker.load_state(ckpt.weights, &ckpt.optimizer);
    } else if (!resume.empty()) {
      // The coordinator read train.resume from its own disk and published it per layer: no
      // worker needs the checkpoint's path on its host.
      std::map<std::string, torch::Tensor> weights, optimizer;
      over_store("read the resume state of " + resume,
                 [&] { get_resume(*cx.store, mine, weights, optimizer); });
      worker.load_state(weights, &optimizer);
    }
    set_string(*cx.store, keys::joined(g, rank),
               encode_joined({regroup_ms, transfer_ms, transfer_bytes}));
    auto release = [&] {
      auto ts = worker.release_transports();
      for (auto& t : ts) transports.push_back(std::move(t));
    };
    try {
      train_generation(cx, g, rank, first_step, worker, mine);
    } catch (const CoordinatorLost&) {
      throw;
    } catch (const CommError& e) {
      left(cx, g, rank, e.what());
    }
    release();
  } catch (const CoordinatorLost&) {
    throw;
  } catch (const CommError& e) {
    left(cx, g, rank, fmt::format("while forming the generation: {}", e.what()));
  }
  // The coordinator aborts every generation it leaves (also when this worker noticed first).
  const bool seen = watcher.wait_seen(cx.timeout);
  runtime::discard_in_background(std::move(transports));
  if (!seen) throw CommError(fmt::format("generation {} was never closed by the coordinator", g));
}

}  // namespace

int run_worker_process(const WorkerArgs& args) {
  // A peer that dies closes its sockets: a write to one must fail with EPIPE (Gloo and the store
  // client then raise an error this process handles as a lost peer), not kill this process with
  // SIGPIPE, which would take its node out with the dead one.
  std::signal(SIGPIPE, SIG_IGN);
  Context cx;
  cx.args = args;
  runtime::set_log_prefix(0, args.worker);
  if (!args.control.empty()) {
    const auto url = parse_control_url(args.control);
    std::shared_ptr<ControlStore> control =
        EtcdControlStore::connect(url, args.run_id, deadline_in(std::chrono::seconds(10)));
    g_follower = std::make_shared<LeaderFollower>(
        std::move(control), StoreAt{args.store_host, args.store_port, args.leader_epoch},
        milliseconds(static_cast<int64_t>(args.leaderless_timeout_s * 1000)));
  }
  try {
    cx.store = connect(args.store_host, args.store_port,
                       milliseconds(static_cast<int64_t>(args.connect_timeout_s * 1000)));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("worker {} cannot reach the coordinator's store at {}:{}: {}",
                                args.worker, args.store_host, args.store_port, e.what()));
  }
  try {
    cx.config = runtime::parse_run_config(await(*cx.store, keys::config(), "the config"),
                                          "the coordinator's config", {});
    cx.timeout = milliseconds(static_cast<int64_t>(cx.config.elastic.step_timeout_s * 1000.0));
    cx.store->setTimeout(cx.timeout);
    const auto period = milliseconds(std::clamp<int64_t>(
        static_cast<int64_t>(cx.config.elastic.heartbeat_timeout_s * 1000.0 / 4), 50, 1000));
    // The device, checked again here: a host of a multi-host run is only seen by its workers.
    // The worker's slot on its host: its local device where each node is a host, its id where
    // one host runs them all.
    const int per_host =
        std::stoi(await(*cx.store, keys::workers_per_host(), "the workers per host"));
    runtime::check_devices(cx.config.cluster, per_host, runtime::visible_gpus(),
                           runtime::built_with_cuda());
    cx.placement =
        runtime::worker_placement(cx.config.train, cx.config.cluster, args.worker % per_host);
    if (cx.placement.cuda()) runtime::use_device(cx.placement.device);
    cx.injector = std::make_unique<Injector>(parse_faults(cx.config.elastic.inject), args.node,
                                             args.device, cx.store);
    cx.injector->at(0, "startup");  // a worker that hangs or dies before its first heartbeat
    // The liveness signal starts before anything that may take long (the model, the data, the
    // Gloo rendezvous): the coordinator allows a worker only its launch before the first beat.
    Heartbeat heartbeat(args.store_host, args.store_port, keys::worker_heartbeat(args.worker),
                        period);
    torch::set_num_threads(std::max(1, cx.config.train.threads_per_worker));
    runtime::set_collective_spin(std::chrono::microseconds(runtime::resolve_collective_spin_us(
        cx.config.train.spin_wait_us, per_host, std::max(1, cx.config.train.threads_per_worker),
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))));
    set_string(*cx.store, keys::worker_up(args.worker, args.incarnation), "1");
    int g = std::stoi(await(*cx.store, keys::worker_generation(args.worker, args.incarnation),
                            "a generation to join"));
    // Set before generation 0 forms (a multi-host coordinator knows it once its agents have
    // registered).
    const auto io_mode = await(*cx.store, keys::checkpoint_io(), "the checkpoint mode");
    cx.via_store = io_mode == "store";
    cx.on_hosts = io_mode == "hosts";
    cx.host = args.node_name.empty() ? runtime::host_name() : args.node_name;
    if (!cx.via_store) {
      runtime::DirectorySinkOptions so;
      so.async = cx.config.checkpoint.async;
      so.host = cx.host;
      so.write_delay = runtime::write_delay_from_env();
      cx.sink = runtime::make_directory_sink(so);
    }
    while (true) {
      run_generation(cx, g);
      // Shards still being written are acknowledged when durable, from a later generation's
      // steps or at the end (the coordinator keeps their checkpoint pending meanwhile).
      if (cx.sink) acknowledge(cx, cx.sink->take_durable());
      std::function<void(c10d::Store&)> report_stopped;
      if (cx.state) {
        Stopped stopped;
        stopped.steps_done = cx.state->steps_done;
        for (int l : cx.state->layers()) stopped.ranges[l] = cx.state->held_range(l);
        report_stopped = [&, text = encode_stopped(stopped)](c10d::Store& store) {
          set_string(store, keys::stopped(g, args.worker), text);
          // Test hook: BW_DELAY_AFTER_STOPPED_MS=<ms> sleeps between the report and its count,
          // so that a coordinator killed on the report dies in between (leadership_test.cc).
          if (const char* v = std::getenv("BW_DELAY_AFTER_STOPPED_MS")) {
            std::this_thread::sleep_for(milliseconds(std::atoi(v)));
          }
          store.add(keys::num_stopped(g), 1);
        };
      }
      const auto next_key = keys::next(g);
      // A coordinator that takes the run over meanwhile re-forms the generation from the reports
      // in its own store: this one is sent again there (failover_store.h). Set before the report
      // is made: a failover inside it (the report reached the old store, its count did not)
      // sends the whole report to the new store, not only the call that failed.
      const ResendOnFailover resend(cx.store.get(), report_stopped);
      if (report_stopped) report_stopped(*cx.store);
      const Next next = decode_next(await(*cx.store, next_key, "the next plan"), next_key);
      if (!next.shutdown) {
        g = next.generation;
        continue;
      }
      if (next.save && cx.state) {
        const auto& save = *next.save;
        if (auto it = save.shards.find(args.worker); it != save.shards.end()) {
          const auto& [shard, layers] = it->second;
          if (cx.via_store) {
            upload_shard(*cx.store, keys::final_shards(g), shard, cx.state->parameters_of(layers),
                         cx.state->optimizer_state_of(layers));
            cx.store->add(keys::num_final(g), 1);
          } else {
            // The stop save: the same sink, durable before this process exits.
            cx.unacked.emplace_back(keys::final_shards(g), keys::num_final(g));
            cx.sink->save(save.dir, cx.state->steps_done, shard, layers,
                          cx.state->parameters_of(layers), cx.state->optimizer_state_of(layers));
            drain_checkpoints(cx);
          }
        }
      }
      drain_checkpoints(cx);  // a periodic checkpoint still in flight is durable before the exit
      return 0;
    }
  } catch (const std::exception& e) {
    // The class travels with the message, so the coordinator reports a worker's bad input as
    // bad input (exit status 2) rather than as a failed peer.
    const bool config = dynamic_cast<const ConfigError*>(&e) != nullptr;
    // A store or Gloo call that failed outside the places that expect it (c10d's DistError) is
    // a lost peer, the coordinator or another worker (exit 3), not a bug.
    const bool comm = dynamic_cast<const CommError*>(&e) != nullptr ||
                      dynamic_cast<const c10::DistError*>(&e) != nullptr;
    try {
      if (!comm) {
        set_string(*cx.store, keys::worker_error(args.worker),
                   encode_worker_error({config, e.what()}));
      }
    } catch (...) {
      // The store is gone too; the exit status still tells the agent.
    }
    if (dynamic_cast<const c10::DistError*>(&e) != nullptr) {
      const std::string what = e.what();
      runtime::log(runtime::LogLevel::kError,
                   "worker {}: lost the coordinator at {}:{} or a peer: {}", args.worker,
                   args.store_host, args.store_port, what.substr(0, what.find('\n')));
    } else {
      runtime::log(runtime::LogLevel::kError, "{}", e.what());
    }
    return config ? 2 : comm ? 3 : 1;
  }
}

}  // namespace bw::elastic
