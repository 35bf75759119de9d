#include "elastic/coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "elastic/control_store_etcd.h"
#include "elastic/inject.h"
#include "elastic/keys.h"
#include "elastic/leadership.h"
#include "elastic/local_nodes.h"
#include "elastic/messages.h"
#include "elastic/metrics_sink.h"
#include "elastic/net.h"
#include "elastic/planning.h"
#include "elastic/process.h"
#include "elastic/remote_nodes.h"
#include "elastic/shard_store.h"
#include "elastic/slow_ranks.h"
#include "elastic/store_host.h"
#include "elastic/supervisor.h"
#include "elastic/token.h"
#include "model/flops.h"
#include "model/init.h"
#include "model/sample.h"
#include "runtime/checkpoint_sink.h"
#include "runtime/checkpointing.h"
#include "runtime/device.h"
#include "runtime/hf.h"
#include "runtime/log.h"
#include "runtime/out_dir_lock.h"
#include "runtime/resolved_run.h"
#include "runtime/resume_check.h"
#include "runtime/run_data.h"
#include "runtime/trace_events.h"

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
// local agent is this binary started again on this machine: before its first heartbeat it is
// forked from this process's fork server (fork_server.h), or execs and loads LibTorch where there
// is none, connects to the store, reads the config and spawns its workers, which is at most what
// this process did up to main() plus a few milliseconds. So it gets twice this process's
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
    work[r] = flops * layout.pipelines[pipeline].num_microbatches * (end - first) * model.seq_len;
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
           {"recovery_ms", e.recovery_ms},
           {"campaign_ms", e.campaign_ms},
           {"reconcile_ms", e.reconcile_ms}});
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

// --- run_training as an assembly: check_setup (everything knowable before a process starts),
// RunReport (the run report through the metrics sinks), then one process (run_single_process)
// or the cluster (run_cluster: store, nodes, supervisor), and the end-of-run sample.

// What a run needs, every part of it checked before any process starts or anything is shown.
struct RunSetup {
  runtime::RunConfig config;
  bool remote = false;  // a multi-host run (options.listen)
  std::string token;    // the run token of a multi-host run, never published
  std::string data_path;
  std::optional<runtime::RunData> run_data;
  model::GptConfig model;
  int world = 0;  // devices in all
  std::vector<FaultSpec> faults;
  PlanContext ctx;  // world > 1 only
  RunPlan run;      // generation 0
  std::vector<std::string> notes;
  int first_step = 0;
  std::string resume;  // the checkpoint generation 0 loads
  // train.resume is a sharded checkpoint whose shards are not all on this host (checkpoint.dir on
  // each host's own disk): only its manifest was checked here; the workers load the shards.
  bool resume_elsewhere = false;
  // "files" | "store" | "hosts" (keys::checkpoint_io), set when the cluster is known.
  std::string checkpoint_io = "files";
  SkipCount skips;  // non-finite steps skipped (one process; the supervisor keeps its own)
  std::vector<int> trace_steps;
  std::optional<runtime::OutDirLock> out_lock;  // one run per out_dir
  // The run's leadership in etcd (options.control), when it has one: every decision and
  // checkpoint commit is fenced by it.
  std::unique_ptr<Leadership> leadership;
  // A standby (options.standby): when it last saw its predecessor's store answer (SystemClock
  // ms; 0 = never), and whether it found nothing to take over.
  double predecessor_alive_ms = 0;
  bool idle = false;
};

