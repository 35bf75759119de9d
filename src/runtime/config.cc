// Run config: schema, TOML reading and overrides (see config.h). Pure: no LibTorch, no files
// (load_run_config, which reads files and checks out_dir and resume, is in config_load.cc), so
// the fuzz target of the config parser links it without LibTorch (fuzz/).
#include "runtime/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "runtime/config_schema.h"

namespace bw::runtime {
namespace detail {
namespace {

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, std::string>) {
    return Kind::kString;
  } else if constexpr (std::is_same_v<T, bool>) {
    return Kind::kBool;
  } else if constexpr (std::is_same_v<T, double>) {
    return Kind::kFloat;
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    return Kind::kIntList;
  } else {
    static_assert(std::is_integral_v<T>);
    return Kind::kInt;
  }
}

int64_t narrow_int(int64_t v, int64_t lo, int64_t hi, const std::string& name) {
  if (v < lo || v > hi) {
    throw ConfigError(fmt::format("config key {} = {} is out of range [{}, {}]", name, v, lo, hi));
  }
  return v;
}

template <class S, class T>
Field make(const char* key, S RunConfig::*section, T S::*member, const char* comment) {
  Field f;
  f.key = key;
  f.kind = kind_of<T>();
  f.comment = comment;
  f.set = [section, member](RunConfig& c, const Value& v, const std::string& name) {
    T& dst = c.*section.*member;
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, double> ||
                  std::is_same_v<T, bool>) {
      dst = std::get<T>(v);
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      dst.clear();
      for (int64_t x : std::get<std::vector<int64_t>>(v)) {
        dst.push_back(static_cast<int>(
            narrow_int(x, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), name)));
      }
    } else {
      dst = static_cast<T>(narrow_int(std::get<int64_t>(v), std::numeric_limits<T>::min(),
                                      std::numeric_limits<T>::max(), name));
    }
  };
  f.get = [section, member](const RunConfig& c) -> Value {
    const T& src = c.*section.*member;
    if constexpr (std::is_same_v<T, std::vector<int>>) {
      return std::vector<int64_t>(src.begin(), src.end());
    } else if constexpr (std::is_same_v<T, bool>) {
      return src;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<int64_t>(src);
    } else {
      return src;
    }
  };
  return f;
}

