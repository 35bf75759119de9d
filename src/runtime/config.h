// The run configuration: one TOML file with sections [model] [data] [cluster] [pipeline]
// [elastic] [train], plus `section.key=value` overrides from the command line
// (`--pipeline.schedule=1f1b`). Every key has a declared type and default (docs/config.md,
// examples/train.toml); an unknown section or key, a wrong type or an out-of-range value is a
// ConfigError naming the key, what was expected and the valid choices. to_toml() prints the
// resolved config so that loading it again gives an equal RunConfig (saved beside the outputs).
//
// Thread-safety: plain values; the functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bw::runtime {

struct ModelConfig {
  std::string name = "small";   // a size of `family` (docs/models.md), "<size>:<blocks>"
  std::string family = "gpt";   // "gpt" (breakwater's own) | "gpt2" | "llama"
  int seq_len = 0;              // tokens per sample; 0 = the model's
  std::string init_from;        // Hugging Face model folder to start from; "" = seeded weights
  int64_t seed = 1234;          // initial weights of layer i depend only on (seed, i)
  bool tie_embeddings = false;  // the LM head uses the token embedding matrix (model/gpt.h)
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string path;       // empty = the default corpus (data::default_corpus_path())
  int64_t seed = 42;      // sample order
  std::string tokenizer;  // tokenizer.json of the data; empty = the one beside data.path, if any
  // Validation tokens, read like `path` (a file, directory or glob of .bin shards); "" = none.
  // Evaluated every train.eval_every steps on its first train.eval_batches global batches.
  std::string val_path;
  bool operator==(const DataConfig&) const = default;
};

struct ClusterConfig {
  int nodes = 4;
  int devices_per_node = 1;
  std::string device = "cpu";    // "cpu" | "cuda"
  std::vector<int> gpus;         // GPU of each local worker; [] = local rank i on GPU i
  std::string backend = "gloo";  // "gloo" | "nccl" (nccl needs cuda)
  double memory_gb = 0.0;        // per device; 0 = no limit
  bool operator==(const ClusterConfig&) const = default;
};

struct PipelineConfig {
  std::string schedule = "hanayo";
  int waves = 2;
  int chunks_per_device = 2;
  int microbatches = 8;
  int microbatch_size = 4;
  std::vector<int> pipelines;      // explicit device counts per pipeline; empty = planner decides
  int devices_per_stage = 1;       // ranks of one stage (sharded when > 1), without a profile
  std::vector<int> stage_devices;  // explicit ranks per stage, pipeline after pipeline
  // Activation recomputation: "none", or "full" (a microbatch in flight keeps each layer's input
  // only; the layer's forward runs again just before its backward).
  std::string recompute = "none";
  int fault_tolerance = 1;
  std::string profile;  // profile JSON for the planner; empty = uniform estimate
  bool operator==(const PipelineConfig&) const = default;
};

struct ElasticConfig {
  int store_port = 0;  // 0 = pick a free port
  double step_timeout_s = 120.0;
  double heartbeat_timeout_s = 5.0;
  double rejoin_after_s = 0.0;  // 0 = a lost node stays out
  std::string inject;           // fault specs (elastic/inject.h); empty = none
  std::string run_token;        // agents of a multi-host run must know it; "" = BW_RUN_TOKEN
  // Slow ranks (elastic/slow_ranks.h): a rank whose compute time per unit of work exceeds
  // slow_threshold x the median rank's in each of the last slow_window steps is flagged.
  double slow_threshold = 1.5;
  int slow_window = 5;
  // Re-fit the split of the global batch across pipelines to their speed measured over the last
  // slow_window steps, when that predicts the slowest pipeline at least rebalance_gain faster
  // (elastic/rebalance.h).
  bool rebalance = false;
  double rebalance_gain = 0.1;
  // Where the run's leadership and each step's decision are kept (docs/elastic.md): "embedded"
  // (the coordinator's own store; it is the run's single point of failure), "etcd" (`train`
  // starts a 3-member etcd on loopback), or "etcd://HOST:PORT[,...]" (an etcd of your own).
  std::string control = "embedded";
  // With etcd: coordinators standing by to take the run over when the active one goes.
  int standbys = 0;
  bool operator==(const ElasticConfig&) const = default;
};

struct TrainConfig {
  int steps = 100;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // max global grad norm; 0 = no clipping
  int threads_per_worker = 1;
  // How long a worker polls a collective before it sleeps, in microseconds; -1 = auto
  // (runtime/comm.h resolve_collective_spin_us: polls only where its host's cores suffice).
  int spin_wait_us = -1;
  std::string out_dir = "runs/default";
  int checkpoint_every = 0;  // 0 = at the end only
  std::string resume;        // checkpoint sidecar to resume from; empty = fresh run
  int log_every = 1;
  int sample_tokens = 200;  // generated after training; 0 = none
  // A step whose loss or gradient norm is not finite: "stop" the run, or "skip" its update
  // (Megatron-LM's overflow skip), at most skip_limit steps in a row.
  std::string nonfinite = "stop";
  int skip_limit = 5;
  // "fp32", or "bf16": autocast matmuls and attention, bf16 activations between layers and
  // stages, fp32 master weights, moments, loss and gradients (model/placement.h).
  std::string precision = "auto";  // "auto" (bf16 on cuda, fp32 on cpu) | "fp32" | "bf16"
  // TensorBoard event files in out_dir/tb (elastic/metrics_sink.h).
  bool tensorboard = false;
  // Validation loss on data.val_path after every eval_every steps and after the last one (0 =
  // never), over its first eval_batches global batches (runtime/worker.h, eval_due).
  int eval_every = 0;
  int eval_batches = 4;
  // Steps whose every action each rank records, merged into out_dir/trace.json ("10-11",
  // "3,5"; "" = none; runtime/trace_events.h).
  std::string trace_steps;
  bool operator==(const TrainConfig&) const = default;
};