void check_faults(const RunSetup& s) {
  const auto& config = s.config;
  for (const auto& f : s.faults) {
    if (s.world == 1 && (f.action != "nan" || f.node != 0 || f.device != 0)) {
      throw ConfigError(
          "elastic.inject in one process (--devices 1) takes only nan:node=0:step=S; the other "
          "faults need worker processes");
    }
  }
  for (const auto& f : s.faults) {  // a fault that can never fire is a mistake, not a no-op
    const int nodes = s.world == 1 ? 1 : s.ctx.cluster.num_nodes;
    const int devices = s.world == 1 ? 1 : s.ctx.devices_per_node;
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
}

// checkpoint.replicas as resolved from its automatic value, in both copies of the config.
void set_replicas(RunSetup& s, int replicas) {
  s.config.checkpoint.replicas = replicas;
  s.ctx.config.checkpoint.replicas = replicas;
}

// A file only this host's filesystem holds at checkpoint.dir: an agent that sees it there shares
// that filesystem (keys::checkpoint_probe). Removed when the run ends.
class ProbeFile {
 public:
  explicit ProbeFile(const std::string& dir) {
    std::random_device rd;
    name_ = fmt::format(".breakwater-probe-{:08x}{:08x}", rd(), rd());
    path_ = (fs::path(dir) / name_).string();
    std::error_code ec;
    fs::create_directories(dir, ec);
    try {
      io::write_file(path_, "breakwater\n", "the probe file of checkpoint.dir");
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format(
          "checkpoint.dir '{}' cannot be written on the coordinator's host: {}; make it "
          "writable, or give another checkpoint.dir",
          dir, e.what()));
    }
  }
  ~ProbeFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  ProbeFile(const ProbeFile&) = delete;
  ProbeFile& operator=(const ProbeFile&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_, path_;
};

// Whether every shard file a manifest names is in its directory here.
bool shards_all_here(const runtime::CheckpointInfo& info, const std::string& dir_or_sidecar) {
  std::error_code ec;
  fs::path dir(dir_or_sidecar);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  for (const auto& sh : info.shards) {
    for (const auto& f : {sh.model, sh.optimizer}) {
      if (!fs::exists(dir / f, ec)) return false;
    }
  }
  return true;
}

// The resume position (train.resume), checked against the model and the config.
void check_resume_position(RunSetup& s) {
  const auto& config = s.config;
  if (config.train.resume.empty()) return;
  runtime::LoadedCheckpoint ckpt;
  try {
    ckpt = runtime::load_checkpoint(config.train.resume);
    check_checkpoint_matches(ckpt, s.model, config.model.seed, config.train.resume);
  } catch (const ConfigError&) {
    // A multi-host run with checkpoint.dir on each host's own disk resumes from the manifest
    // here; each host loads the shards it holds (checked there with every check of a load).
    auto info = runtime::read_checkpoint_info(config.train.resume);
    if (!s.remote || config.checkpoint.dir.empty() || info.shards.empty() ||
        shards_all_here(info, config.train.resume)) {
      throw;
    }
    ckpt.info = std::move(info);
    s.resume_elsewhere = true;
  }
  runtime::check_resume(config, ckpt.info, config.train.resume);
  const auto& info = ckpt.info;
  s.first_step = static_cast<int>(info.step);
  s.resume = config.train.resume;
  s.skips.total = recorded_count(info, "skipped_steps", config.train.resume);
  s.skips.consecutive = recorded_count(info, "consecutive_skips", config.train.resume);
  if (s.first_step >= config.train.steps) {
    throw ConfigError(fmt::format(
        "the checkpoint {} is at step {} but train.steps is {}; raise train.steps to continue",
        config.train.resume, s.first_step, config.train.steps));
  }
}

// Set-up checks: data and shapes, devices, faults, the plan, the resume position, the traced
// steps, then out_dir (its lock, leftovers, config.toml). A ConfigError on the first problem.
void check_setup(RunSetup& s, const runtime::RunConfig& given, const CoordinatorOptions& options) {
  s.remote = !options.listen.empty();
  s.token = s.remote ? coordinator_token(given, true) : std::string();
  s.config = given;
  s.config.elastic.run_token.clear();  // never published, saved or checkpointed
  const auto& config = s.config;
  // Data and shapes first: a bad corpus is a clear error before any process starts.
  s.data_path = config.data.path.empty() ? data::default_corpus_path() : config.data.path;
  s.run_data.emplace(runtime::open_run_data(config.data));
  const auto& dataset = s.run_data->dataset;
  s.model = runtime::resolve_run_model(config, *s.run_data);
  if (!s.model.init_from.empty()) runtime::hf_folder(s.model);  // a bad folder fails here, once
  {
    data::Sampler sampler(dataset, s.model.seq_len, static_cast<uint64_t>(config.data.seed));
    sampler.require_global_batch(runtime::global_batch(config.pipeline));
  }
  // The validation split: there, of the training data's kind, and long enough.
  if (config.train.eval_every > 0) {
    runtime::open_validation(config, s.model.seq_len, dataset.vocab_size());
  }
  // Devices: every mistake is an error here, before any worker starts (runtime/device.h). A
  // multi-host coordinator sees no GPU of the hosts: their agents and workers check there.
  s.world = options.devices > 0 ? options.devices
                                : config.cluster.nodes * config.cluster.devices_per_node;
  if (!s.remote) {  // every worker of a local run is on this host
    runtime::check_devices(config.cluster, s.world, runtime::visible_gpus(),
                           runtime::built_with_cuda());
  }
  if (s.remote && (options.devices > 0 || s.world < 2)) {
    throw ConfigError(
        fmt::format("a multi-host run needs at least 2 devices in all ({} node(s) of {}); raise "
                    "--expect-nodes or cluster.devices_per_node",
                    config.cluster.nodes, config.cluster.devices_per_node));
  }
  s.faults = parse_faults(config.elastic.inject);  // bad specs fail before any process
  if (s.world == 1) {
    s.run.layout = single_device_layout(config, s.model, 0);
    s.run.workers = {0};
  } else {
    std::tie(s.ctx, s.run) = initial_plan(config, s.model, s.world);
  }
  for (const auto& pl : s.run.layout.pipelines) {  // the planner may shard stages from a profile
    for (int w : pl.widths) {
      if (s.model.tie_embeddings && w > 1) {
        throw ConfigError(
            "model.tie_embeddings does not combine with sharded stages, and the plan shards a "
            "stage over several devices; give pipeline.profile a memory budget that fits one "
            "device per stage, or use --model.tie_embeddings=false");
      }
    }
  }
  check_faults(s);
  // checkpoint.replicas = -1 (auto) is 0 unless checkpoint.dir may be each host's own disk, which
  // only the agents can tell (run_cluster resolves it then).
  if (config.checkpoint.replicas == runtime::CheckpointConfig::kAutoReplicas &&
      !(s.remote && !config.checkpoint.dir.empty())) {
    set_replicas(s, 0);
  }
  if (const int pipelines = static_cast<int>(s.run.layout.pipelines.size());
      config.checkpoint.replicas > pipelines - 1) {
    throw ConfigError(fmt::format(
        "checkpoint.replicas = {} needs {} pipelines (each copy of a layer is written by another "
        "pipeline, on other nodes), and the plan has {}; lower checkpoint.replicas to {} or run "
        "more nodes",
        config.checkpoint.replicas, config.checkpoint.replicas + 1, pipelines, pipelines - 1));
  }
  if (s.remote && config.checkpoint.dir.empty() && config.checkpoint.replicas > 0) {
    throw ConfigError(
        "checkpoint.replicas needs checkpoint.dir in a multi-host run: without it checkpoints "
        "travel through the coordinator's store and are merged into one copy there; set "
        "checkpoint.dir or checkpoint.replicas = 0");
  }
  s.notes = s.run.notes;
  if (config.elastic.rebalance && s.run.layout.pipelines.size() < 2) {
    s.notes.push_back(
        "elastic.rebalance re-fits the batch split across pipelines, and this plan has one "
        "pipeline: nothing to rebalance unless a join adds one");
  }
  check_resume_position(s);
  // train.trace_steps: steps this run (from first_step on) will run.
  s.trace_steps = runtime::parse_trace_steps(config.train.trace_steps, config.train.steps);
  if (!s.trace_steps.empty() && s.trace_steps.front() < s.first_step) {
    throw ConfigError(fmt::format(
        "train.trace_steps names step {}, but this run resumes from {} at step {} and runs "
        "steps {}..{}; trace steps of this run",
        s.trace_steps.front(), config.train.resume, s.first_step, s.first_step,
        config.train.steps - 1));
  }
  // One run per out_dir: a second one is refused with the first one's pid.
  s.out_lock.emplace(runtime::OutDirLock::acquire(config.train.out_dir));
  runtime::remove_partial_checkpoints(config.train.out_dir);  // leftovers of an interrupted run
  if (!config.checkpoint.dir.empty()) {
    runtime::check_out_dir_usable(config.checkpoint.dir, "checkpoint.dir");
    std::error_code ec;
    fs::create_directories(config.checkpoint.dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("cannot create checkpoint.dir '{}': {}; choose a writable path",
                                    config.checkpoint.dir, ec.message()));
    }
    // A standby shares checkpoint.dir with the coordinator that leads: that one's checkpoints in
    // progress are staged there, and are not leftovers. A standby that wins leaves them too: the
    // commit after them removes the earlier ones (runtime/checkpointing.h).
    if (!options.standby) runtime::remove_partial_checkpoints(config.checkpoint.dir);
  }
  runtime::ResolvedRun resolved;
  resolved.model = s.model;
  resolved.data_vocab = dataset.vocab_size();
  resolved.data_tokenizer = s.run_data->tokenizer_path;
  resolved.precision = model::precision_name(runtime::run_precision(config.train, config.cluster));
  resolved.layout = s.run.layout;
  io::write_file((fs::path(config.train.out_dir) / "config.toml").string(),
                 runtime::saved_config_toml(config, resolved), "resolved config");
}

// The run report: every committed step and event goes to the metrics sinks (metrics.jsonl,
// TensorBoard, the caller's progress line), with the rates, slow ranks, memory, the traced steps
// and the summary they add up to.
class RunReport {
 public:
  RunReport(const RunSetup& setup, const CoordinatorOptions& options)
      : setup_(setup),
        options_(options),
        metrics_((fs::path(setup.config.train.out_dir) / "metrics.jsonl").string(),
                 setup.first_step > 0),
        precision_(runtime::run_precision(setup.config.train, setup.config.cluster)),
        tokens_per_step_(static_cast<double>(runtime::global_batch(setup.config.pipeline)) *
                         setup.model.seq_len),
        slow_(setup.config.elastic.slow_threshold, setup.config.elastic.slow_window) {
    const auto& out_dir = setup.config.train.out_dir;
    summary.metrics_path = (fs::path(out_dir) / "metrics.jsonl").string();
    if (setup.config.train.tensorboard) {
      tensorboard_ = std::make_unique<TensorBoardSink>((fs::path(out_dir) / "tb").string());
    }
    summary.layout = setup.run.layout;
    summary.notes = setup.notes;
    summary.first_step = setup.first_step;
  }

  RunSummary summary;