std::vector<Section> build_schema() {
  using R = RunConfig;
  return {
      {"model",
       {make("name", &R::model, &ModelConfig::name,
             "size of model.family (docs/models.md), optionally \"<size>:<blocks>\""),
        make("family", &R::model, &ModelConfig::family,
             "\"gpt\" (breakwater's own), \"gpt2\" or \"llama\""),
        make("seq_len", &R::model, &ModelConfig::seq_len,
             "tokens per sample; 0 = the model's (<= its positions)"),
        make("init_from", &R::model, &ModelConfig::init_from,
             "Hugging Face model folder to start from (config.json + safetensors); \"\" = seeded"),
        make("seed", &R::model, &ModelConfig::seed,
             "initial weights of layer i depend only on (seed, i)"),
        make("tie_embeddings", &R::model, &ModelConfig::tie_embeddings,
             "LM head uses the token embedding matrix (a copy on each stage, gradients summed)")}},
      {"data",
       {make("path", &R::data, &DataConfig::path,
             "text file, directory of text files or llm.c .bin tokens; \"\" = fortunes corpus"),
        make("seed", &R::data, &DataConfig::seed, "seed of the global sample order"),
        make("tokenizer", &R::data, &DataConfig::tokenizer,
             "tokenizer.json the data was prepared with (vocabulary, decoded sample); \"\" = "
             "the one `data prepare` saved beside data.path's shards, if any"),
        make("val_path", &R::data, &DataConfig::val_path,
             "validation tokens, read like path (file, directory or glob of .bin shards); "
             "\"\" = none")}},
      {"cluster",
       {make("nodes", &R::cluster, &ClusterConfig::nodes, "hosts (the unit of failure)"),
        make("devices_per_node", &R::cluster, &ClusterConfig::devices_per_node,
             "worker processes per node"),
        make("device", &R::cluster, &ClusterConfig::device, "\"cpu\" or \"cuda\""),
        make("gpus", &R::cluster, &ClusterConfig::gpus,
             "GPU index of each local worker, e.g. [0, 0, 1, 1] (sharing needs gloo); [] = "
             "worker i on GPU i"),
        make("backend", &R::cluster, &ClusterConfig::backend,
             "c10d backend: \"gloo\" (cpu or cuda) or \"nccl\" (cuda)"),
        make("memory_gb", &R::cluster, &ClusterConfig::memory_gb,
             "memory per device for the planner; 0 = no limit")}},
      {"pipeline",
       {make("schedule", &R::pipeline, &PipelineConfig::schedule,
             "gpipe, 1f1b, interleaved, hanayo, zb-h1, ..."),
        make("waves", &R::pipeline, &PipelineConfig::waves, "Hanayo waves W"),
        make("chunks_per_device", &R::pipeline, &PipelineConfig::chunks_per_device,
             "chunks per device for interleaved schedules"),
        make("microbatches", &R::pipeline, &PipelineConfig::microbatches,
             "microbatches per step (all pipelines together)"),
        make("microbatch_size", &R::pipeline, &PipelineConfig::microbatch_size,
             "samples per microbatch"),
        make("pipelines", &R::pipeline, &PipelineConfig::pipelines,
             "device count of each pipeline, e.g. [2, 3]; [] = the planner decides"),
        make("devices_per_stage", &R::pipeline, &PipelineConfig::devices_per_stage,
             "devices of one node per stage, sharded (FSDP FULL_SHARD) when > 1"),
        make("stage_devices", &R::pipeline, &PipelineConfig::stage_devices,
             "devices per stage, pipeline after pipeline, e.g. [2, 1, 1, 1, 1] for pipelines "
             "[3, 3]; [] = pipeline.devices_per_stage"),
        make("recompute", &R::pipeline, &PipelineConfig::recompute,
             "activation recomputation: \"none\", or \"full\" (keep each layer's input only, "
             "run its forward again before its backward)"),
        make("fault_tolerance", &R::pipeline, &PipelineConfig::fault_tolerance,
             "node failures to survive (f: at least f + 1 pipelines)"),
        make("profile", &R::pipeline, &PipelineConfig::profile,
             "layer profile JSON for the planner; \"\" = uniform estimate")}},
      {"elastic",
       {make("store_port", &R::elastic, &ElasticConfig::store_port,
             "coordinator store port; 0 = pick a free port"),
        make("step_timeout_s", &R::elastic, &ElasticConfig::step_timeout_s,
             "longest wait for one step before a worker counts as hung"),
        make("heartbeat_timeout_s", &R::elastic, &ElasticConfig::heartbeat_timeout_s,
             "a node whose agent or worker misses heartbeats for this long is taken out"),
        make("rejoin_after_s", &R::elastic, &ElasticConfig::rejoin_after_s,
             "a lost node's agent is started again after this long (local runs); 0 = never"),
        make("inject", &R::elastic, &ElasticConfig::inject,
             "faults to inject, e.g. \"kill:node=1:step=5:phase=grad_sync\" (docs/elastic.md)"),
        make("run_token", &R::elastic, &ElasticConfig::run_token,
             "secret the agents of a multi-host run present; \"\" = BW_RUN_TOKEN "
             "(docs/multihost.md)"),
        make("slow_threshold", &R::elastic, &ElasticConfig::slow_threshold,
             "a rank whose compute per unit of work is this many times the median rank's is slow "
             "(docs/observability.md)"),
        make("slow_window", &R::elastic, &ElasticConfig::slow_window,
             "steps in a row a rank must be over slow_threshold to be flagged"),
        make("rebalance", &R::elastic, &ElasticConfig::rebalance,
             "re-fit the split of the global batch across pipelines to their measured speed "
             "(over the last slow_window steps) at a step boundary"),
        make("rebalance_gain", &R::elastic, &ElasticConfig::rebalance_gain,
             "with rebalance: the least predicted gain (0.1: the slowest pipeline 10% faster) "
             "for which the split changes"),
        make("control", &R::elastic, &ElasticConfig::control,
             "where leadership and decisions are kept: \"embedded\", \"etcd\" (a local "
             "3-member etcd) or \"etcd://HOST:PORT[,...]\" (docs/elastic.md)"),
        make("standbys", &R::elastic, &ElasticConfig::standbys,
             "with etcd: standby coordinators that take the run over when the active one goes")}},
      {"train",
       {make("steps", &R::train, &TrainConfig::steps, "optimizer steps"),
        make("lr", &R::train, &TrainConfig::lr, "peak learning rate"),
        make("min_lr", &R::train, &TrainConfig::min_lr, "learning rate at the end of the cosine"),
        make("warmup_steps", &R::train, &TrainConfig::warmup_steps, "linear warm-up steps"),
        make("weight_decay", &R::train, &TrainConfig::weight_decay,
             "AdamW decoupled weight decay (matrices only)"),
        make("beta1", &R::train, &TrainConfig::beta1, "AdamW beta1"),
        make("beta2", &R::train, &TrainConfig::beta2, "AdamW beta2"),
        make("grad_clip", &R::train, &TrainConfig::grad_clip,
             "max global gradient norm; 0 = no clipping"),
        make("threads_per_worker", &R::train, &TrainConfig::threads_per_worker,
             "intra-op threads per worker process"),
        make("spin_wait_us", &R::train, &TrainConfig::spin_wait_us,
             "microseconds a worker polls a collective before it sleeps; -1 = auto (poll 2000 "
             "when the host's workers and threads fit its cores, else 0)"),
        make("out_dir", &R::train, &TrainConfig::out_dir,
             "metrics, checkpoints and the resolved config go here"),
        make("checkpoint_every", &R::train, &TrainConfig::checkpoint_every,
             "steps between checkpoints; 0 = at the end only"),
        make("resume", &R::train, &TrainConfig::resume,
             "checkpoint sidecar JSON to resume from; \"\" = fresh run"),
        make("log_every", &R::train, &TrainConfig::log_every, "steps between metric lines"),
        make("sample_tokens", &R::train, &TrainConfig::sample_tokens,
             "tokens of text generated after training; 0 = none"),
        make("nonfinite", &R::train, &TrainConfig::nonfinite,
             "a step with a non-finite loss or gradient norm: \"stop\" the run or \"skip\" "
             "its update"),
        make("skip_limit", &R::train, &TrainConfig::skip_limit,
             "with nonfinite = \"skip\": steps skipped in a row before the run stops"),
        make("precision", &R::train, &TrainConfig::precision,
             "\"auto\" (bf16 on cuda, fp32 on cpu), \"fp32\", or \"bf16\" mixed precision (bf16 "
             "matmuls and activations, fp32 master weights, optimizer state, loss and "
             "gradients)"),
        make("tensorboard", &R::train, &TrainConfig::tensorboard,
             "write TensorBoard event files (scalars per step, events as text) to out_dir/tb"),
        make("eval_every", &R::train, &TrainConfig::eval_every,
             "steps between validation losses on data.val_path (and after the last); 0 = never"),
        make("eval_batches", &R::train, &TrainConfig::eval_batches,
             "global batches of data.val_path, from its start, in each validation loss"),
        make("trace_steps", &R::train, &TrainConfig::trace_steps,
             "0-based steps whose every action is traced into out_dir/trace.json (\"10-11\", "
             "\"3,5\"); \"\" = none")}},
      {"checkpoint",
       {make("dir", &R::checkpoint, &CheckpointConfig::dir,
             "root of the checkpoint-NNNNNN directories; \"\" = train.out_dir (every worker "
             "writes its shard there: in a multi-host run, a filesystem every host sees or each "
             "host's own disk)"),
        make("keep", &R::checkpoint, &CheckpointConfig::keep,
             "committed checkpoints kept, newest first; 0 = all"),
        make("replicas", &R::checkpoint, &CheckpointConfig::replicas,
             "extra copies of every layer in each checkpoint, each written by a worker of another "
             "pipeline (another node) from the state it holds; at most the pipelines minus one; "
             "-1 = 1 where checkpoint.dir is each host's own disk and there are two pipelines or "
             "more, else 0"),
        make("every_s", &R::checkpoint, &CheckpointConfig::every_s,
             "also checkpoint once this many seconds of training have passed since the last "
             "checkpoint (timed from the end of the first step); 0 = only "
             "train.checkpoint_every and the end"),
        make("async", &R::checkpoint, &CheckpointConfig::async,
             "snapshot the state at the step boundary and write it in the background (false: "
             "write before the next step)")}},
  };
}

}  // namespace

