// Run config: validation and printing back to TOML (see config.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "runtime/config.h"
#include "runtime/config_schema.h"
#include "runtime/trace_events.h"

namespace bw::runtime {
namespace {

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Shortest text that reads back as the same double, always with a '.' or exponent so that TOML
// reads a float.
std::string toml_float(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string toml_value(const detail::Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return fmt::format("{}", x);
        } else if constexpr (std::is_same_v<T, double>) {
          return toml_float(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return toml_string(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else {
          return fmt::format("[{}]", fmt::join(x, ", "));
        }
      },
      v);
}

void require(bool ok, const std::string& key, const std::string& what, const std::string& value) {
  if (!ok) throw ConfigError(fmt::format("config key {} must be {}, got {}", key, what, value));
}

void at_least(int64_t v, int64_t lo, const std::string& key) {
  require(v >= lo, key, fmt::format(">= {}", lo), std::to_string(v));
}

void finite_at_least(double v, double lo, const std::string& key) {
  require(std::isfinite(v) && v >= lo, key, fmt::format("a finite number >= {}", lo),
          fmt::format("{}", v));
}

void in_range(int64_t v, int64_t lo, int64_t hi, const std::string& key) {
  require(v >= lo && v <= hi, key, fmt::format("in [{}, {}]", lo, hi), std::to_string(v));
}

}  // namespace

void validate(const RunConfig& c) {
  require(!c.model.name.empty(), "model.name", "a model name (tiny, small, gpt2-124m)", "\"\"");
  in_range(c.model.seq_len, 0, 1 << 20, "model.seq_len");
  in_range(c.cluster.nodes, 1, kMaxWorldSize, "cluster.nodes");
  in_range(c.cluster.devices_per_node, 1, kMaxDevicesPerNode, "cluster.devices_per_node");
  const int64_t world = int64_t{c.cluster.nodes} * c.cluster.devices_per_node;
  if (world > kMaxWorldSize) {
    throw ConfigError(fmt::format(
        "cluster.nodes {} x cluster.devices_per_node {} = {} worker processes, more than the "
        "limit of {}; lower them",
        c.cluster.nodes, c.cluster.devices_per_node, world, kMaxWorldSize));
  }
  const std::set<std::string> devices = {"cpu", "cuda"};
  require(devices.count(c.cluster.device) > 0, "cluster.device", "\"cpu\" or \"cuda\"",
          "\"" + c.cluster.device + "\"");
  const std::set<std::string> backends = {"gloo", "nccl"};
  require(backends.count(c.cluster.backend) > 0, "cluster.backend", "\"gloo\" or \"nccl\"",
          "\"" + c.cluster.backend + "\"");
  if (c.cluster.backend == "nccl" && c.cluster.device != "cuda") {
    throw ConfigError(
        fmt::format("config key cluster.backend = \"nccl\" needs cluster.device = "
                    "\"cuda\" (got \"{}\"); use backend \"gloo\" on the CPU",
                    c.cluster.device));
  }
  for (size_t i = 0; i < c.cluster.gpus.size(); ++i) {
    in_range(c.cluster.gpus[i], 0, kMaxDevicesPerNode - 1, fmt::format("cluster.gpus[{}]", i));
  }
  finite_at_least(c.cluster.memory_gb, 0.0, "cluster.memory_gb");

  require(!c.pipeline.schedule.empty(), "pipeline.schedule", "a schedule name", "\"\"");
  const auto& p = c.pipeline;
  in_range(p.waves, 1, kMaxWaves, "pipeline.waves");
  in_range(p.chunks_per_device, 1, kMaxChunksPerDevice, "pipeline.chunks_per_device");
  in_range(p.microbatches, 1, kMaxMicrobatches, "pipeline.microbatches");
  in_range(p.microbatch_size, 1, kMaxMicrobatchSize, "pipeline.microbatch_size");
  if (global_batch(p) > kMaxGlobalBatch) {
    throw ConfigError(fmt::format(
        "pipeline.microbatches {} x pipeline.microbatch_size {} = a global batch of {} samples, "
        "more than the limit of {}; lower them",
        p.microbatches, p.microbatch_size, global_batch(p), kMaxGlobalBatch));
  }
  in_range(static_cast<int64_t>(p.pipelines.size()), 0, kMaxWorldSize,
           "the length of pipeline.pipelines");
  int64_t pipeline_devices = 0;
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    in_range(p.pipelines[i], 1, kMaxWorldSize, fmt::format("pipeline.pipelines[{}]", i));
    pipeline_devices += p.pipelines[i];
  }
  if (pipeline_devices > kMaxWorldSize) {
    throw ConfigError(fmt::format("pipeline.pipelines {} use {} devices, more than the limit of {}",
                                  fmt::join(p.pipelines, ","), pipeline_devices, kMaxWorldSize));
  }
  in_range(p.devices_per_stage, 1, kMaxMicrobatchSize, "pipeline.devices_per_stage");
  require(p.recompute == "none" || p.recompute == "full", "pipeline.recompute",
          "\"none\" or \"full\"", "\"" + p.recompute + "\"");
  if (p.devices_per_stage > p.microbatch_size) {
    throw ConfigError(fmt::format(
        "pipeline.devices_per_stage {} splits each microbatch's samples over the stage's devices, "
        "but pipeline.microbatch_size is {}; raise microbatch_size to >= {} or lower "
        "devices_per_stage",
        p.devices_per_stage, p.microbatch_size, p.devices_per_stage));
  }
  if (c.model.tie_embeddings) {
    // The tied copies' gradient sum works on whole layers; a sharded stage holds slices.
    const bool sharded =
        p.devices_per_stage > 1 ||
        std::any_of(p.stage_devices.begin(), p.stage_devices.end(), [](int w) { return w > 1; });
    if (sharded) {
      throw ConfigError(
          "model.tie_embeddings does not combine with sharded stages (pipeline.devices_per_stage "
          "or pipeline.stage_devices above 1); use stages of one device, or "
          "--model.tie_embeddings=false");
    }
  }
  if (!p.stage_devices.empty()) {
    in_range(static_cast<int64_t>(p.stage_devices.size()), 1, kMaxWorldSize,
             "the length of pipeline.stage_devices");
    if (p.pipelines.empty()) {
      throw ConfigError(
          "pipeline.stage_devices needs pipeline.pipelines (the device count of each pipeline), "
          "e.g. --pipeline.pipelines=[3,3] --pipeline.stage_devices=[2,1,1,1,1]");
    }
    size_t k = 0;
    for (size_t i = 0; i < p.pipelines.size(); ++i) {
      int used = 0;
      while (used < p.pipelines[i] && k < p.stage_devices.size()) {
        const int w = p.stage_devices[k];
        in_range(w, 1, p.microbatch_size,
                 fmt::format("pipeline.stage_devices[{}] (at most "
                             "pipeline.microbatch_size)",
                             k));
        used += w;
        ++k;
      }
      if (used != p.pipelines[i]) {
        throw ConfigError(fmt::format(
            "pipeline.stage_devices [{}] does not cut pipeline {} of {} devices into whole "
            "stages; list each pipeline's stage widths in order, summing to pipeline.pipelines",
            fmt::join(p.stage_devices, ", "), i, p.pipelines[i]));
      }
    }
    if (k != p.stage_devices.size()) {
      throw ConfigError(fmt::format(
          "pipeline.stage_devices [{}] has more stages than pipeline.pipelines [{}] has devices",
          fmt::join(p.stage_devices, ", "), fmt::join(p.pipelines, ", ")));
    }
  }
  in_range(p.fault_tolerance, 0, kMaxWorldSize, "pipeline.fault_tolerance");
  if (p.fault_tolerance >= c.cluster.nodes) {
    throw ConfigError(fmt::format(
        "pipeline.fault_tolerance {} means surviving {} node failures, which needs at least {} "
        "nodes, but cluster.nodes is {}; lower pipeline.fault_tolerance or raise cluster.nodes",
        p.fault_tolerance, p.fault_tolerance, p.fault_tolerance + 1, c.cluster.nodes));
  }
  if (!p.pipelines.empty() && static_cast<int64_t>(p.pipelines.size()) < p.fault_tolerance + 1) {
    throw ConfigError(fmt::format(
        "pipeline.pipelines [{}] has {} pipeline(s) but pipeline.fault_tolerance {} needs at "
        "least {} (one replica of every layer must survive {} failure(s)); add pipelines or set "
        "--pipeline.fault_tolerance={}",
        fmt::join(p.pipelines, ", "), p.pipelines.size(), p.fault_tolerance, p.fault_tolerance + 1,
        p.fault_tolerance, p.pipelines.size() - 1));
  }