  // Model FLOPs and the devices' peak (model/flops.h): a CPU's peak is measured here, before
  // the workers start, on as many threads as one worker computes with. The loop's clock starts.
  void start_loop() {
    const auto& config = setup_.config;
    summary.precision = model::precision_name(precision_);
    summary.flops_per_token = model::flops_per_token(setup_.model);
    if (config.cluster.device == "cpu" && precision_ == model::Precision::kBf16 &&
        !model::cpu_has_native_bf16()) {
      summary.notes.push_back(
          "train.precision = \"bf16\" on a CPU without AVX512-BF16 or AMX-BF16: bf16 matmuls are "
          "emulated (slow path, slower than fp32); use fp32 on this machine for speed");
    }
    const auto peak = config.cluster.device == "cuda" && !setup_.remote
                          ? model::peak_from_table(
                                runtime::gpu_name(runtime::gpu_of(config.cluster, 0)), precision_)
                          : model::measure_cpu_peak(precision_, config.train.threads_per_worker);
    summary.peak_flops_per_device = peak.flops_per_s;
    summary.peak_source = peak.source;
    t_loop_ = SteadyClock::now();
  }

  // A generation's plan (the first one included): slow ranks and traces follow it.
  void plan(const RunPlan& p) {
    slow_.reset(rank_work(p.layout, setup_.model));
    slow_generation_ = p.layout.generation;
    slow_workers_ = p.workers;
    runtime::TracedStep t;
    t.generation = p.layout.generation;
    for (const auto& pl : p.layout.pipelines) t.pipeline_kinds.push_back(pl.schedule.kind);
    for (int r = 0; r < p.layout.world_size(); ++r) t.rank_at.push_back(p.layout.locate(r));
    t.workers = p.workers;
    traced_plans_[p.layout.generation] = std::move(t);
    summary.layout = p.layout;
    summary.generations = p.layout.generation + 1;
    if (p.layout.generation > 0 && options_.on_plan) options_.on_plan(p.layout, p.notes);
  }

