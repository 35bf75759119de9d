#include "elastic/coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "elastic/inject.h"
#include "elastic/keys.h"
#include "elastic/local_nodes.h"
#include "elastic/metrics_sink.h"
#include "elastic/net.h"
#include "elastic/planning.h"
#include "elastic/process.h"
#include "elastic/remote_nodes.h"
#include "model/flops.h"
#include "elastic/shard_store.h"
#include "elastic/slow_ranks.h"
#include "elastic/store_host.h"
#include "elastic/supervisor.h"
#include "elastic/token.h"
#include "model/sample.h"
#include "runtime/checkpointing.h"
#include "runtime/device.h"
#include "runtime/hf.h"
#include "runtime/log.h"
#include "runtime/out_dir_lock.h"
#include "runtime/resume_check.h"
#include "runtime/run_data.h"

namespace bw::elastic {
namespace fs = std::filesystem;
namespace {

using SteadyClock = std::chrono::steady_clock;

// Ctrl-C / SIGTERM: the first asks for a stop at the next step boundary with a checkpoint, the
// second ends the process at once (its agents and workers die with it, PR_SET_PDEATHSIG). A
// lock-free atomic is safe to change in a signal handler (a volatile sig_atomic_t may only be
// assigned there, not incremented).
std::atomic<int> g_signals{0};
static_assert(std::atomic<int>::is_always_lock_free);
extern "C" void on_stop_signal(int) {
  if (g_signals.fetch_add(1) + 1 >= 2) _exit(130);
}

// An agent's start-up allowance beyond the heartbeat timeout (docs/elastic.md "Start-up"). A
// local agent is this binary started again on this machine: before its first heartbeat it
// execs, loads LibTorch, connects to the store, reads the config and forks its workers, which is
// what this process did up to main() plus a few milliseconds. So it gets twice this process's
// measured start-up, times the processes per core that load at once: local agents all start
// together, and the workers of the first ones up load while the last agents still do (loading
// is CPU-bound). A remote agent has started before it registers; counted from its accepted
// registration it only forks its workers, so twice the same measure (times its workers per core,
// taking this host's cores as the measure) is ample; its workers, which load after that, get
// this allowance as their start-up. Agents started
// later (a node re-joining) get at least twice the longest start-up the supervisor has measured
// in this run (supervisor.h).
void agent_startup(SupervisorOptions& so, bool remote, int nodes, int devices_per_node) {
  so.agents_register = remote;
  const double own_ms = main_entered_ms();
  if (!std::isfinite(own_ms)) {  // not started through breakwater's main(): the old bound
    so.agent_startup_ms = std::max(so.step_timeout_ms, 60000.0);
    so.agent_startup_basis = "no measured start-up: max(elastic.step_timeout_s, 60 s)";
    so.worker_startup_floor_ms = 2000;
    return;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int loading = remote ? devices_per_node : nodes * (1 + devices_per_node);
  const double per_core = std::max(1.0, static_cast<double>(loading) / cores);
  so.agent_startup_ms = 2 * own_ms * per_core;
  // Workers load as their agent did; remote agents were measured from their registration, after
  // they had loaded, so their workers get the agent's allowance as their start-up.
  so.worker_startup_floor_ms = remote ? so.agent_startup_ms : own_ms * per_core;
  so.agent_startup_basis =
      per_core > 1 ? fmt::format(
                         "twice the coordinator's own start-up of {:.2f} s times {:.1f} "
                         "processes loading at once per core ({} on {} cores)",
                         own_ms / 1000, per_core, loading, cores)
                   : fmt::format("twice the coordinator's own start-up of {:.2f} s", own_ms / 1000);
}

struct StopSignals {
  StopSignals() {
    g_signals = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
  struct sigaction old_int {
  }, old_term{};
};

std::string resume_hint(const std::string& sidecar) {
  return fmt::format("resume with `breakwater train <the same config> --train.resume={}`", sidecar);
}

std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// Each rank's model FLOPs per step (elastic/slow_ranks.h): its layers' FLOPs per token times the
// tokens it runs them on.
std::vector<double> rank_work(const runtime::RunLayout& layout, const model::GptConfig& model) {
  const auto shape = model::shape_of(model);
  std::vector<double> work(static_cast<size_t>(layout.world_size()), 0.0);
  for (int r = 0; r < layout.world_size(); ++r) {
    double flops = 0;
    for (int l : layout.layers_of(r)) flops += shape.layer_flops_per_token(l);
    const auto [pipeline, device] = layout.locate(r);
    const auto [first, end] = layout.sample_range(r);
    work[r] = flops * layout.pipelines[pipeline].num_microbatches * (end - first) *
              model.seq_len;
  }
  return work;
}

// Writes metrics.jsonl: one line per committed step, one per event.
class Metrics {
 public:
  // Every line is one checked write: a full disk or an unwritable file is a ConfigError naming
  // the file (exit status 2), never a run that goes on without its metrics.
  Metrics(const std::string& path, bool append) : out_(path, "metrics file", append) {}
  void step(const StepSummary& s) {
    nlohmann::json line = {{"step", s.step},
                           {"loss", s.loss},
                           {"grad_norm", s.grad_norm},
                           {"lr", s.lr},
                           {"step_s", s.step_s},
                           {"tokens_per_s", s.tokens_per_s},
                           {"flops_per_s", s.flops_per_s},
                           {"mfu", s.mfu},
                           {"generation", s.generation},
                           {"world", s.world},
                           {"samples", s.samples},
                           {"skipped", s.skipped},
                           {"skipped_total", s.skipped_total}};
    if (s.val_loss) {
      line["val_loss"] = *s.val_loss;  // after this step's update (null if not finite)
      line["eval_s"] = s.eval_ms / 1000;
    }
    if (!s.relative_compute.empty()) {
      line["relative_compute"] = s.relative_compute;
      line["slow_ranks"] = s.slow_ranks;
    }
    line["ranks"] = nlohmann::json::array();
    for (const auto& r : s.reports) {
      auto j = r.to_json();
      j.erase("samples");
      line["ranks"].push_back(std::move(j));
    }
    write(line);
  }
  void event(const Event& e) {
    write({{"event", e.kind},
           {"step", e.step},
           {"node", e.nodes.empty() ? -1 : e.nodes.front()},
           {"nodes", e.nodes},
           {"generation", e.generation},
           {"cause", e.cause},
           {"old_plan", e.old_plan},
           {"new_plan", e.new_plan},
           {"detect_ms", e.detect_ms},
           {"quiesce_ms", e.quiesce_ms},
           {"plan_ms", e.plan_ms},
           {"regroup_ms", e.regroup_ms},
           {"transfer_ms", e.transfer_ms},
           {"transfer_bytes", e.transfer_bytes},
           {"replay_ms", e.replay_ms},
           {"recovery_ms", e.recovery_ms}});
  }

 private:
  void write(const nlohmann::json& line) { out_.write(line.dump() + "\n"); }
  io::FileWriter out_;
};

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

// A count the sidecar's `extra` records (0 when absent, e.g. a checkpoint of an older build):
// an integer in [0, step], else the sidecar is damaged or edited.
int recorded_count(const runtime::CheckpointInfo& info, const char* key, const std::string& where) {
  if (!info.extra.is_object() || !info.extra.contains(key)) return 0;
  const auto& v = info.extra.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > info.step) {
    throw ConfigError(fmt::format(
        "checkpoint {} records {} = {}, which is not a count of at most its step {}; the sidecar "
        "was edited or damaged: resume from another checkpoint",
        where, key, v.dump(), info.step));
  }
  return static_cast<int>(v.get<int64_t>());
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

RunSummary run_training(const runtime::RunConfig& given, const CoordinatorOptions& options) {
  // The store's server writes to clients that may have died: EPIPE, not a SIGPIPE death.
  signal(SIGPIPE, SIG_IGN);
  const auto t_start = SteadyClock::now();
  const bool remote = !options.listen.empty();
  const std::string token = remote ? coordinator_token(given, true) : std::string();
  runtime::RunConfig config = given;
  config.elastic.run_token.clear();  // never published, saved or checkpointed
  // Data and shapes first: a bad corpus is a clear error before any process starts.
  const std::string data_path =
      config.data.path.empty() ? data::default_corpus_path() : config.data.path;
  const auto run_data = runtime::open_run_data(config.data);
  const auto& dataset = run_data.dataset;
  const auto model = runtime::resolve_run_model(config, run_data);
  if (!model.init_from.empty()) runtime::hf_weights(model);  // a bad folder fails here, once
  {
    data::Sampler sampler(dataset, model.seq_len, static_cast<uint64_t>(config.data.seed));
    sampler.require_global_batch(runtime::global_batch(config.pipeline));
  }
  // The validation split: there, of the training data's kind, and long enough.
  if (config.train.eval_every > 0) {
    runtime::open_validation(config, model.seq_len, dataset.vocab_size());
  }
  // Devices: every mistake is an error here, before any worker starts (runtime/device.h). A
  // multi-host coordinator sees no GPU of the hosts: their agents and workers check there.
  const int world = options.devices > 0 ? options.devices
                                        : config.cluster.nodes * config.cluster.devices_per_node;
  if (!remote) {  // every worker of a local run is on this host
    runtime::check_devices(config.cluster, world, runtime::visible_gpus(),
                           runtime::built_with_cuda());
  }
  if (remote && (options.devices > 0 || world < 2)) {
    throw ConfigError(
        fmt::format("a multi-host run needs at least 2 devices in all ({} node(s) of {}); raise "
                    "--expect-nodes or cluster.devices_per_node",
                    config.cluster.nodes, config.cluster.devices_per_node));
  }

  RunSummary summary;
  const auto faults = parse_faults(config.elastic.inject);  // bad specs fail before any process
  for (const auto& f : faults) {
    if (world == 1 && (f.action != "nan" || f.node != 0 || f.device != 0)) {
      throw ConfigError(
          "elastic.inject in one process (--devices 1) takes only nan:node=0:step=S; the other "
          "faults need worker processes");
    }
  }
  PlanContext ctx;
  RunPlan run;
  if (world == 1) {
    run.layout = single_device_layout(config, model, 0);
    run.workers = {0};
  } else {
    std::tie(ctx, run) = initial_plan(config, model, world);
  }
  for (const auto& pl : run.layout.pipelines) {  // the planner may shard stages from a profile
    for (int w : pl.widths) {
      if (model.tie_embeddings && w > 1) {
        throw ConfigError(
            "model.tie_embeddings does not combine with sharded stages, and the plan shards a "
            "stage over several devices; give pipeline.profile a memory budget that fits one "
            "device per stage, or use --model.tie_embeddings=false");
      }
    }
  }
  for (const auto& f : faults) {  // a fault that can never fire is a mistake, not a no-op
    const int nodes = world == 1 ? 1 : ctx.cluster.num_nodes;
    const int devices = world == 1 ? 1 : ctx.devices_per_node;
    if (f.node >= nodes || f.device >= devices ||
        (f.phase != "startup" && f.phase != "agent_startup" &&
         // The evaluation after the last step is at step = train.steps.
         f.step >= config.train.steps + (f.phase == "eval" ? 1 : 0)) ||
        (f.phase == "eval" && !runtime::eval_due(config.train, f.step))) {
      throw ConfigError(fmt::format(
          "elastic.inject names node {} device {} step {}, but the run has nodes 0..{}, devices "
          "0..{} per node and steps 0..{}{}; name a node, device and step of this run",
          f.node, f.device, f.step, nodes - 1, devices - 1, config.train.steps - 1,
          f.phase == "eval" ? " (phase eval: a step where a validation loss is due, "
                              "train.eval_every, or train.steps for the last)"
                            : ""));
    }
  }
  summary.layout = run.layout;
  summary.notes = run.notes;

  int first_step = 0;
  std::string resume;
  SkipCount skips;  // non-finite steps skipped (one process; the supervisor keeps its own)
  if (!config.train.resume.empty()) {
    auto ckpt = runtime::load_checkpoint(config.train.resume);
    check_checkpoint_matches(ckpt, model, config.model.seed, config.train.resume);
    runtime::check_resume(config, ckpt.info, config.train.resume);
    const auto& info = ckpt.info;
    first_step = static_cast<int>(info.step);
    resume = config.train.resume;
    skips.total = recorded_count(info, "skipped_steps", config.train.resume);
    skips.consecutive = recorded_count(info, "consecutive_skips", config.train.resume);
    if (first_step >= config.train.steps) {
      throw ConfigError(fmt::format(
          "the checkpoint {} is at step {} but train.steps is {}; raise train.steps to continue",
          config.train.resume, first_step, config.train.steps));
    }
  }

  // One run per out_dir: a second one is refused with the first one's pid.
  const auto out_lock = runtime::OutDirLock::acquire(config.train.out_dir);
  runtime::remove_partial_checkpoints(config.train.out_dir);  // leftovers of an interrupted run
  io::write_file((fs::path(config.train.out_dir) / "config.toml").string(),
                 runtime::to_toml(config, /*with_comments=*/false), "resolved config");
  summary.metrics_path = (fs::path(config.train.out_dir) / "metrics.jsonl").string();
  Metrics metrics(summary.metrics_path, first_step > 0);
  std::unique_ptr<TensorBoardSink> tensorboard;
  if (config.train.tensorboard) {
    tensorboard = std::make_unique<TensorBoardSink>((fs::path(config.train.out_dir) / "tb").string());
  }
  // Everything knowable before the run starts (data, plan, faults, resume, out_dir and its lock,
  // the first writes there) has been checked: only now is the plan shown (docs/cli.md).
  if (options.on_plan) options.on_plan(summary.layout, summary.notes);

  const int steps = config.train.steps;
  const double tokens_per_step =
      static_cast<double>(runtime::global_batch(config.pipeline)) * model.seq_len;
  summary.first_step = first_step;
  // Model FLOPs and the devices' peak (model/flops.h): a CPU's peak is measured here, before
  // the workers start, on as many threads as one worker computes with.
  const auto precision = runtime::run_precision(config.train, config.cluster);
  summary.precision = model::precision_name(precision);
  summary.flops_per_token = model::flops_per_token(model);
  if (config.cluster.device == "cpu" && precision == model::Precision::kBf16 &&
      !model::cpu_has_native_bf16()) {
    summary.notes.push_back(
        "train.precision = \"bf16\" on a CPU without AVX512-BF16 or AMX-BF16: bf16 matmuls are "
        "emulated (slow path, slower than fp32); use fp32 on this machine for speed");
  }
  if (config.cluster.device == "cuda" && !remote) {
    const auto peak = model::peak_from_table(runtime::gpu_name(runtime::gpu_of(config.cluster, 0)),
                                             precision);
    summary.peak_flops_per_device = peak.flops_per_s;
    summary.peak_source = peak.source;
  } else {
    const auto peak = model::measure_cpu_peak(precision, config.train.threads_per_worker);
    summary.peak_flops_per_device = peak.flops_per_s;
    summary.peak_source = peak.source;
  }
  const auto t_loop = SteadyClock::now();
  SlowRanks slow(config.elastic.slow_threshold, config.elastic.slow_window);
  int slow_generation = -1;       // the generation `slow` judges
  std::vector<int> slow_workers;  // its rank -> worker
  auto judge_slow_ranks = [&](StepSummary& s) {
    if (s.generation != slow_generation || s.reports.size() < 2) return;
    std::vector<double> compute_ms(s.reports.size(), 0.0);
    for (const auto& r : s.reports) {
      if (r.rank >= 0 && r.rank < static_cast<int>(compute_ms.size())) {
        compute_ms[r.rank] = r.compute_ms;
      }
    }
    if (compute_ms.size() != slow.relative().size() || !slow.judged()) return;
    slow.add(compute_ms);
    s.relative_compute = slow.relative();
    s.slow_ranks = slow.slow();
    for (int r : s.slow_ranks) {
      auto it = std::find_if(summary.slow_ranks.begin(), summary.slow_ranks.end(),
                             [&](const SlowRank& x) {
                               return x.generation == s.generation && x.rank == r;
                             });
      if (it == summary.slow_ranks.end()) {
        SlowRank x;
        x.generation = s.generation;
        x.rank = r;
        x.worker = r < static_cast<int>(slow_workers.size()) ? slow_workers[r] : -1;
        x.first_step = s.step;
        summary.slow_ranks.push_back(x);
        it = summary.slow_ranks.end() - 1;
      }
      ++it->steps;
      it->max_relative = std::max(it->max_relative, s.relative_compute[r]);
    }
  };
  auto judge_plan = [&](const RunPlan& p) {
    slow.reset(rank_work(p.layout, model));
    slow_generation = p.layout.generation;
    slow_workers = p.workers;
  };
  double timed_s = 0;
  int timed_steps = 0;
  auto record_step = [&](StepSummary s) {
    s.steps = steps;
    s.tokens_per_s = tokens_per_step / std::max(s.step_s, 1e-9);
    s.flops_per_s = s.tokens_per_s * summary.flops_per_token;
    s.mfu = s.flops_per_s / std::max(1.0, summary.peak_flops_per_device * std::max(1, s.world));
    s.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - t_loop).count();
    // The first step includes start-up (process launch, connections); leave it out of rates.
    if (s.step > first_step || steps - first_step == 1) {
      timed_s += s.step_s;
      ++timed_steps;
    }
    const double mean_s = timed_steps > 0 ? timed_s / timed_steps : s.step_s;
    s.eta_s = mean_s * (steps - s.step - 1);
    // The copies of a tied matrix (model.tie_embeddings) ran the step with the same bits.
    std::map<std::string, std::pair<int, int64_t>> tied_first;  // group -> (rank, checksum)
    for (const auto& r : s.reports) {
      for (const auto& [group, sums] : r.tied) {
        for (int64_t sum : sums) {
          auto [it, fresh] = tied_first.emplace(group, std::make_pair(r.rank, sum));
          BW_CHECK(fresh || it->second.second == sum,
                   "step {}: the copies of tied matrix '{}' diverged (rank {} has checksum {}, "
                   "rank {} has {})",
                   s.step, group, it->second.first, it->second.second, r.rank, sum);
        }
      }
    }
    if (s.generation == summary.layout.generation) {  // the estimate of the layout that ran
      summary.predicted_bytes.assign(s.reports.size(), 0.0);
      for (const auto& r : s.reports) {
        if (r.rank < 0 || r.rank >= summary.layout.world_size()) continue;
        const auto [p, d] = summary.layout.locate(r.rank);
        summary.predicted_bytes[r.rank] =
            estimate_device_bytes(summary.layout, model, p, d, config.pipeline.recompute == "full",
                                  precision);
      }
    }
    if (summary.peak_rss_kb.size() < s.reports.size()) {
      summary.peak_rss_kb.resize(s.reports.size(), 0);
      summary.compute_share.resize(s.reports.size(), 0.0);
    }
    for (const auto& r : s.reports) {
      summary.peak_rss_kb[r.rank] = std::max(summary.peak_rss_kb[r.rank], r.peak_rss_kb);
      summary.compute_share[r.rank] += r.compute_ms / std::max(r.step_ms, 1e-9);
    }
    if (s.skipped) summary.skipped_steps.push_back(s.step);
    if (s.step == first_step) summary.first_loss = s.loss;
    if (!s.skipped) summary.final_loss = s.loss;
    if (s.val_loss) {
      summary.final_val_loss = s.val_loss;
      summary.final_val_step = s.step + 1;
    }
    judge_slow_ranks(s);
    metrics.step(s);
    if (tensorboard) tensorboard->step(s);
    if (options.on_step) options.on_step(s);
  };
  auto checkpoint_info = [&](int steps_done, const RunPlan& plan, SkipCount skipped) {
    runtime::CheckpointInfo info;
    info.step = steps_done;
    info.next_sample = int64_t{steps_done} * runtime::global_batch(config.pipeline);
    info.config_toml = runtime::to_toml(config);
    info.extra = {{"generation", plan.layout.generation},
                  {"layout", runtime::to_json(plan.layout)},
                  {"skipped_steps", skipped.total},
                  {"consecutive_skips", skipped.consecutive}};
    if (auto tied = runtime::tied_record(model); !tied.is_null()) info.extra["tied"] = tied;
    return info;
  };

  torch::set_num_threads(std::max(1, config.train.threads_per_worker));
  StopSignals stop_signals;
  if (world == 1) {
    const auto placement = runtime::worker_placement(config.train, config.cluster, 0);
    if (placement.cuda()) runtime::use_device(placement.device);
    runtime::ModelState state(config.train, model, static_cast<uint64_t>(config.model.seed),
                              placement);
    state.keep_only(run.layout.layers_of(0));
    state.steps_done = first_step;
    state.steps_skipped = skips.total;
    // Fault injection in one process: `nan` only (node 0, device 0), once per spec.
    int cur_step = first_step;
    std::vector<bool> fired(faults.size(), false);
    runtime::PhaseHook hook = [&](const char* phase) {
      for (size_t i = 0; i < faults.size(); ++i) {
        if (!fired[i] && faults[i].step == cur_step && faults[i].phase == phase) {
          fired[i] = true;
          poison_gradients(state.layer_map());
        }
      }
    };
    runtime::Worker worker(config, run.layout, 0, state, nullptr, {}, hook);
    if (!resume.empty()) {
      auto ckpt = runtime::load_checkpoint(resume);
      worker.load_state(ckpt.weights, &ckpt.optimizer);
    }
    auto t_prev = SteadyClock::now();
    for (int step = first_step; step < steps; ++step) {
      cur_step = step;
      auto prepared = worker.prepare(step);
      auto& report = prepared.report;
      const bool finite = std::isfinite(report.loss) && std::isfinite(report.grad_norm);
      const bool skip_policy = config.train.nonfinite == "skip";
      if (!finite && (!skip_policy || skips.consecutive >= config.train.skip_limit)) {
        const auto last = runtime::latest_checkpoint(config.train.out_dir);
        throw ConfigError(fmt::format(
            "training diverged at step {}: the loss is {} and the gradient norm {}{}; the step "
            "was not applied. {}; lower train.lr, raise train.warmup_steps or tighten "
            "train.grad_clip",
            step, report.loss, report.grad_norm,
            skip_policy ? fmt::format(" after {} skipped steps in a row (train.skip_limit)",
                                      skips.consecutive)
                        : std::string(),
            last.empty() ? std::string("There is no checkpoint")
                         : fmt::format("The last good checkpoint is {}: resume with "
                                       "--train.resume={}",
                                       last, last)));
      }
      if (finite) {
        worker.apply(step, prepared);
        skips.consecutive = 0;
      } else {  // the same decision the supervisor makes for workers
        worker.skip(step);
        skips.total += 1;
        skips.consecutive += 1;
      }
      if (g_signals > 0 && step + 1 < steps) {
        const auto dir = runtime::checkpoint_dir(config.train.out_dir, step + 1);
        runtime::write_shard(worker, dir);
        const auto sidecar = runtime::merge_shards(dir, 1, checkpoint_info(step + 1, run, skips));
        throw Interrupted(fmt::format("stopped at step {} on request; wrote {}; {}", step + 1,
                                      sidecar, resume_hint(sidecar)));
      }
      if (runtime::checkpoint_due(config.train, step)) {
        const auto dir = runtime::checkpoint_dir(config.train.out_dir, step + 1);
        runtime::write_shard(worker, dir);
        summary.checkpoint = runtime::merge_shards(dir, 1, checkpoint_info(step + 1, run, skips));
      }
      StepSummary s;
      s.step = step;
      s.loss = report.loss;
      s.grad_norm = report.grad_norm;
      s.lr = report.lr;
      s.world = 1;
      s.samples = samples_digest(report.samples);
      s.skipped = !finite;
      s.skipped_total = skips.total;
      if (runtime::eval_due(config.train, step + 1)) {
        const auto t_eval = SteadyClock::now();
        s.val_loss = worker.evaluate();
        s.eval_ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t_eval).count();
      }
      const auto now = SteadyClock::now();
      s.step_s = std::chrono::duration<double>(now - t_prev).count();
      t_prev = now;
      s.reports = {report};
      record_step(std::move(s));
    }
  } else {
    // Local runs listen on loopback only; multi-host runs where told (store_host.h).
    HostPort listen{"127.0.0.1", config.elastic.store_port};
    if (remote) listen = parse_host_port(options.listen, "--listen");
    const auto store = host_store(
        listen.host, listen.port,
        std::chrono::milliseconds(static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0)));
    const auto toml = runtime::to_toml(config);
    store->set(keys::config(), std::vector<uint8_t>(toml.begin(), toml.end()));
    // Local workers share this filesystem and write and read checkpoints themselves, in
    // parallel; across hosts nothing is assumed shared and checkpoints pass through the store.
    const bool via_store = remote;
    const std::string io_mode = via_store ? "store" : "files";
    store->set(keys::checkpoint_io(), std::vector<uint8_t>(io_mode.begin(), io_mode.end()));
    const std::string per_host = std::to_string(
        remote ? ctx.devices_per_node : ctx.cluster.num_nodes * ctx.devices_per_node);
    store->set(keys::workers_per_host(), std::vector<uint8_t>(per_host.begin(), per_host.end()));
    const std::string exe = options.executable.empty() ? self_executable() : options.executable;
    std::unique_ptr<LocalNodes> local;
    std::unique_ptr<RemoteNodes> hosts;
    // Across hosts nothing of train.out_dir or train.resume is read or written by another
    // process: the resume state goes out and checkpoint shards come back through the store
    // (shard_store.h).
    const int num_layers = model::num_layers(model);
    if (!resume.empty() && via_store) {
      const auto bytes = put_resume(*store, runtime::load_checkpoint(resume), num_layers);
      runtime::log(runtime::LogLevel::kInfo, "published {} of resume state from {}",
                   io::human_bytes(bytes), resume);
    }
    if (remote) {
      hosts =
          std::make_unique<RemoteNodes>(store, token, ctx.cluster.num_nodes, ctx.devices_per_node);
      hosts->require_data(data_path, dataset.content_digest());
      if (options.on_listen) options.on_listen(listen.host, store->getPort());
      hosts->wait_for_agents(options.wait_s, options.expected_names, [] { return g_signals > 0; });
    } else {
      local =
          std::make_unique<LocalNodes>(exe, "127.0.0.1", store->getPort(), ctx.devices_per_node);
    }
    Nodes& nodes = remote ? static_cast<Nodes&>(*hosts) : static_cast<Nodes&>(*local);
    // The run is over: local agents are killed, remote ones told (they exit by themselves).
    auto end_nodes = [&](const std::string& how) {
      if (local) local->kill_all();
      if (hosts) hosts->end_run(how, 5000);
    };
    SystemClock clock;
    SupervisorOptions so;
    so.steps = steps;
    so.first_step = first_step;
    so.resume = resume;
    so.skipped = skips.total;
    so.consecutive_skips = skips.consecutive;
    so.step_timeout_ms = config.elastic.step_timeout_s * 1000;
    so.heartbeat_timeout_ms = config.elastic.heartbeat_timeout_s * 1000;
    // Remote agents come back by themselves (after rejoin_after_s of their own).
    so.rejoin_after_ms = remote ? 0 : config.elastic.rejoin_after_s * 1000;
    agent_startup(so, remote, ctx.cluster.num_nodes, ctx.devices_per_node);
    so.stop_grace_ms = std::max(2000.0, so.heartbeat_timeout_ms);
    Supervisor sup(store, clock, nodes, ctx, run, so);
    bool resume_published = !resume.empty();
    sup.on_step = [&](const StepRecord& r) {
      if (resume_published) {
        // A committed step: no later generation loads train.resume (supervisor.cc, publish).
        erase_resume(*store, num_layers);
        resume_published = false;
      }
      StepSummary s;
      s.step = r.step;
      s.loss = r.loss;
      s.grad_norm = r.grad_norm;
      s.lr = r.lr;
      s.step_s = r.step_s;
      s.generation = r.generation;
      s.world = r.world;
      s.samples = r.samples;
      s.skipped = r.skipped;
      s.skipped_total = r.skipped_total;
      s.val_loss = r.val_loss;
      s.eval_ms = r.eval_ms;
      s.reports = r.reports;
      record_step(std::move(s));
    };
    sup.on_event = [&](const Event& e) {
      summary.events.push_back(e);
      metrics.event(e);
      if (tensorboard) tensorboard->event(e);
      if (options.on_event) options.on_event(e);
    };
    sup.on_plan = [&](const RunPlan& p) {
      judge_plan(p);
      summary.layout = p.layout;
      summary.generations = p.layout.generation + 1;
      if (p.layout.generation > 0 && options.on_plan) options.on_plan(p.layout, p.notes);
    };
    sup.on_checkpoint = [&](int steps_done, int shards, const RunPlan& p,
                            const std::string& prefix) {
      const auto dir = runtime::checkpoint_dir(config.train.out_dir, steps_done);
      try {
        if (via_store) receive_shards(*store, prefix, shards, dir);
      } catch (...) {
        std::error_code ec;
        fs::remove_all(runtime::staging_dir(dir), ec);
        erase_shards(*store, prefix, shards);
        throw;
      }
      summary.checkpoint = runtime::merge_shards(
          dir, shards, checkpoint_info(steps_done, p, sup.skips_at(steps_done)));
      return summary.checkpoint;
    };
    sup.on_checkpoint_dropped = [&](const std::string& prefix, int shards) {
      erase_shards(*store, prefix, shards);
      // Local writers staged their files themselves: a checkpoint that will not complete leaves
      // no partial staging behind for a later generation's writers to mix with (the stop save,
      // "g{g}/final", ends the run: every staging directory goes).
      if (!via_store) {
        std::error_code ec;
        const auto at = prefix.find("/ckpt/");
        if (at != std::string::npos) {
          const int steps = std::stoi(prefix.substr(at + 6));
          fs::remove_all(runtime::staging_dir(runtime::checkpoint_dir(config.train.out_dir, steps)),
                         ec);
        } else {
          for (const auto& entry : fs::directory_iterator(config.train.out_dir, ec)) {
            const auto name = entry.path().filename().string();
            if (name.starts_with("checkpoint-") && name.ends_with(".tmp"))
              fs::remove_all(entry.path(), ec);
          }
        }
      }
    };
    runtime::log(runtime::LogLevel::kInfo, "store on {}:{}, {} nodes", listen.host,
                 store->getPort(), ctx.cluster.num_nodes);
    sup.start();
    bool asked = false;
    while (sup.tick()) {
      if (g_signals > 0 && !asked) {
        asked = true;
        sup.request_stop();
        fmt::print(stderr,
                   "\nstopping at the next step boundary with a checkpoint (again to stop "
                   "at once)\n");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    const auto& out = sup.outcome();
    if (out.kind == Outcome::kInterrupted) {
      end_nodes(out.message);
      if (out.checkpoint.empty()) throw Interrupted(out.message + "; no checkpoint was written");
      throw Interrupted(fmt::format("{}; wrote {}; {}", out.message, out.checkpoint,
                                    resume_hint(out.checkpoint)));
    }
    if (out.kind == Outcome::kFailed) {
      end_nodes(out.message);
      if (out.config_error) throw ConfigError(out.message);
      throw InternalError(out.message);
    }
    if (out.kind == Outcome::kStopped) {
      end_nodes(out.message);
      std::string how;
      if (!out.checkpoint.empty()) {
        how = fmt::format(
            "; wrote the last committed state to {}; resume with `breakwater train <this "
            "config> --train.resume={}` (on the nodes that are left, e.g. --cluster.nodes=N)",
            out.checkpoint, out.checkpoint);
      }
      throw CommError(out.message + how);
    }
    if (local) local->wait_all(10000);
    if (hosts) hosts->end_run("finished", 10000);
  }
  summary.steps_done = steps - first_step;
  for (auto& share : summary.compute_share) share /= std::max(1, summary.steps_done);
  summary.tokens_per_s = timed_steps > 0 ? tokens_per_step * timed_steps / timed_s : 0.0;
  summary.flops_per_s = summary.tokens_per_s * summary.flops_per_token;
  summary.mfu = summary.flops_per_s / std::max(1.0, summary.peak_flops_per_device *
                                                        std::max(1, summary.layout.world_size()));

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
    // The token documents start with: the tokenizer's, '\n' for bytes, GPT-2's end of text.
    int64_t prompt = dataset.vocab_size() == data::kTextVocab ? '\n' : 50256;
    if (run_data.tokenizer) prompt = run_data.tokenizer->document_token().value_or(0);
    model::SampleOptions so;
    so.num_tokens = config.train.sample_tokens;
    so.seed = static_cast<uint64_t>(config.model.seed);
    const auto ids = model::sample_tokens(layers, model, {prompt}, so);
    if (run_data.tokenizer) {
      const std::vector<uint32_t> u(ids.begin(), ids.end());
      summary.sample = run_data.tokenizer->decode(u);
    } else {
      summary.sample = render_sample(ids, dataset.vocab_size());
    }
    // For programs: the ids and the text (tests decode the ids with the tokenizer's own code).
    const nlohmann::json doc = {{"prompt", nlohmann::json::array({prompt})},
                                {"ids", ids},
                                {"text", summary.sample},
                                {"tokenizer", run_data.tokenizer_path}};
    io::write_file((fs::path(config.train.out_dir) / "sample.json").string(),
                   doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                   "the sample");
  }
  summary.total_s = std::chrono::duration<double>(SteadyClock::now() - t_start).count();
  return summary;
}

}  // namespace bw::elastic