  require(c.elastic.store_port >= 0 && c.elastic.store_port <= 65535, "elastic.store_port",
          "in [0, 65535]", std::to_string(c.elastic.store_port));
  require(std::isfinite(c.elastic.step_timeout_s) && c.elastic.step_timeout_s >= kMinStepTimeoutS &&
              c.elastic.step_timeout_s <= kMaxStepTimeoutS,
          "elastic.step_timeout_s",
          fmt::format("in [{}, {}] seconds", kMinStepTimeoutS, kMaxStepTimeoutS),
          fmt::format("{}", c.elastic.step_timeout_s));
  require(std::isfinite(c.elastic.heartbeat_timeout_s) &&
              c.elastic.heartbeat_timeout_s >= kMinHeartbeatTimeoutS &&
              c.elastic.heartbeat_timeout_s <= kMaxHeartbeatTimeoutS,
          "elastic.heartbeat_timeout_s",
          fmt::format("in [{}, {}] seconds", kMinHeartbeatTimeoutS, kMaxHeartbeatTimeoutS),
          fmt::format("{}", c.elastic.heartbeat_timeout_s));
  require(std::isfinite(c.elastic.rejoin_after_s) && c.elastic.rejoin_after_s >= 0,
          "elastic.rejoin_after_s", ">= 0", fmt::format("{}", c.elastic.rejoin_after_s));
  require(std::isfinite(c.elastic.slow_threshold) && c.elastic.slow_threshold > 1,
          "elastic.slow_threshold", "> 1 (a multiple of the median rank's compute)",
          fmt::format("{}", c.elastic.slow_threshold));
  at_least(c.elastic.slow_window, 1, "elastic.slow_window");
  require(std::isfinite(c.elastic.rebalance_gain) && c.elastic.rebalance_gain > 0 &&
              c.elastic.rebalance_gain <= 10,
          "elastic.rebalance_gain", "in (0, 10] (0.1: the slowest pipeline 10% faster)",
          fmt::format("{}", c.elastic.rebalance_gain));
  require(c.elastic.control == "embedded" || c.elastic.control == "etcd" ||
              c.elastic.control.rfind("etcd://", 0) == 0,
          "elastic.control", "\"embedded\", \"etcd\" or \"etcd://HOST:PORT[,HOST:PORT...]\"",
          fmt::format("\"{}\"", c.elastic.control));
  require(c.elastic.standbys >= 0 && c.elastic.standbys <= kMaxStandbys, "elastic.standbys",
          fmt::format("in [0, {}]", kMaxStandbys), std::to_string(c.elastic.standbys));
  if (c.elastic.standbys > 0 && c.elastic.control == "embedded") {
    throw ConfigError(fmt::format(
        "elastic.standbys = {} needs a control store that outlives the coordinator: set "
        "elastic.control = \"etcd\" (a local etcd) or \"etcd://HOST:PORT\"",
        c.elastic.standbys));
  }