  void step(StepSummary s) {
    const int steps = setup_.config.train.steps;
    const int first_step = setup_.first_step;
    s.steps = steps;
    s.tokens_per_s = tokens_per_step_ / std::max(s.step_s, 1e-9);
    s.flops_per_s = s.tokens_per_s * summary.flops_per_token;
    s.mfu = s.flops_per_s / std::max(1.0, summary.peak_flops_per_device * std::max(1, s.world));
    s.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - t_loop_).count();
    // The first step includes start-up (process launch, connections); leave it out of rates.
    if (s.step > first_step || steps - first_step == 1) {
      timed_s_ += s.step_s;
      ++timed_steps_;
    }
    const double mean_s = timed_steps_ > 0 ? timed_s_ / timed_steps_ : s.step_s;
    s.eta_s = mean_s * (steps - s.step - 1);
    check_tied_copies(s);
    record_memory(s);
    if (s.skipped) summary.skipped_steps.push_back(s.step);
    // A coordinator that took the run over sees its steps from the one after the takeover.
    if (!summary.first_loss_step) {
      summary.first_loss = s.loss;
      summary.first_loss_step = s.step;
    }
    if (!s.skipped) summary.final_loss = s.loss;
    if (s.val_loss) {
      summary.final_val_loss = s.val_loss;
      summary.final_val_step = s.step + 1;
    }
    judge_slow_ranks(s);
    if (std::binary_search(setup_.trace_steps.begin(), setup_.trace_steps.end(), s.step)) {
      auto it = traced_plans_.find(s.generation);
      BW_CHECK(it != traced_plans_.end(), "traced step {} of generation {} has no plan", s.step,
               s.generation);
      traced_.push_back(it->second);
      traced_.back().step = s.step;
    }
    metrics_.step(s);
    if (tensorboard_) tensorboard_->step(s);
    if (options_.on_step) options_.on_step(s);
  }

  void event(const Event& e) {
    summary.events.push_back(e);
    metrics_.event(e);
    if (tensorboard_) tensorboard_->event(e);
    if (options_.on_event) options_.on_event(e);
  }

  runtime::CheckpointInfo checkpoint_info(int steps_done, const RunPlan& plan,
                                          SkipCount skipped) const {
    const auto& config = setup_.config;
    runtime::CheckpointInfo info;
    info.step = steps_done;
    info.next_sample = int64_t{steps_done} * runtime::global_batch(config.pipeline);
    info.config_toml = runtime::to_toml(config);
    info.extra = {{"generation", plan.layout.generation},
                  {"layout", runtime::to_json(plan.layout)},
                  {"skipped_steps", skipped.total},
                  {"consecutive_skips", skipped.consecutive}};
    if (auto tied = runtime::tied_record(setup_.model); !tied.is_null()) info.extra["tied"] = tied;
    return info;
  }

  // The committed traced steps, in order; each rank's record is added to them.
  std::vector<runtime::TracedStep>& traced() { return traced_; }
  void write_trace(bool one_host) {
    if (setup_.trace_steps.empty()) return;
    summary.trace_path = (fs::path(setup_.config.train.out_dir) / "trace.json").string();
    io::write_file(summary.trace_path, runtime::merged_chrome_trace(traced_, one_host),
                   "the trace of the run");
  }

  // The run's totals once its last step committed.
  void finish() {
    const int steps = setup_.config.train.steps;
    summary.steps_done = steps - setup_.first_step;
    for (auto& share : summary.compute_share) share /= std::max(1, summary.steps_done);
    summary.tokens_per_s = timed_steps_ > 0 ? tokens_per_step_ * timed_steps_ / timed_s_ : 0.0;
    summary.flops_per_s = summary.tokens_per_s * summary.flops_per_token;
    summary.mfu = summary.flops_per_s / std::max(1.0, summary.peak_flops_per_device *
                                                          std::max(1, summary.layout.world_size()));
  }

 private:
  // The copies of a tied matrix (model.tie_embeddings) ran the step with the same bits.
  static void check_tied_copies(const StepSummary& s) {
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
  }

  // Each rank's peak RSS and compute share, and the planner's estimate for the layout that ran.
  void record_memory(const StepSummary& s) {
    if (s.generation == summary.layout.generation) {
      summary.predicted_bytes.assign(s.reports.size(), 0.0);
      for (const auto& r : s.reports) {
        if (r.rank < 0 || r.rank >= summary.layout.world_size()) continue;
        const auto [p, d] = summary.layout.locate(r.rank);
        summary.predicted_bytes[r.rank] =
            estimate_device_bytes(summary.layout, setup_.model, p, d,
                                  setup_.config.pipeline.recompute == "full", precision_);
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
  }

  void judge_slow_ranks(StepSummary& s) {
    if (s.generation != slow_generation_ || s.reports.size() < 2) return;
    std::vector<double> compute_ms(s.reports.size(), 0.0);
    for (const auto& r : s.reports) {
      if (r.rank >= 0 && r.rank < static_cast<int>(compute_ms.size())) {
        compute_ms[r.rank] = r.compute_ms;
      }
    }
    if (compute_ms.size() != slow_.relative().size() || !slow_.judged()) return;
    slow_.add(compute_ms);
    s.relative_compute = slow_.relative();
    s.slow_ranks = slow_.slow();
    for (int r : s.slow_ranks) {
      auto it = std::find_if(
          summary.slow_ranks.begin(), summary.slow_ranks.end(),
          [&](const SlowRank& x) { return x.generation == s.generation && x.rank == r; });
      if (it == summary.slow_ranks.end()) {
        SlowRank x;
        x.generation = s.generation;
        x.rank = r;
        x.worker = r < static_cast<int>(slow_workers_.size()) ? slow_workers_[r] : -1;
        x.first_step = s.step;
        summary.slow_ranks.push_back(x);
        it = summary.slow_ranks.end() - 1;
      }
      ++it->steps;
      it->max_relative = std::max(it->max_relative, s.relative_compute[r]);
    }
  }

  const RunSetup& setup_;
  const CoordinatorOptions& options_;
  Metrics metrics_;
  std::unique_ptr<TensorBoardSink> tensorboard_;
  model::Precision precision_;
  double tokens_per_step_;
  SteadyClock::time_point t_loop_ = SteadyClock::now();
  SlowRanks slow_;
  int slow_generation_ = -1;                         // the generation `slow_` judges
  std::vector<int> slow_workers_;                    // its rank -> worker
  std::map<int, runtime::TracedStep> traced_plans_;  // generation -> its pipelines and ranks
  std::vector<runtime::TracedStep> traced_;
  double timed_s_ = 0;
  int timed_steps_ = 0;
};

// The whole model in this process (--devices 1): the same step, verdict and report as a
// cluster's, with no store.
void run_single_process(RunSetup& setup, RunReport& report) {
  const auto& config = setup.config;
  const int steps = config.train.steps;
  auto& skips = setup.skips;
  const auto placement = runtime::worker_placement(config.train, config.cluster, 0);
  if (placement.cuda()) runtime::use_device(placement.device);
  runtime::ModelState state(config.train, setup.model, static_cast<uint64_t>(config.model.seed),
                            placement);
  state.keep_only(setup.run.layout.layers_of(0));
  state.steps_done = setup.first_step;
  state.steps_skipped = skips.total;
  // Fault injection in one process: `nan` only (node 0, device 0), once per spec.
  int cur_step = setup.first_step;
  std::vector<bool> fired(setup.faults.size(), false);
  runtime::PhaseHook hook = [&](const char* phase) {
    for (size_t i = 0; i < setup.faults.size(); ++i) {
      const auto& f = setup.faults[i];
      if (!fired[i] && f.step == cur_step && f.phase == phase) {
        fired[i] = true;
        poison_gradients(state.layer_map());
      }
    }
  };
  runtime::Worker worker(config, setup.run.layout, 0, state, nullptr, {}, hook);
  report.plan(setup.run);
  if (!setup.resume.empty()) {
    auto ckpt = runtime::load_checkpoint(setup.resume);
    worker.load_state(ckpt.weights, &ckpt.optimizer);
  }
  // The one shard goes through the same sink as a worker's, committed once it is durable.
  runtime::DirectorySinkOptions sink_options;
  sink_options.async = config.checkpoint.async;
  sink_options.host = runtime::host_name();
  sink_options.write_delay = runtime::write_delay_from_env();
  auto sink = runtime::make_directory_sink(sink_options);
  std::map<int64_t, SkipCount> saved_skips;  // by steps done, until committed
  const auto root = runtime::checkpoint_root(config);
  auto commit = [&](const std::vector<runtime::DurableShard>& durable) {
    for (const auto& d : durable) {
      auto info = report.checkpoint_info(static_cast<int>(d.steps_done), setup.run,
                                         saved_skips.at(d.steps_done));
      info.shards = {d.files};
      for (const auto& [name, digest] : d.digests) info.files[name] = digest;
      saved_skips.erase(d.steps_done);
      report.summary.checkpoint = runtime::commit_checkpoint(
          runtime::checkpoint_dir(root, static_cast<int>(d.steps_done)), std::move(info));
      runtime::retain_checkpoints(root, config.checkpoint.keep);
    }
  };
  const auto drain_deadline =
      std::chrono::milliseconds(static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0));
  double checkpoint_ms = 0.0;
  auto write_checkpoint = [&](int steps_done) {
    saved_skips[steps_done] = skips;
    checkpoint_ms =
        sink->save(runtime::checkpoint_dir(root, steps_done), steps_done, 0, worker.owned_layers(),
                   worker.owned_parameters(), worker.owned_optimizer_state());
  };
  auto t_prev = SteadyClock::now();
  std::optional<SteadyClock::time_point> last_checkpoint;  // checkpoint.every_s
  for (int step = setup.first_step; step < steps; ++step) {
    cur_step = step;
    auto prepared = worker.prepare(step);
    auto& r = prepared.report;
    r.checkpoint_ms = std::exchange(checkpoint_ms, 0.0);
    const SkipCount before = skips;
    const StepVerdict verdict = judge_step(config.train, r.loss, r.grad_norm, skips);
    if (verdict == StepVerdict::kStop) {  // the rule the supervisor applies (nonfinite.h)
      throw ConfigError(divergence_message(config.train, step, r.loss, r.grad_norm, before,
                                           runtime::checkpoint_root(config)));
    }
    const bool finite = verdict == StepVerdict::kApply;
    if (finite) {
      worker.apply(step, prepared);
    } else {
      worker.skip(step);
    }
    if (g_signals > 0 && step + 1 < steps) {
      write_checkpoint(step + 1);
      runtime::drain_all(*sink, drain_deadline, commit);  // durable before the exit status
      const auto sidecar = report.summary.checkpoint;
      throw Interrupted(fmt::format("stopped at step {} on request; wrote {}; {}", step + 1,
                                    sidecar, resume_hint(sidecar)));
    }
    // Every checkpoint_every steps, the last one, or checkpoint.every_s after the last (timed
    // from the first step's end), as the supervisor decides for worker processes.
    bool checkpoint = runtime::checkpoint_due(config.train, step);
    if (config.checkpoint.every_s > 0) {
      const auto now = SteadyClock::now();
      if (!last_checkpoint) last_checkpoint = now;
      checkpoint = checkpoint || std::chrono::duration<double>(now - *last_checkpoint).count() >=
                                     config.checkpoint.every_s;
      if (checkpoint) last_checkpoint = now;
    }
    if (checkpoint) write_checkpoint(step + 1);
    commit(sink->take_durable());
    StepSummary s;
    s.step = step;
    s.loss = r.loss;
    s.grad_norm = r.grad_norm;
    s.lr = r.lr;
    s.world = 1;
    s.samples = samples_digest(r.samples);
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
    s.reports = {r};
    report.step(std::move(s));
    if (worker.traced(step)) report.traced().back().ranks.push_back(worker.take_trace(step));
  }
  runtime::drain_all(*sink, drain_deadline,
                     commit);  // the final checkpoint is durable before the run ends
  report.write_trace(true);
}

// The supervisor's settings from the run's config (docs/elastic.md "The supervisor").
SupervisorOptions supervisor_options(const RunSetup& setup) {
  const auto& config = setup.config;
  SupervisorOptions so;
  so.steps = config.train.steps;
  so.first_step = setup.first_step;
  so.resume = setup.resume;
  so.skipped = setup.skips.total;
  so.consecutive_skips = setup.skips.consecutive;
  so.rebalance = config.elastic.rebalance;
  so.async_checkpoints = !(setup.remote && config.checkpoint.dir.empty());  // as run_cluster
  so.rebalance_gain = config.elastic.rebalance_gain;
  so.rebalance_window = config.elastic.slow_window;
  so.step_timeout_ms = config.elastic.step_timeout_s * 1000;
  so.checkpoint_every_ms = config.checkpoint.every_s * 1000;
  so.heartbeat_timeout_ms = config.elastic.heartbeat_timeout_s * 1000;
  // Remote agents come back by themselves (after rejoin_after_s of their own).
  so.rejoin_after_ms = setup.remote ? 0 : config.elastic.rejoin_after_s * 1000;
  agent_startup(so, setup.remote, setup.ctx.cluster.num_nodes, setup.ctx.devices_per_node);
  so.stop_grace_ms = std::max(2000.0, so.heartbeat_timeout_ms);
  return so;
}