const std::vector<Section>& schema() {
  static const std::vector<Section> s = build_schema();
  return s;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kIntList:
      return "a list of integers";
    case Kind::kBool:
      return "true or false";
  }
  return "?";
}

}  // namespace detail

namespace {
using detail::Field;
using detail::Kind;
using detail::Section;
using detail::Value;

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

const Section& find_section(const std::string& name, const std::string& source) {
  std::vector<std::string> names;
  for (const auto& s : detail::schema()) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  throw ConfigError(fmt::format("{}: unknown config section [{}]; valid sections: {}", source, name,
                                join_keys(names)));
}

const Field& find_field(const Section& section, const std::string& key, const std::string& source) {
  std::vector<std::string> keys;
  for (const auto& f : section.fields) {
    if (f.key == key) return f;
    keys.push_back(f.key);
  }
  throw ConfigError(fmt::format("{}: unknown config key {}.{}; valid keys of [{}]: {}", source,
                                section.name, key, section.name, join_keys(keys)));
}

std::string describe(const toml::node& node) {
  std::ostringstream os;
  node.visit([&](const auto& v) { os << v; });
  return os.str();
}

[[noreturn]] void wrong_type(const std::string& source, const std::string& name, Kind kind,
                             const std::string& got) {
  throw ConfigError(fmt::format("{}: config key {} expects {}, got {}", source, name,
                                detail::kind_name(kind), got));
}

Value from_toml(const toml::node& node, Kind kind, const std::string& name,
                const std::string& source) {
  switch (kind) {
    case Kind::kInt:
      if (auto v = node.value_exact<int64_t>()) return *v;
      break;
    case Kind::kFloat:
      if (auto v = node.value_exact<double>()) return *v;
      if (auto v = node.value_exact<int64_t>()) return static_cast<double>(*v);
      break;
    case Kind::kString:
      if (auto v = node.value_exact<std::string>()) return *v;
      break;
    case Kind::kBool:
      if (auto v = node.value_exact<bool>()) return *v;
      break;
    case Kind::kIntList:
      if (const auto* arr = node.as_array()) {
        std::vector<int64_t> out;
        bool ok = true;
        for (const auto& e : *arr) {
          auto v = e.value_exact<int64_t>();
          if (!v)
            ok = false;
          else
            out.push_back(*v);
        }
        if (ok) return out;
      }
      break;
  }
  wrong_type(source, name, kind, describe(node));
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  const char* first = s.data() + (s[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(first, s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Whether `s` is valid UTF-8 (what TOML requires of every string, so that the saved config.toml
// of a config with this value loads again).
bool valid_utf8(const std::string& s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};  // shortest form per length
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;  // continuation bytes
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

Value from_text(const std::string& raw, Kind kind, const std::string& name,
                const std::string& source) {
  if (!valid_utf8(raw)) {
    throw ConfigError(
        fmt::format("{}: the value of {} is not valid UTF-8; give it as UTF-8 text", source, name));
  }
  std::string text = trim(raw);
  switch (kind) {
    case Kind::kInt: {
      int64_t v = 0;
      if (parse_int(text, v)) return v;
      break;
    }
    case Kind::kFloat: {
      char* end = nullptr;
      double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
      if (!text.empty() && end == text.c_str() + text.size()) return v;
      break;
    }
    case Kind::kString:
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        return text.substr(1, text.size() - 2);
      }
      return raw;
    case Kind::kBool:
      if (text == "true") return true;
      if (text == "false") return false;
      break;
    case Kind::kIntList: {
      std::string body = text;
      if (body.size() >= 2 && body.front() == '[' && body.back() == ']') {
        body = trim(body.substr(1, body.size() - 2));
      }
      std::vector<int64_t> out;
      bool ok = true;
      if (!body.empty()) {
        std::stringstream ss(body);
        std::string item;
        while (std::getline(ss, item, ',')) {
          int64_t v = 0;
          if (!parse_int(trim(item), v)) ok = false;
          out.push_back(v);
        }
      }
      if (ok) return out;
      break;
    }
  }
  wrong_type(source, name, kind, fmt::format("\"{}\"", raw));
}

void apply_toml(RunConfig& config, const toml::table& root, const std::string& source) {
  for (const auto& [section_key, section_node] : root) {
    std::string section_name(section_key.str());
    if (section_name == detail::kResolvedSection) continue;  // what a run resolved: a record, not input
    const auto* table = section_node.as_table();
    if (!table) {
      throw ConfigError(
          fmt::format("{}: top-level key '{}' is not a section; keys go inside "
                      "[model], [data], [cluster], [pipeline], [elastic] or [train]",
                      source, section_name));
    }
    const Section& section = find_section(section_name, source);
    for (const auto& [key, node] : *table) {
      const Field& field = find_field(section, std::string(key.str()), source);
      std::string name = section.name + "." + field.key;
      field.set(config, from_toml(node, field.kind, name, source), name);
    }
  }
}

void apply_override(RunConfig& config, const std::string& override_text) {
  std::string text = override_text;
  if (text.rfind("--", 0) == 0) text = text.substr(2);
  size_t eq = text.find('=');
  size_t dot = text.find('.');
  std::string source = fmt::format("override '{}'", override_text);
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    throw ConfigError(
        fmt::format("{} must look like section.key=value (e.g. "
                    "pipeline.schedule=1f1b)",
                    source));
  }
  const Section& section = find_section(text.substr(0, dot), source);
  const Field& field = find_field(section, text.substr(dot + 1, eq - dot - 1), source);
  std::string name = section.name + "." + field.key;
  field.set(config, from_text(text.substr(eq + 1), field.kind, name, source), name);
}

}  // namespace

RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  RunConfig config;
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw ConfigError(fmt::format("{}:{}:{}: invalid TOML: {}", source, where.line, where.column,
                                  e.description()));
  }
  apply_toml(config, root, source);
  for (const auto& o : overrides) apply_override(config, o);
  validate(config);
  return config;
}

std::vector<std::string> overrides_from_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    bool flag = a.rfind("--", 0) == 0 && a.find('.') != std::string::npos;
    if (!flag) {
      throw ConfigError(
          fmt::format("unexpected argument '{}'; config overrides look like "
                      "--section.key=value",
                      a));
    }
    if (a.find('=') != std::string::npos) {
      out.push_back(a.substr(2));
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      out.push_back(a.substr(2) + "=" + args[i + 1]);
      ++i;
    } else {
      throw ConfigError(fmt::format("override '{}' has no value; write {}=VALUE", a, a));
    }
  }
  return out;
}

}  // namespace bw::runtime