  const TrainConfig& t = c.train;
  at_least(t.steps, 0, "train.steps");
  require(std::isfinite(t.lr) && t.lr > 0, "train.lr", "> 0", fmt::format("{}", t.lr));
  finite_at_least(t.min_lr, 0.0, "train.min_lr");
  if (t.min_lr > t.lr) {
    throw ConfigError(
        fmt::format("config key train.min_lr ({}) must be <= train.lr ({})", t.min_lr, t.lr));
  }
  at_least(t.warmup_steps, 0, "train.warmup_steps");
  finite_at_least(t.weight_decay, 0.0, "train.weight_decay");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "in [0, 1)", fmt::format("{}", t.beta1));
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "in [0, 1)", fmt::format("{}", t.beta2));
  finite_at_least(t.grad_clip, 0.0, "train.grad_clip");
  in_range(t.threads_per_worker, 1, kMaxThreadsPerWorker, "train.threads_per_worker");
  in_range(t.spin_wait_us, -1, kMaxSpinWaitUs, "train.spin_wait_us");
  require(!t.out_dir.empty(), "train.out_dir", "a directory", "\"\"");
  at_least(t.checkpoint_every, 0, "train.checkpoint_every");
  at_least(c.checkpoint.keep, 0, "checkpoint.keep");
  at_least(c.checkpoint.replicas, CheckpointConfig::kAutoReplicas, "checkpoint.replicas");
  finite_at_least(c.checkpoint.every_s, 0.0, "checkpoint.every_s");
  at_least(t.log_every, 1, "train.log_every");
  in_range(t.sample_tokens, 0, kMaxSampleTokens, "train.sample_tokens");
  require(t.nonfinite == "stop" || t.nonfinite == "skip", "train.nonfinite", "\"stop\" or \"skip\"",
          "\"" + t.nonfinite + "\"");
  in_range(t.skip_limit, 1, kMaxSkipLimit, "train.skip_limit");
  require(t.precision == "auto" || t.precision == "fp32" || t.precision == "bf16",
          "train.precision", "\"auto\", \"fp32\" or \"bf16\"", "\"" + t.precision + "\"");
  at_least(t.eval_every, 0, "train.eval_every");
  in_range(t.eval_batches, 1, kMaxEvalBatches, "train.eval_batches");
  parse_trace_steps(t.trace_steps, t.steps);  // ConfigError naming train.trace_steps
  if (t.eval_every > 0 && c.data.val_path.empty()) {
    throw ConfigError(fmt::format(
        "train.eval_every = {} asks for a validation loss but data.val_path is empty; set "
        "--data.val_path=FILE (a token file, directory or glob of .bin shards, e.g. the "
        "NAME_val_*.bin of `breakwater data prepare`) or --train.eval_every=0",
        t.eval_every));
  }
}