// The supervisor's steps, events, plans and checkpoints, into the report and out_dir.
void connect_supervisor(Supervisor& sup, RunSetup& setup, RunReport& report,
                        const c10::intrusive_ptr<c10d::TCPStore>& store) {
  const auto& config = setup.config;
  const bool via_store = setup.checkpoint_io == "store";
  const bool on_hosts = setup.checkpoint_io == "hosts";
  const int num_layers = model::num_layers(setup.model);
  auto resume_published = std::make_shared<bool>(!setup.resume.empty());
  sup.on_step = [&report, store, resume_published, num_layers](const StepRecord& r) {
    if (*resume_published) {
      // A committed step: no later generation loads train.resume (supervisor.cc, publish).
      erase_resume(*store, num_layers);
      *resume_published = false;
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
    report.step(std::move(s));
  };
  sup.on_event = [&report](const Event& e) { report.event(e); };
  sup.on_plan = [&report, &config](const RunPlan& p) {
    report.plan(p);
    const int pipelines = static_cast<int>(p.layout.pipelines.size());
    if (config.checkpoint.replicas > pipelines - 1) {
      runtime::log(runtime::LogLevel::kWarn,
                   "generation {} has {} pipeline(s): its checkpoints hold {} cop{} of each layer, "
                   "not the {} of checkpoint.replicas = {}, until nodes re-join",
                   p.layout.generation, pipelines, pipelines, pipelines == 1 ? "y" : "ies",
                   config.checkpoint.replicas + 1, config.checkpoint.replicas);
    }
  };
  sup.on_checkpoint = [&report, &config, &sup, &setup, store, via_store, on_hosts](
                          int steps_done, int shards, const RunPlan& p, const std::string& prefix) {
    const auto root = runtime::checkpoint_root(config);
    const auto dir = runtime::checkpoint_dir(root, steps_done);
    // A leader that lost the run commits nothing (leadership.h): the fenced record first.
    if (setup.leadership) {
      setup.leadership->put(keys::checkpoint_commit(steps_done),
                            nlohmann::json{{"steps_done", steps_done}, {"dir", dir}}.dump());
    }
    if (!via_store) {
      // Every shard is durable where its worker wrote it: commit the manifest, nothing else.
      auto info = report.checkpoint_info(steps_done, p, sup.skips_at(steps_done));
      for (int r = 0; r < shards; ++r) {
        const auto key = keys::checkpoint_ack(prefix, r);
        const auto bytes = store->get(key);
        auto d = runtime::durable_shard_from_json(
            nlohmann::json::parse(std::string(bytes.begin(), bytes.end()), nullptr, false), key);
        BW_CHECK(d.steps_done == steps_done && d.files.shard == r,
                 "{} acknowledges shard {} of step {}, not shard {} of step {}", key, d.files.shard,
                 d.steps_done, r, steps_done);
        info.shards.push_back(d.files);
        for (const auto& [name, digest] : d.digests) info.files[name] = digest;
        store->deleteKey(key);
      }
      // Shards on each host's own disk: the manifest here is the commit; each host's agent then
      // publishes its own copy of the directory (agent.cc, HostCheckpoints).
      const auto manifest = on_hosts ? runtime::sidecar_json(info).dump() : std::string();
      report.summary.checkpoint = runtime::commit_checkpoint(dir, std::move(info), !on_hosts);
      if (on_hosts) {
        const int64_t n = store->add(keys::num_committed(), 0) + 1;
        store->set(keys::committed_checkpoint(n),
                   std::vector<uint8_t>(manifest.begin(), manifest.end()));
        store->add(keys::num_committed(), 1);
        if (n > keys::kCommittedKept) {
          store->deleteKey(keys::committed_checkpoint(n - keys::kCommittedKept));
        }
      }
      runtime::retain_checkpoints(root, config.checkpoint.keep);
      return report.summary.checkpoint;
    }
    try {
      if (via_store) receive_shards(*store, prefix, shards, dir);
    } catch (...) {
      std::error_code ec;
      fs::remove_all(runtime::staging_dir(dir), ec);
      erase_shards(*store, prefix, shards);
      throw;
    }
    report.summary.checkpoint = runtime::merge_shards(
        dir, shards, report.checkpoint_info(steps_done, p, sup.skips_at(steps_done)));
    return report.summary.checkpoint;
  };
  sup.on_checkpoint_dropped = [&config, store, via_store](const std::string& prefix, int shards) {
    erase_shards(*store, prefix, shards);
    // Local writers staged their files themselves: a checkpoint that will not complete leaves
    // no partial staging behind for a later generation's writers to mix with (the stop save,
    // "g{g}/final", ends the run: every staging directory goes).
    if (via_store) return;
    for (int r = 0; r < shards; ++r) store->deleteKey(keys::checkpoint_ack(prefix, r));
    std::error_code ec;
    const auto root = runtime::checkpoint_root(config);
    const auto at = prefix.find("/ckpt/");
    if (at != std::string::npos) {
      const int steps = std::stoi(prefix.substr(at + 6));
      fs::remove_all(runtime::staging_dir(runtime::checkpoint_dir(root, steps)), ec);
      return;
    }
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      const auto name = entry.path().filename().string();
      if (name.starts_with("checkpoint-") && name.ends_with(".tmp"))
        fs::remove_all(entry.path(), ec);
    }
  };
}

// A run that did not finish: the exception its outcome stands for (exit 130, 2, 1 or 3).
[[noreturn]] void throw_outcome(const Outcome& out) {
  if (out.kind == Outcome::kInterrupted) {
    if (out.checkpoint.empty()) throw Interrupted(out.message + "; no checkpoint was written");
    throw Interrupted(
        fmt::format("{}; wrote {}; {}", out.message, out.checkpoint, resume_hint(out.checkpoint)));
  }
  if (out.kind == Outcome::kFailed) {
    if (out.config_error) throw ConfigError(out.message);
    throw InternalError(out.message);
  }
  std::string how;
  if (!out.checkpoint.empty()) {
    how = fmt::format(
        "; wrote the last committed state to {}; resume with `breakwater train <this config> "
        "--train.resume={}` (on the nodes that are left, e.g. --cluster.nodes=N)",
        out.checkpoint, out.checkpoint);
  }
  throw CommError(out.message + how);
}

// Every rank sent the record of a traced step before its next report or its done: what is not
// there at the end belonged to a rank lost after the step committed.
void collect_traces(c10d::Store& store, RunReport& report) {
  for (auto& t : report.traced()) {
    for (int r = 0; r < static_cast<int>(t.rank_at.size()); ++r) {
      const auto key = keys::trace(t.generation, t.step, r);
      if (!store.check({key})) {
        t.missing.push_back(r);
        continue;
      }
      t.ranks.push_back(decode_rank_trace(as_string(store.get(key)), key));
    }
  }
}

// elastic.inject's kill_coordinator spec `index` acts: this process writes the time of its death
// (a fenced create, so once per run over every coordinator), then SIGKILLs itself; nothing when
// the key was there already.
void kill_once(Leadership& lead, int index, const std::string& when) {
  const auto at = fmt::format("{:.3f}", wall_ms());
  if (lead.decide(keys::coordinator_fault(index), at) != at) return;
  runtime::log(runtime::LogLevel::kWarn, "elastic.inject: killing this coordinator {}", when);
  ::raise(SIGKILL);
}