// Where checkpoints go and how many are kept (docs/checkpoints.md). train.checkpoint_every says
// when.
struct CheckpointConfig {
  // Root of the checkpoint-NNNNNN directories; "" = train.out_dir. Every worker writes its own
  // shard there, so in a multi-host run it must be a filesystem every host sees.
  std::string dir;
  int keep = 0;       // committed checkpoints kept, newest first; 0 = all
  // Extra copies of every layer, each written by a worker of another pipeline (so on another
  // node) from the state it already holds: no bytes cross the network. At most the number of
  // pipelines minus one. kAutoReplicas: 1 where checkpoint.dir is each host's own disk and the
  // plan has two pipelines or more, else 0 (resolved by the coordinator).
  static constexpr int kAutoReplicas = -1;
  int replicas = kAutoReplicas;
  bool async = true;  // snapshot at the step boundary, write in the background
  // Also a checkpoint once this many seconds of training have passed since the last one (timed
  // from the end of the run's first step); 0 = only train.checkpoint_every and the end.
  double every_s = 30.0;
  bool operator==(const CheckpointConfig&) const = default;
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  ClusterConfig cluster;
  PipelineConfig pipeline;
  ElasticConfig elastic;
  TrainConfig train;
  CheckpointConfig checkpoint;
  bool operator==(const RunConfig&) const = default;
};

// Loads the defaults, then the TOML file (if the path is not empty; a regular file of at most
// io::kMaxConfigBytes), then the overrides in order ("section.key=value", a leading "--"
// allowed), then validates. Then, as this is what starts a run: train.out_dir must be usable
// (out_dir_lock.h, check_out_dir_usable), and a train.resume checkpoint's sidecar must fit this
// config (resume_check.h). ConfigError on any problem, naming the file or override and the key.
RunConfig load_run_config(const std::string& toml_path_or_empty,
                          const std::vector<std::string>& overrides);
// Same, from TOML text; `source` names it in messages.
RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides);

// Collects overrides from leftover command-line arguments: "--section.key=value" or
// "--section.key value". Anything else is a ConfigError naming the argument.
std::vector<std::string> overrides_from_args(const std::vector<std::string>& args);

// Limits every run config is held to (docs/config.md, "Limits"); counts are checked in 64-bit
// arithmetic before anything is sized from them.
inline constexpr int64_t kMaxWorldSize = 1024;  // worker processes of one run
inline constexpr int64_t kMaxDevicesPerNode = 64;
inline constexpr int64_t kMaxWaves = 64;                // pipeline.waves
inline constexpr int kMaxStandbys = 8;                   // elastic.standbys
inline constexpr int64_t kMaxChunksPerDevice = 64;      // pipeline.chunks_per_device
inline constexpr int64_t kMaxMicrobatches = 1 << 16;    // pipeline.microbatches
inline constexpr int64_t kMaxMicrobatchSize = 1 << 16;  // pipeline.microbatch_size
inline constexpr int64_t kMaxGlobalBatch = 1 << 24;     // microbatches x microbatch_size
inline constexpr int64_t kMaxThreadsPerWorker = 256;
inline constexpr int64_t kMaxSpinWaitUs = 1000000;
inline constexpr int64_t kMaxSampleTokens = 1 << 20;
inline constexpr int64_t kMaxSkipLimit = 1000;       // train.skip_limit
inline constexpr int64_t kMaxEvalBatches = 1 << 16;  // train.eval_batches
inline constexpr double kMinStepTimeoutS = 1.0, kMaxStepTimeoutS = 7 * 86400.0;
inline constexpr double kMinHeartbeatTimeoutS = 0.2, kMaxHeartbeatTimeoutS = 3600.0;

// Range and consistency checks (done by load_run_config and parse_run_config); ConfigError
// naming the key, the value, the limit and the fix. Pure: reads no files.
void validate(const RunConfig& config);

// Checks of a run on `devices` worker processes, for `breakwater train --devices N` (0 = the
// cluster's nodes x devices_per_node): within kMaxWorldSize; with devices == 1 (the whole model in
// one process) pipeline.pipelines must be empty or [1]; otherwise pipeline.pipelines must use
// exactly `devices` devices and fault_tolerance + 1 pipelines must fit. ConfigError naming both
// options and the fix.
void validate_devices(const RunConfig& config, int64_t devices);

// The resolved config as TOML; with comments, one line per key saying what it is.
std::string to_toml(const RunConfig& config, bool with_comments = false);

// The keys whose values differ from the defaults, in schema order, as `section.key = value`
// (what a run prints at start; the whole config is saved in train.out_dir, docs/cli.md).
std::vector<std::string> changed_keys(const RunConfig& config);

// microbatches * microbatch_size: the samples one step consumes.
inline int64_t global_batch(const PipelineConfig& p) {
  return static_cast<int64_t>(p.microbatches) * p.microbatch_size;
}

}  // namespace bw::runtime
