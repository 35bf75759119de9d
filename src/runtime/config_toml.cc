// Run config: validation and printing back to TOML (see config.h).
#include <fmt/format.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "runtime/config.h"
#include "runtime/config_schema.h"

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

}  // namespace

void validate(const RunConfig& c) {
  require(!c.model.name.empty(), "model.name", "a model name (tiny, small, gpt2-124m)", "\"\"");
  at_least(c.cluster.nodes, 1, "cluster.nodes");
  at_least(c.cluster.devices_per_node, 1, "cluster.devices_per_node");
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
  finite_at_least(c.cluster.memory_gb, 0.0, "cluster.memory_gb");

  require(!c.pipeline.schedule.empty(), "pipeline.schedule", "a schedule name", "\"\"");
  at_least(c.pipeline.waves, 1, "pipeline.waves");
  at_least(c.pipeline.chunks_per_device, 1, "pipeline.chunks_per_device");
  at_least(c.pipeline.microbatches, 1, "pipeline.microbatches");
  at_least(c.pipeline.microbatch_size, 1, "pipeline.microbatch_size");
  for (size_t i = 0; i < c.pipeline.pipelines.size(); ++i) {
    at_least(c.pipeline.pipelines[i], 1, fmt::format("pipeline.pipelines[{}]", i));
  }
  at_least(c.pipeline.fault_tolerance, 0, "pipeline.fault_tolerance");

  require(c.elastic.store_port >= 0 && c.elastic.store_port <= 65535, "elastic.store_port",
          "in [0, 65535]", std::to_string(c.elastic.store_port));
  require(std::isfinite(c.elastic.step_timeout_s) && c.elastic.step_timeout_s > 0,
          "elastic.step_timeout_s", "> 0", fmt::format("{}", c.elastic.step_timeout_s));
  require(std::isfinite(c.elastic.heartbeat_timeout_s) && c.elastic.heartbeat_timeout_s > 0,
          "elastic.heartbeat_timeout_s", "> 0", fmt::format("{}", c.elastic.heartbeat_timeout_s));
  require(std::isfinite(c.elastic.rejoin_after_s) && c.elastic.rejoin_after_s >= 0,
          "elastic.rejoin_after_s", ">= 0", fmt::format("{}", c.elastic.rejoin_after_s));

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
  at_least(t.threads_per_worker, 1, "train.threads_per_worker");
  require(!t.out_dir.empty(), "train.out_dir", "a directory", "\"\"");
  at_least(t.checkpoint_every, 0, "train.checkpoint_every");
  at_least(t.log_every, 1, "train.log_every");
  at_least(t.sample_tokens, 0, "train.sample_tokens");
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

}  // namespace bw::runtime