// --control etcd://...: connects (ConfigError naming the endpoints when none answers, or an etcd
// older than 3.4) and takes the lead of the run id (leadership.h).
std::unique_ptr<Leadership> lead_run(RunSetup& setup, const CoordinatorOptions& options) {
  const ControlUrl url = parse_control_url(options.control);
  if (url.kind != ControlUrl::Kind::kEtcd) {
    for (const auto& f : setup.faults) {
      if (f.action != "kill_coordinator") continue;
      throw ConfigError(
          "elastic.inject kill_coordinator kills the coordinator, and with the embedded control "
          "store the run dies with it; set elastic.control = \"etcd\" and elastic.standbys = 1 "
          "(or run `breakwater coordinator --control etcd://...` with a standby)");
    }
    return nullptr;
  }
  check_run_id(options.run_id);
  const auto by = deadline_in(std::chrono::milliseconds(10000));  // connect and take the lead
  std::shared_ptr<ControlStore> store = EtcdControlStore::connect(url, options.run_id, by);
  LeadershipOptions lo;
  lo.key = keys::leader();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // The run's identity: its config, less where this coordinator writes its own files (a standby
  // on another host has its own train.out_dir).
  runtime::RunConfig identity = setup.config;
  identity.train.out_dir.clear();
  lo.record = {.address = options.listen,
               .host = host,
               .pid = ::getpid(),
               .config = sha256_hex(runtime::to_toml(identity))};
  lo.ttl_s = options.lease_ttl_s;
  lo.leaderless_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.leaderless_timeout_s * 1000.0));
  if (options.standby) {
    lo.standby = true;
    lo.cancelled = [] { return g_signals > 0; };
    // The evidence path: the store its predecessor published after it won refuses connections.
    lo.holder_dead = [store, &setup](const LeaderRecord&, int64_t epoch) {
      try {
        const auto call = deadline_in(std::chrono::milliseconds(500));
        const auto inst = store->get(keys::instance(), call);
        if (!inst) return false;
        const auto at =
            store->get(fmt::format("i{}/{}", decode_instance(inst->value, keys::instance()).epoch,
                                   keys::leader_store()),
                       call);
        if (!at || at->mod_revision < epoch) return false;  // not this holder's store
        const HostPort hp = parse_host_port(at->value, "the leader's store address");
        const auto probe = probe_tcp(hp.host, hp.port, std::chrono::milliseconds(200));
        if (probe == Probe::kOpen) setup.predecessor_alive_ms = SystemClock().now_ms();
        return probe == Probe::kRefused;
      } catch (const std::exception&) {
        return false;  // no evidence
      }
    };
    runtime::log(runtime::LogLevel::kInfo, "standing by for run '{}' in {} (lease TTL {} s)",
                 options.run_id, store->describe(), lo.ttl_s);
  }
  auto lead = std::make_unique<Leadership>(store, lo, by);
  runtime::log(runtime::LogLevel::kInfo, "leading run '{}' in {} at epoch {} (lease TTL {} s{})",
               options.run_id, store->describe(), lead->epoch(), lo.ttl_s,
               lead->took_on_evidence() ? ", its predecessor's lease revoked on evidence" : "");
  return lead;
}

// The run state a coordinator that takes the run over reads (keys::run_state).
RunState run_state(const Supervisor& sup, const RemoteNodes* hosts, const RunSetup& setup,
                   int first_step, const std::string& start, const SkipCount& skips) {
  RunState st;
  st.generation = sup.current().layout.generation;
  st.first_step = first_step;
  st.skipped = skips.total;
  st.consecutive_skips = skips.consecutive;
  st.start = start;
  st.plan = plan::to_json(sup.current().plan).dump();
  st.checkpoint_io = setup.checkpoint_io;
  for (const auto& v : sup.node_views()) {
    st.nodes.push_back({.node = v.node,
                        .name = hosts ? hosts->name(v.node) : std::string(),
                        .incarnation = v.incarnation,
                        .live = v.live,
                        .in_plan = v.in_plan});
  }
  return st;
}

// What a standby that won found: the generation its predecessor published last, the decisions
// of that generation that stand, and which agents came back.
Adoption adoption(const RunState& state, int64_t state_revision, const PlanContext& ctx,
                  Leadership& lead, const std::set<int>& back) {
  Adoption a;
  a.run = layout_plan(ctx, plan::plan_from_json(json::parse(state.plan, "the run state's plan")));
  a.first_step = state.first_step;
  a.start = state.start;
  a.skips = {state.skipped, state.consecutive_skips};
  // The generation's decisions, all written after its run state.
  const int g = a.run.layout.generation;
  const std::string prefix = keys::decisions_of(g);
  for (const auto& [key, value] : lead.written_since(prefix, state_revision)) {
    a.decisions[std::stoi(key.substr(prefix.size()))] = value;
  }
  for (const auto& n : state.nodes) {
    a.nodes.push_back(
        {.node = n.node, .incarnation = n.incarnation, .live = n.live, .in_plan = n.in_plan});
  }
  a.back = back;
  return a;
}