void validate_devices(const RunConfig& c, int64_t devices) {
  const auto& p = c.pipeline;
  if (devices < 0 || devices > kMaxWorldSize) {
    throw ConfigError(fmt::format("--devices {} is out of range [0, {}]", devices, kMaxWorldSize));
  }
  if (devices == 0) devices = int64_t{c.cluster.nodes} * c.cluster.devices_per_node;
  int64_t used = 0;
  for (int d : p.pipelines) used += d;
  if (devices == 1) {
    if (!p.pipelines.empty() && used != 1) {
      throw ConfigError(fmt::format(
          "--devices 1 runs the whole model in one process, but pipeline.pipelines = [{}] asks "
          "for {} devices; drop one of the two",
          fmt::join(p.pipelines, ", "), used));
    }
    return;
  }
  if (!p.pipelines.empty() && used != devices) {
    throw ConfigError(fmt::format(
        "pipeline.pipelines [{}] uses {} devices but the run has {} (--devices or cluster.nodes x "
        "cluster.devices_per_node); make them agree",
        fmt::join(p.pipelines, ", "), used, devices));
  }
  if (p.fault_tolerance + 1 > devices) {
    throw ConfigError(fmt::format(
        "pipeline.fault_tolerance {} needs at least {} pipelines but the run has only {} "
        "devices; lower pipeline.fault_tolerance or add devices",
        p.fault_tolerance, p.fault_tolerance + 1, devices));
  }
}

std::string to_toml(const RunConfig& config, bool with_comments) {
  std::string out;
  for (const auto& section : detail::schema()) {
    if (!out.empty()) out += "\n";
    out += "[" + section.name + "]\n";
    size_t width = 0;
    for (const auto& f : section.fields) {
      width = std::max(width, f.key.size() + 3 + toml_value(f.get(config)).size());
    }
    for (const auto& f : section.fields) {
      std::string line = f.key + " = " + toml_value(f.get(config));
      if (with_comments) line = fmt::format("{:<{}}  # {}", line, width, f.comment);
      out += line + "\n";
    }
  }
  return out;
}

namespace detail {
std::string toml_text(const Value& v) { return toml_value(v); }
}  // namespace detail

std::vector<std::string> changed_keys(const RunConfig& config) {
  const RunConfig defaults;
  std::vector<std::string> out;
  for (const auto& section : detail::schema()) {
    for (const auto& f : section.fields) {
      const detail::Value v = f.get(config);
      if (v == f.get(defaults)) continue;
      out.push_back(section.name + "." + f.key + " = " + toml_value(v));
    }
  }
  return out;
}

}  // namespace bw::runtime