// Worker processes: the store, the nodes (local agents, or remote ones that register), and the
// supervisor that drives generations until the run ends.
void run_cluster(RunSetup& setup, RunReport& report, const CoordinatorOptions& options) {
  const auto& config = setup.config;
  const auto& ctx = setup.ctx;
  const bool remote = setup.remote;
  // Local runs listen on loopback only; multi-host runs where told (store_host.h).
  HostPort listen{"127.0.0.1", config.elastic.store_port};
  if (remote) listen = parse_host_port(options.listen, "--listen");
  setup.leadership = lead_run(setup, options);
  Leadership* lead = setup.leadership.get();
  SystemClock clock;
  // A standby that won takes over the run its predecessor led (Supervisor::adopt).
  std::optional<RunState> adopted;
  int64_t state_revision = 0;
  double led_ms = 0;
  if (lead && options.standby) {
    led_ms = clock.now_ms();
    if (lead->nothing_to_take_over()) {
      runtime::log(runtime::LogLevel::kInfo,
                   "run '{}' is over (or no coordinator ever led it): nothing to take over",
                   options.run_id);
      lead->resign();
      setup.idle = true;
      return;
    }
    const auto text = lead->get_kv(keys::run_state());
    if (!text) {
      throw CommError(fmt::format(
          "run '{}': its coordinator went before it started the run (no run state in the "
          "control store); start the run again",
          options.run_id));
    }
    adopted = decode_run_state(text->value, keys::run_state());
    state_revision = text->mod_revision;
    if (setup.predecessor_alive_ms == 0) setup.predecessor_alive_ms = led_ms;
    runtime::log(runtime::LogLevel::kInfo,
                 "taking over run '{}' at generation {} (epoch {}, instance {})", options.run_id,
                 adopted->generation, lead->epoch(), lead->instance());
  }
  const auto store = host_store(
      listen.host, listen.port,
      std::chrono::milliseconds(static_cast<int64_t>(config.elastic.step_timeout_s * 1000.0)));
  if (lead) lead->put(keys::leader_store(), fmt::format("{}:{}", listen.host, store->getPort()));
  auto put = [&](const std::string& key, const std::string& value) {
    store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  };
  put(keys::config(), runtime::to_toml(config));
  put(keys::workers_per_host(),
      std::to_string(remote ? ctx.devices_per_node : ctx.cluster.num_nodes * ctx.devices_per_node));
  const std::string exe = options.executable.empty() ? self_executable() : options.executable;
  std::unique_ptr<LocalNodes> local;
  std::unique_ptr<RemoteNodes> hosts;
  std::set<int> back;  // a takeover: the nodes whose agents came back
  // Where checkpoints go (keys::checkpoint_io). Local workers share this filesystem and write and
  // read checkpoints themselves, in parallel ("files"). Across hosts: without checkpoint.dir
  // nothing is assumed shared and checkpoints travel through the store ("store", shard_store.h);
  // with it, a probe file written here tells which agents see this filesystem there: all of them
  // ("files", a shared filesystem), or not ("hosts": each host's own disk, with its agent
  // publishing what the coordinator commits).
  std::optional<ProbeFile> probe;
  if (remote && !config.checkpoint.dir.empty()) {
    probe.emplace(config.checkpoint.dir);
    put(keys::checkpoint_probe(), probe->name());
  }
  if (remote) {
    hosts = std::make_unique<RemoteNodes>(store, setup.token, ctx.cluster.num_nodes,
                                          ctx.devices_per_node);
    hosts->require_data(setup.data_path, setup.run_data->dataset.content_digest());
    if (!setup.model.init_from.empty()) {
      hosts->require_weights(setup.model.init_from,
                             runtime::hf_folder(setup.model)->content_digest());
    }
    if (!config.checkpoint.dir.empty()) hosts->require_checkpoint_dir(config.checkpoint.dir);
    if (options.on_listen) options.on_listen(listen.host, store->getPort());
    if (adopted) {
      hosts->adopt(adopted->nodes);
      std::set<int> expected;
      for (const auto& n : adopted->nodes) {
        if (n.live) expected.insert(n.node);
      }
      // A live agent finds the new store within a fraction of a second; one silent for a
      // heartbeat timeout is lost, as a node whose heartbeats stop.
      back = hosts->wait_for_returns(expected, config.elastic.heartbeat_timeout_s,
                                     [] { return g_signals > 0; });
      setup.checkpoint_io = adopted->checkpoint_io;
      if (setup.checkpoint_io == "files") hosts->require_shared_checkpoint_dir();
    } else {
      hosts->wait_for_agents(options.wait_s, options.expected_names, [] { return g_signals > 0; });
    }
    if (adopted) {
      // As its predecessor decided (below).
    } else if (config.checkpoint.dir.empty()) {
      setup.checkpoint_io = "store";
    } else if (hosts->all_share_checkpoint_dir()) {
      hosts->require_shared_checkpoint_dir();
    } else {
      setup.checkpoint_io = "hosts";
    }
    if (setup.config.checkpoint.replicas == runtime::CheckpointConfig::kAutoReplicas) {
      // Each host's own disk: a copy of every layer on another node, where there is one.
      const bool two = setup.run.layout.pipelines.size() >= 2;
      set_replicas(setup, setup.checkpoint_io == "hosts" && two ? 1 : 0);
      put(keys::config(), runtime::to_toml(setup.config));  // before any worker reads it
    }
    if (setup.checkpoint_io == "hosts") {
      runtime::log(runtime::LogLevel::kInfo,
                   "checkpoint.dir '{}' is each host's own disk (not every agent sees this "
                   "host's files there): shards stay where they are written, {} cop{} of each "
                   "layer",
                   config.checkpoint.dir, config.checkpoint.replicas + 1,
                   config.checkpoint.replicas == 0 ? "y" : "ies");
    }
  } else {
    local = std::make_unique<LocalNodes>(exe, "127.0.0.1", store->getPort(), ctx.devices_per_node);
  }
  put(keys::checkpoint_io(), setup.checkpoint_io);
  // The resume state: every worker reads train.resume itself ("files"); the coordinator
  // publishes it per layer through the store when only it can read it ("store", or "hosts" with
  // a checkpoint whose shards are all here); or each host loads the shards of the manifest it
  // holds and fetches the rest from a peer over the transport ("hosts").
  if (!setup.resume.empty() && !adopted) {
    if (setup.resume_elsewhere && setup.checkpoint_io != "hosts") {
      throw ConfigError(fmt::format(
          "the shards of train.resume {} are not all on this host, and every host of this run "
          "shares checkpoint.dir '{}'; resume from a checkpoint in the shared checkpoint.dir, or "
          "gather its shards into one directory",
          setup.resume, config.checkpoint.dir));
    }
    if (setup.resume_elsewhere) {
      put(keys::resume_manifest(),
          runtime::sidecar_json(runtime::read_checkpoint_info(setup.resume)).dump());
      runtime::log(runtime::LogLevel::kInfo,
                   "each host loads the shards of {} it holds and fetches the rest from a peer",
                   setup.resume);
    } else if (setup.checkpoint_io != "files") {
      const auto bytes = put_resume(*store, runtime::load_checkpoint(setup.resume),
                                    model::num_layers(setup.model));
      runtime::log(runtime::LogLevel::kInfo, "published {} of resume state from {}",
                   io::human_bytes(bytes), setup.resume);
    }
  }
  Nodes& nodes = remote ? static_cast<Nodes&>(*hosts) : static_cast<Nodes&>(*local);
  Supervisor sup(store, clock, nodes, ctx, setup.run, supervisor_options(setup));
  connect_supervisor(sup, setup, report, store);
  std::vector<int> killed_by_worker;  // kill_coordinator specs a worker marks (see below)
  if (lead) {
    // Test hook (tests/elastic/leadership_test.cc): BW_KILL_AFTER_DECISION=<n> kills this
    // process right after its n-th decision is durable in etcd, before any worker can read it.
    int kill_after = -1;
    if (const char* v = std::getenv("BW_KILL_AFTER_DECISION")) kill_after = std::atoi(v);
    // elastic.inject's kill_coordinator specs by when they act: step=S right after the commit of
    // step S is durable; phase=end once every worker reported the end (its final shards durable,
    // its checksums sent), before the end is published; phase=state_transfer when a worker marks
    // it in the store mid-transfer (polled in the loop below).
    std::map<int, int> kill_at;  // step -> index of the spec
    for (size_t i = 0; i < setup.faults.size(); ++i) {
      const auto& f = setup.faults[i];
      if (f.action != "kill_coordinator") continue;
      const int index = static_cast<int>(i);
      if (f.phase == "end") {
        sup.on_end = [lead, index] { kill_once(*lead, index, "at the end of the run"); };
      } else if (f.phase == "state_transfer") {
        killed_by_worker.push_back(index);
      } else {
        kill_at.emplace(f.step, index);
      }
    }
    sup.on_decide = [lead, kill_after, kill_at, decided = 0](const std::string& key,
                                                             const std::string& text) mutable {
      auto stands = lead->decide(key, text);
      if (++decided == kill_after) ::raise(SIGKILL);
      const auto spec = kill_at.find(std::stoi(key.substr(key.rfind('/') + 1)));
      const auto d = decode_decision(stands, key);
      if (spec != kill_at.end() && (d == Decision::kCommit || d == Decision::kLast)) {
        kill_once(*lead, spec->second, fmt::format("after the commit of step {}", spec->first));
      }
      return stands;
    };
    // Each generation's state, durable before any worker sees it: what a takeover adopts.
    // Test hook: BW_KILL_AT_STATE=<n>[:before] kills this process right after the n-th run state
    // is durable (before any worker can read that generation), or, with ":before", right before
    // it is written (every survivor has reported to this process's store what it holds).
    int kill_at_state = -1;
    bool kill_before = false;
    if (const char* v = std::getenv("BW_KILL_AT_STATE")) {
      kill_at_state = std::atoi(v);
      kill_before = std::string(v).find(":before") != std::string::npos;
    }
    sup.on_publish = [lead, &sup, &hosts, &setup, kill_at_state, kill_before, published = 0](
                         int first_step, const std::string& start, const SkipCount& skips) mutable {
      const bool kill = ++published == kill_at_state;
      if (kill && kill_before) ::raise(SIGKILL);
      lead->put(keys::run_state(),
                encode_run_state(run_state(sup, hosts.get(), setup, first_step, start, skips)));
      if (kill) ::raise(SIGKILL);
    };
  }
  runtime::log(runtime::LogLevel::kInfo, "store on {}:{}, {} nodes", listen.host, store->getPort(),
               ctx.cluster.num_nodes);
  auto kill_if_marked = [&] {
    for (int i : killed_by_worker) {
      if (store->check({keys::inject_fired(i)})) kill_once(*lead, i, "during a state transfer");
    }
  };
  bool asked = false;
  try {
    if (adopted) {
      Adoption a = adoption(*adopted, state_revision, ctx, *lead, back);
      a.fail_ms = setup.predecessor_alive_ms;
      // A predecessor killed by elastic.inject wrote when it died: measured from there.
      double killed_ms = 0;
      for (size_t i = 0; i < setup.faults.size(); ++i) {
        if (setup.faults[i].action != "kill_coordinator") continue;
        const auto at = lead->get(keys::coordinator_fault(static_cast<int>(i)));
        if (at && std::stod(*at) <= led_ms) killed_ms = std::max(killed_ms, std::stod(*at));
      }
      if (killed_ms > 0) a.fail_ms = killed_ms;
      a.led_ms = led_ms;
      a.reconciled_ms = clock.now_ms();
      sup.adopt(a);
    } else {
      sup.start();
    }
    for (;;) {
      // A process paused past its lease learns that before it acts (leadership.h).
      if (lead) lead->check();
      kill_if_marked();
      if (!sup.tick()) break;
      if (g_signals > 0 && !asked) {
        asked = true;
        sup.request_stop();
        fmt::print(stderr,
                   "\nstopping at the next step boundary with a checkpoint (again to stop "
                   "at once)\n");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  } catch (const LostLeadership&) {
    // Another coordinator may lead the run now: its agents are not told anything.
    if (hosts) hosts->abandon();
    throw;
  }
  const auto& out = sup.outcome();
  if (out.kind == Outcome::kInterrupted || out.kind == Outcome::kFailed ||
      out.kind == Outcome::kStopped) {
    // The run is over: local agents are killed, remote ones told (they exit by themselves).
    if (lead) lead->end_instance();
    if (local) local->kill_all();
    if (hosts) hosts->end_run(out.message, 5000);
    throw_outcome(out);
  }
  collect_traces(*store, report);
  report.write_trace(!remote);
  if (local) local->wait_all(10000);
  if (lead) lead->end_instance();
  if (hosts) hosts->end_run("finished", 10000);
  if (lead) lead->resign();
}

// The token the end-of-run sample starts from, the one each document of the data starts with:
// the tokenizer's document token; '\n' for bytes (a model's own ids name tokens of a tokenizer
// the data does not use); else the model's own (config.json's bos_token_id, else its
// eos_token_id, GPT-2's <|endoftext|> between documents); else the token llm.c's .bin files
// start documents with (GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>). An id outside the
// vocabulary is passed over.
int64_t document_start(const runtime::RunData& data, const model::GptConfig& model) {
  const int64_t vocab = std::min<int64_t>(model.vocab_size, data.dataset.vocab_size());
  auto fits = [&](int64_t id) { return id >= 0 && id < vocab; };
  if (data.tokenizer && data.tokenizer->document_token() &&
      fits(*data.tokenizer->document_token())) {
    return *data.tokenizer->document_token();
  }
  if (data.dataset.format() == data::TokenDataset::Format::kText) return '\n';
  for (int64_t id : {model.bos_token_id, model.eos_token_id}) {
    if (fits(id)) return id;
  }
  const int64_t by_format = data.dataset.vocab_size() == data::kGpt2Vocab ? runtime::kGpt2EndOfText
                            : data.dataset.vocab_size() == data::kLlama3Vocab
                                ? runtime::kLlama3BeginOfText
                                : 0;
  return fits(by_format) ? by_format : 0;
}

// The end-of-run sample from the final checkpoint (train.sample_tokens): text where a tokenizer
// is known, and out_dir/sample.json for programs.
void write_sample(const RunSetup& setup, RunSummary& summary) {
  const auto& config = setup.config;
  if (config.train.sample_tokens <= 0 || summary.checkpoint.empty()) return;
  if (setup.checkpoint_io == "hosts") {
    runtime::log(runtime::LogLevel::kInfo,
                 "no end-of-run sample: the final checkpoint's shards are on the hosts' own "
                 "disks (gather them with the manifest {} and run `breakwater generate`)",
                 summary.checkpoint);
    return;
  }
  const auto& model = setup.model;
  const auto& run_data = *setup.run_data;
  auto ckpt = runtime::load_checkpoint(summary.checkpoint);
  std::vector<std::shared_ptr<model::Layer>> layers;
  torch::NoGradGuard no_grad;
  for (int l = 0; l < model::num_layers(model); ++l) {
    std::shared_ptr<model::Layer> layer;
    {
      model::SkipInit skip;  // every parameter is copied from the checkpoint
      layer = model::build_layer(model, l, static_cast<uint64_t>(config.model.seed));
    }
    for (const auto& [name, p] : layer->parameter_list()) {
      p.copy_(ckpt.weights.at(runtime::checkpoint_tensor_name(l, name)));
    }
    layers.push_back(layer);
  }
  const int64_t prompt = document_start(run_data, model);
  model::SampleOptions so;
  so.num_tokens = config.train.sample_tokens;
  so.seed = static_cast<uint64_t>(config.model.seed);
  const auto ids = model::sample_tokens(layers, model, {prompt}, so);
  if (run_data.tokenizer) {
    const std::vector<uint32_t> u(ids.begin(), ids.end());
    summary.sample = run_data.tokenizer->decode(u);
  } else {
    summary.sample = render_sample(ids, run_data.dataset.vocab_size());
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

}  // namespace

RunSummary run_training(const runtime::RunConfig& given, const CoordinatorOptions& options) {
  // The store's server writes to clients that may have died: EPIPE, not a SIGPIPE death.
  signal(SIGPIPE, SIG_IGN);
  const auto t_start = SteadyClock::now();
  RunSetup setup;
  check_setup(setup, given, options);
  RunReport report(setup, options);
  // Everything knowable before the run starts (data, plan, faults, resume, out_dir and its lock,
  // the first writes there) has been checked: only now is the plan shown (docs/cli.md).
  if (options.on_plan) options.on_plan(report.summary.layout, report.summary.notes);
  report.start_loop();
  torch::set_num_threads(std::max(1, setup.config.train.threads_per_worker));
  {
    StopSignals stop_signals;
    if (setup.world == 1) {
      run_single_process(setup, report);
    } else {
      run_cluster(setup, report, options);
    }
  }
  report.finish();
  if (setup.idle) {  // a standby with nothing to take over
    report.summary.idle = true;
    return report.summary;
  }
  write_sample(setup, report.summary);
  report.summary.total_s = std::chrono::duration<double>(SteadyClock::now() - t_start).count();
  return report.summary;
}

}  // namespace bw::elastic
