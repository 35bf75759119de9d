// `breakwater train [config.toml] [--section.key=value ...] [--devices N]`: trains a GPT with
// pipeline parallelism on this machine. Prints the resolved config and the plan, a progress bar
// (step, loss, tokens/s, ETA), a summary table and a generated sample; writes metrics JSONL, the
// resolved config and checkpoints under train.out_dir.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/error.h"
#include "core/file_io.h"
#include "elastic/control_store.h"
#include "elastic/coordinator.h"
#include "elastic/launch.h"
#include "elastic/net.h"
#include "elastic/slurm.h"
#include "elastic/standby_launch.h"
#include "elastic/token.h"
#include "model/gpt.h"
#include "runtime/config.h"
#include "runtime/log.h"

namespace bw::cli {
namespace {

struct TrainArgs {
  std::string config_path;
  int devices = 0;
  std::string log_level;
  bool quiet = false;
};

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", int(s) / 60, int(s) % 60);
  if (s < 172800) return fmt::format("{}h{:02d}m", int(s) / 3600, (int(s) % 3600) / 60);
  return fmt::format("{:.0f} days", s / 86400);
}

void print_plan(const runtime::RunLayout& layout, const std::vector<std::string>& notes) {
  fmt::print("plan (generation {}): {} device(s), {} pipeline(s), {} microbatches of {} per step\n",
             layout.generation, layout.world_size(), layout.pipelines.size(),
             layout.total_microbatches, layout.microbatch_size);
  for (size_t p = 0; p < layout.pipelines.size(); ++p) {
    const auto& pl = layout.pipelines[p];
    std::vector<std::string> chunks;
    for (size_t c = 0; c < pl.chunk_layers.size(); ++c) {
      chunks.push_back(fmt::format("c{}@d{}:L{}-{}", c, pl.schedule.chunk_device[c],
                                   pl.chunk_layers[c].first, pl.chunk_layers[c].second - 1));
    }
    const bool sharded =
        std::any_of(pl.widths.begin(), pl.widths.end(), [](int w) { return w > 1; });
    fmt::print(
        "  pipeline {}: ranks {}-{}, schedule {}, microbatches {}-{}, chunks {}{}\n", p,
        pl.first_rank, pl.first_rank + pl.num_ranks() - 1, pl.schedule.kind, pl.first_microbatch,
        pl.first_microbatch + pl.num_microbatches - 1, fmt::join(chunks, " "),
        sharded ? fmt::format(", devices per stage [{}] (sharded)", fmt::join(pl.widths, ","))
                : "");
  }
  for (const auto& n : notes) fmt::print("  note: {}\n", n);
  std::fflush(stdout);
}

// What a run shows of its config: the keys set away from their defaults (a run sets a handful),
// and where the whole resolved config is saved (~60 lines, in train.out_dir before the plan is
// shown; docs/cli.md "What a run prints"). The run token never appears.
void print_config(runtime::RunConfig config) {
  config.elastic.run_token.clear();
  const auto keys = runtime::changed_keys(config);
  fmt::print("config: {}/config.toml (resolved); {} key(s) set away from the defaults{}\n",
             config.train.out_dir, keys.size(), keys.empty() ? "" : ":");
  for (const auto& k : keys) fmt::print("  {}\n", k);
}

// The first plan comes with the config (after every check before the start has passed); later
// plans (reconfigurations) alone.
auto plan_printer(const runtime::RunConfig& config) {
  return [&config](const runtime::RunLayout& layout, const std::vector<std::string>& notes) {
    if (layout.generation == 0) print_config(config);
    print_plan(layout, notes);
  };
}

// A huge but legal run says what it will take before any process starts, from its own numbers:
// memory of at least 16 bytes per parameter (weights, gradients, two AdamW moments) for every
// replica the plan holds, activations on top; compute of 6 x parameters x tokens (forward and
// backward), timed at kFlopsPerCore per core of this machine (the `small` model trained at
// about that rate per core on the 2-core development machine, docs/runtime.md).
constexpr double kFlopsPerCore = 40e9;
constexpr double kWarnBytes = 8.0 * (1 << 30);
constexpr double kWarnSeconds = 3600;

void warn_if_costly(const runtime::RunConfig& config, const runtime::RunLayout& layout) {
  if (layout.generation != 0) return;
  const auto model =
      model::resolve_config(config.model.family, config.model.name, config.model.seq_len,
                            config.model.init_from, layout.vocab_size);
  double replica_params = 0, model_params = 0;
  for (int l = 0; l < layout.num_layers; ++l) {
    const double n = static_cast<double>(model::num_parameters(model, l));
    model_params += n;
    replica_params += n * static_cast<double>(layout.replicas(l).size());
  }
  const double bytes = 16 * replica_params;
  const double tokens = static_cast<double>(config.train.steps) *
                        static_cast<double>(runtime::global_batch(config.pipeline)) * model.seq_len;
  const double flops = 6 * model_params * tokens;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double seconds = flops / (kFlopsPerCore * cores);
  if (bytes < kWarnBytes && seconds < kWarnSeconds) return;
  fmt::print(stderr,
             "note: this run needs at least {} of memory ({} parameters x {:.0f} replicas x 16 "
             "bytes, activations on top) and {:.3g} FLOP for {} steps of {} tokens: about {} "
             "on {:.0f} cores\n",
             io::human_bytes(static_cast<int64_t>(bytes)), static_cast<int64_t>(model_params),
             replica_params / model_params, flops, config.train.steps,
             static_cast<int64_t>(tokens / std::max(1, config.train.steps)), duration(seconds),
             cores);
  std::fflush(stderr);
}

void print_progress(const elastic::StepSummary& s, bool tty, int log_every) {
  const int done = s.step + 1;
  if (!tty && done % std::max(1, log_every) != 0 && done != s.steps && !s.val_loss) return;
  const int width = 24;
  const int filled = static_cast<int>(double(done) / s.steps * width);
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  // A skipped step (not finite, train.nonfinite = "skip") says so and counts the skips.
  const std::string skipped =
      s.skipped ? fmt::format("  skipped (not finite; {} so far)", s.skipped_total) : "";
  // A validation loss (after this step's update) stays on screen: its line is not redrawn.
  const std::string val = s.val_loss ? fmt::format("  val loss {:.4f}", *s.val_loss) : "";
  // Ranks flagged slow (elastic/slow_ranks.h), with their compute over the median rank's.
  std::string slow;
  for (int r : s.slow_ranks) {
    slow += fmt::format("{}rank {} {:.1f}x", slow.empty() ? "  slow: " : ", ", r,
                        s.relative_compute[r]);
  }
  fmt::print(stderr, "{}[{}] step {}/{}  loss {:.4f}{}  {:.0f} tok/s  MFU {:.1f}%  ETA {}{}{}{}",
             tty ? "\r" : "", bar, done, s.steps, s.loss, val, s.tokens_per_s, 100.0 * s.mfu,
             duration(s.eta_s), skipped, slow,
             tty ? (done == s.steps || s.skipped || s.val_loss ? "\n" : "") : "\n");
  std::fflush(stderr);
}

// Events as they happen: a lost node at once, the recovery when the new plan commits its first
// step.
void print_event(const elastic::Event& e, bool tty) {
  const char* lead = tty ? "\r\x1b[K" : "";
  if (e.kind == "node_lost") {
    fmt::print(stderr, "{}event: node {} lost at step {} (generation {}): {}\n", lead,
               fmt::join(e.nodes, ","), e.step, e.generation, e.cause);
  } else if (e.kind == "rebalance") {
    fmt::print(stderr, "{}event: rebalancing the batch after step {} (generation {}): {}\n", lead,
               e.step + 1, e.generation, e.cause);
  } else if (e.kind == "recovered" && e.cause == "rebalance") {
    fmt::print(stderr,
               "{}event: rebalanced in {:.0f} ms; plan {} -> {} (generation {}, resuming "
               "at step {})\n",
               lead, e.recovery_ms, e.old_plan, e.new_plan, e.generation, e.step);
  } else if (e.kind == "recovered" && e.cause == "coordinator") {
    fmt::print(stderr,
               "{}event: took the run over from its coordinator in {:.0f} ms (campaign {:.0f} ms, "
               "reconcile {:.0f} ms, regroup {:.0f} ms, replay {:.0f} ms; generation {}, resuming "
               "at step {})\n",
               lead, e.recovery_ms, e.campaign_ms, e.reconcile_ms, e.regroup_ms, e.replay_ms,
               e.generation, e.step);
  } else if (e.kind == "recovered") {
    fmt::print(stderr,
               "{}event: recovered from {} of node(s) {} in {:.0f} ms; plan {} -> {} (generation "
               "{}, resuming at step {})\n",
               lead,
               e.cause == "node_lost"     ? "the loss"
               : e.cause == "node_joined" ? "the join"
                                          : e.cause,
               fmt::join(e.nodes, ","), e.recovery_ms, e.old_plan, e.new_plan, e.generation,
               e.step);
  } else if (e.kind == "stopped") {
    fmt::print(stderr, "{}event: stopping at step {}: {}\n", lead, e.step, e.cause);
  }
  std::fflush(stderr);
}

void print_events(const std::vector<elastic::Event>& events) {
  bool any = false;
  for (const auto& e : events) any = any || e.kind == "recovered";
  if (!any) return;
  fmt::print("\n{:<11} {:>5} {:<8} {:>4} {:>9} {:>9} {:>8} {:>10} {:>11} {:>9} {:>11}\n", "event",
             "step", "nodes", "gen", "detect ms", "stop ms", "plan ms", "regroup ms", "transfer ms",
             "replay ms", "recovery ms");
  for (const auto& e : events) {
    if (e.kind != "recovered") continue;
    fmt::print(
        "{:<11} {:>5} {:<8} {:>4} {:>9.0f} {:>9.0f} {:>8.1f} {:>10.0f} {:>11.1f} {:>9.0f} "
        "{:>11.0f}\n",
        e.cause, e.step, fmt::format("{}", fmt::join(e.nodes, ",")), e.generation, e.detect_ms,
        e.quiesce_ms, e.plan_ms, e.regroup_ms, e.transfer_ms, e.replay_ms, e.recovery_ms);
  }
}

void print_rates(const elastic::RunSummary& s) {
  fmt::print("{:<28} {:.4f} -> {:.4f}\n",
             s.first_loss_step.value_or(s.first_step) == s.first_step
                 ? std::string("loss (first -> final)")
                 : fmt::format("loss (step {} -> final)", *s.first_loss_step + 1),
             s.first_loss, s.final_loss);
  if (s.final_val_loss) {
    fmt::print("{:<28} {:.4f} (after step {})\n", "validation loss", *s.final_val_loss,
               s.final_val_step);
  }
  if (!s.skipped_steps.empty()) {
    fmt::print("{:<28} {} (0-based steps {}; not finite, no update; samples consumed)\n",
               "skipped steps", s.skipped_steps.size(), fmt::join(s.skipped_steps, ", "));
  }
  fmt::print("{:<28} {:.0f}\n", "tokens/s", s.tokens_per_s);
  fmt::print("{:<28} {:.3g} TFLOP/s ({}; {:.3g} GFLOP per token)\n", "model FLOP/s",
             s.flops_per_s / 1e12, s.precision, s.flops_per_token / 1e9);
  fmt::print("{:<28} {:.1f}% of {:.3g} TFLOP/s per device ({})\n", "MFU", 100.0 * s.mfu,
             s.peak_flops_per_device / 1e12, s.peak_source);
}

void print_ranks(const elastic::RunSummary& s) {
  // The planner's estimate is what training needs (state and activations); the peak RSS adds the
  // process's own (LibTorch, buffers, allocator slack).
  fmt::print("{:<6} {:<10} {:<8} {:>14} {:>15} {:>10}\n", "rank", "pipeline", "device",
             "peak RSS MiB", "predicted MiB", "compute %");
  for (int r = 0; r < std::min(static_cast<int>(s.peak_rss_kb.size()), s.layout.world_size());
       ++r) {
    const auto [p, d] = s.layout.locate(r);
    const double predicted =
        r < static_cast<int>(s.predicted_bytes.size()) ? s.predicted_bytes[r] / (1 << 20) : 0.0;
    fmt::print("{:<6} {:<10} {:<8} {:>14.1f} {:>15.1f} {:>10.1f}\n", r, p, d,
               s.peak_rss_kb[r] / 1024.0, predicted, 100.0 * s.compute_share[r]);
  }
  for (const auto& x : s.slow_ranks) {
    fmt::print(
        "{:<28} rank {} (worker {}, generation {}): slow after {} step(s) from step {}, up "
        "to {:.2f}x the median rank's compute per FLOP\n",
        "slow rank", x.rank, x.worker, x.generation, x.steps, x.first_step + 1, x.max_relative);
  }
  fmt::print("{:<28} {}\n", "metrics", s.metrics_path);
  if (!s.trace_path.empty()) {
    fmt::print(
        "{:<28} {} (open in Perfetto; `breakwater trace compare` it with `breakwater "
        "schedule --trace`)\n",
        "trace", s.trace_path);
  }
  if (!s.checkpoint.empty()) fmt::print("{:<28} {}\n", "checkpoint", s.checkpoint);
  print_events(s.events);
  if (!s.sample.empty()) fmt::print("\nsample:\n{}\n", s.sample);
}

void print_summary(const elastic::RunSummary& s) {
  fmt::print("\n{:<28} {}\n", "steps",
             fmt::format("{} (from step {})", s.steps_done, s.first_step));
  if (!s.first_loss_step && s.steps_done > 0) {
    // A coordinator that took the run over after its last step was committed: it only ended it.
    fmt::print("{:<28} every step was committed before this coordinator took the run over\n",
               "loss");
  } else {
    print_rates(s);
  }
  fmt::print("{:<28} {}\n", "wall time", duration(s.total_s));
  print_ranks(s);
}

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a GPT with pipeline parallelism (config TOML + --section.key=value)");
  auto args = std::make_shared<TrainArgs>();
  cmd->add_option("config", args->config_path, "run config TOML (defaults when omitted)");
  cmd->add_option("--devices", args->devices,
                  "number of devices (1 = the whole model in this process, no pipeline)");
  cmd->add_option("--log-level", args->log_level, "error | warn | info | debug");
  cmd->add_flag("--quiet", args->quiet, "no config, progress bar or sample");
  cmd->allow_extras();
  cmd->footer(
      "\nAny key of the run config can be overridden as --section.key=value, e.g.\n"
      "  --pipeline.schedule=1f1b --pipeline.pipelines=[1,3] --train.steps=20 "
      "--model.name=tiny\n"
      "Sections: model, data, cluster, pipeline, elastic, train; every key, its type and default\n"
      "are in examples/train.toml and docs/config.md. Unknown keys are errors.\n"
      "A coordinator that can be replaced: --elastic.control=etcd --elastic.standbys=1 starts a\n"
      "local 3-member etcd and a standby that takes the run over when the active coordinator\n"
      "goes (try --elastic.inject=kill_coordinator:step=30, or kill -9 its pid; "
      "docs/elastic.md).");
  cmd->callback([cmd, args] {
    if (!args->log_level.empty()) runtime::set_log_level(runtime::parse_log_level(args->log_level));
    const auto overrides = runtime::overrides_from_args(cmd->remaining());
    const auto config = runtime::load_run_config(args->config_path, overrides);
    if (cmd->count("--devices") > 0 && args->devices < 1) {
      throw ConfigError(
          fmt::format("--devices must be >= 1, got {}; omit it to use cluster.nodes x "
                      "cluster.devices_per_node",
                      args->devices));
    }
    if (args->devices > 0) runtime::validate_devices(config, args->devices);
    if (config.elastic.control != "embedded") {
      // The coordinator replaceable: etcd, the coordinators and the agents as separate processes.
      if (args->devices > 0) {
        throw ConfigError(fmt::format(
            "--devices with elastic.control = \"{}\": a run led through etcd runs its nodes' "
            "agents as separate processes; drop --devices and set cluster.nodes and "
            "cluster.devices_per_node",
            config.elastic.control));
      }
      elastic::StandbyLaunch launch;
      if (!args->log_level.empty()) launch.coordinator = {"--log-level", args->log_level};
      if (args->quiet) launch.coordinator.push_back("--quiet");
      launch.quiet = args->quiet;
      const int status = elastic::run_with_standbys(config, launch);
      if (status != 0) throw ExitCode{status};
      return;
    }
    elastic::CoordinatorOptions options;
    options.devices = args->devices;
    const bool tty = isatty(fileno(stderr));
    options.on_plan = [&config, quiet = args->quiet, print = plan_printer(config)](
                          const runtime::RunLayout& layout, const std::vector<std::string>& notes) {
      warn_if_costly(config, layout);
      if (!quiet) print(layout, notes);
    };
    if (!args->quiet) {
      options.on_step = [tty, &config](const elastic::StepSummary& s) {
        print_progress(s, tty, config.train.log_every);
      };
      options.on_event = [tty](const elastic::Event& e) { print_event(e, tty); };
    }
    const auto summary = elastic::run_training(config, options);
    if (!args->quiet) print_summary(summary);
  });
}

struct CoordinatorArgs {
  std::string config_path, listen, log_level, control, run_id;
  int expect_nodes = 0;
  double wait_s = 300;
  int64_t lease_ttl_s = 5;
  double leaderless_timeout_s = 30;
  std::vector<std::string> expect_names;
  bool quiet = false;
  bool standby = false;
  bool no_agent_hint = false;
};

void add_coordinator(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "coordinator", "Run a multi-host training run: host the store, wait for agents, supervise");
  auto args = std::make_shared<CoordinatorArgs>();
  cmd->add_option("config", args->config_path, "run config TOML (defaults when omitted)");
  cmd->add_option("--listen", args->listen,
                  "ADDR:PORT to listen on for agents (this host's address on their network; "
                  "port 0 = any)")
      ->required();
  cmd->add_option("--expect-nodes", args->expect_nodes,
                  "agents (nodes) to wait for before training starts (default: cluster.nodes)");
  cmd->add_option("--wait-s", args->wait_s, "longest wait for them to register (default 300)");
  cmd->add_option("--expect-names", args->expect_names,
                  "node names to name in the message when some are missing")
      ->delimiter(',');
  cmd->add_option("--control", args->control,
                  "where the run's leadership and every step's decision are kept: embedded "
                  "(this process's store) or etcd://HOST:PORT[,HOST:PORT...], fenced writes in "
                  "etcd 3.4+ (default: elastic.control; docs/elastic.md)");
  cmd->add_option("--run-id", args->run_id,
                  "the run's name in etcd (its keys under bw/NAME/); required with --control "
                  "etcd://");
  cmd->add_option("--lease-ttl-s", args->lease_ttl_s,
                  "with etcd: seconds the leadership outlives a silent coordinator (default 5)");
  cmd->add_option("--leaderless-timeout-s", args->leaderless_timeout_s,
                  "with etcd: longest wait for an unreachable etcd before exit 3 (default 30)");
  cmd->add_flag("--standby", args->standby,
                "with etcd: stand by, and take the run over (same config and --run-id) when its "
                "coordinator goes; its agents then need --control and --run-id (docs/elastic.md)");
  cmd->add_option("--log-level", args->log_level, "error | warn | info | debug");
  cmd->add_flag("--quiet", args->quiet, "no config, progress bar or sample");
  // Started by `breakwater train` (standby_launch.h), which starts the agents itself.
  cmd->add_flag("--no-agent-hint", args->no_agent_hint)->group("");
  cmd->allow_extras();
  cmd->footer(
      "\nOn every other host: BW_RUN_TOKEN=<the run token> breakwater agent --coordinator "
      "ADDR:PORT\n"
      "(with --control etcd://...: breakwater agent --control etcd://... --run-id NAME)\n"
      "The run token is elastic.run_token or BW_RUN_TOKEN (required). The store has no\n"
      "authentication of its own: listen on a trusted network only (docs/multihost.md).\n"
      "Checkpoints: without checkpoint.dir they travel over the store into train.out_dir here;\n"
      "with it, each host's workers write their shards there, on a shared filesystem or on each\n"
      "host's own disk (docs/checkpoints.md). data.path must hold the same corpus on every host\n"
      "(checked at registration).\n"
      "Run config overrides work as for `train` (--section.key=value).");
  cmd->callback([cmd, args] {
    if (!args->log_level.empty()) runtime::set_log_level(runtime::parse_log_level(args->log_level));
    const auto overrides = runtime::overrides_from_args(cmd->remaining());
    auto config = runtime::load_run_config(args->config_path, overrides);
    if (args->expect_nodes < 0 || cmd->count("--expect-nodes") > 0 && args->expect_nodes < 1) {
      throw ConfigError(fmt::format("--expect-nodes must be >= 1, not {}", args->expect_nodes));
    }
    if (args->expect_nodes > 0) config.cluster.nodes = args->expect_nodes;
    if (!(args->wait_s > 0)) throw ConfigError("--wait-s must be > 0");
    require_distinct(args->expect_names, "--expect-names");
    if (cmd->count("--control") == 0) args->control = config.elastic.control;
    if (args->control == "etcd") {
      throw ConfigError(
          "elastic.control = \"etcd\" starts an etcd on this machine and is for `breakwater "
          "train`; give the coordinator the run's etcd: --control etcd://HOST:PORT[,...]");
    }
    config.elastic.control = args->control;  // the run's identity: the same on every coordinator
    const auto control = elastic::parse_control_url(args->control);
    if (control.kind == elastic::ControlUrl::Kind::kEtcd) {
      if (args->run_id.empty()) {
        throw ConfigError(
            "--control etcd://... needs --run-id NAME: the run's name in etcd (its keys under "
            "bw/NAME/)");
      }
      elastic::check_run_id(args->run_id);
      if (args->lease_ttl_s < 1) {
        throw ConfigError(fmt::format("--lease-ttl-s must be >= 1, not {}", args->lease_ttl_s));
      }
      if (!(args->leaderless_timeout_s > 0))
        throw ConfigError("--leaderless-timeout-s must be > 0");
    } else if (config.elastic.standbys > 0) {
      throw ConfigError(
          "elastic.standbys is for `breakwater train`; a multi-host run's standbys are started "
          "by hand: breakwater coordinator --control etcd://... --run-id NAME --standby");
    } else if (cmd->count("--run-id") + cmd->count("--lease-ttl-s") +
                   cmd->count("--leaderless-timeout-s") + cmd->count("--standby") >
               0) {
      throw ConfigError(
          "--run-id, --lease-ttl-s, --leaderless-timeout-s and --standby are for a run whose "
          "control store is etcd; add --control etcd://HOST:PORT[,...]");
    }
    elastic::CoordinatorOptions options;
    options.control = args->control;
    options.run_id = args->run_id;
    options.lease_ttl_s = args->lease_ttl_s;
    options.leaderless_timeout_s = args->leaderless_timeout_s;
    options.standby = args->standby;
    options.listen = args->listen;
    options.wait_s = args->wait_s;
    options.expected_names = args->expect_names;
    options.on_listen = [&config, hint = !args->no_agent_hint](const std::string& host, int port) {
      if (!hint) return;
      fmt::print(stderr,
                 "coordinator listening on {}:{}; waiting for {} agent(s): on each host run\n"
                 "  BW_RUN_TOKEN=<the run token> breakwater agent --coordinator {}:{}\n",
                 host, port, config.cluster.nodes, host, port);
      std::fflush(stderr);
    };
    const bool tty = isatty(fileno(stderr));
    if (!args->quiet) {
      // A standby shows nothing until it takes the run over (its first plan is generation g+1).
      options.on_plan = [print = plan_printer(config), standby = args->standby](
                            const runtime::RunLayout& layout, const std::vector<std::string>& notes) {
        if (!standby || layout.generation > 0) print(layout, notes);
      };
      options.on_step = [tty, &config](const elastic::StepSummary& s) {
        print_progress(s, tty, config.train.log_every);
      };
      options.on_event = [tty](const elastic::Event& e) { print_event(e, tty); };
    }
    const auto summary = elastic::run_training(config, options);
    if (!args->quiet && !summary.idle) print_summary(summary);
  });
}

struct LaunchArgs {
  std::string config_path, hostfile, listen, log_level, remote_binary = "breakwater";
  std::string ssh = "ssh -o BatchMode=yes";
  double wait_s = 300;
  bool quiet = false;
};

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void add_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Run a multi-host training run: the coordinator here, an agent per host over ssh");
  auto args = std::make_shared<LaunchArgs>();
  cmd->add_option("config", args->config_path, "run config TOML (defaults when omitted)");
  cmd->add_option("--hostfile", args->hostfile,
                  "hosts, one a line as `host slots=g` (DeepSpeed's format)")
      ->required();
  cmd->add_option("--listen", args->listen,
                  "ADDR:PORT the coordinator listens on (default: this host's address towards "
                  "the first host, port 29500)");
  cmd->add_option("--ssh", args->ssh,
                  "command that runs its arguments on a host, the host first (default \"ssh -o "
                  "BatchMode=yes\")");
  cmd->add_option("--remote-binary", args->remote_binary,
                  "breakwater on the hosts (default: `breakwater` on their PATH)");
  cmd->add_option("--wait-s", args->wait_s,
                  "longest wait for the agents to register (default 300)");
  cmd->add_option("--log-level", args->log_level, "error | warn | info | debug");
  cmd->add_flag("--quiet", args->quiet, "no config, progress bar or sample");
  cmd->allow_extras();
  cmd->footer(
      "\nEach agent gets the run token (elastic.run_token, BW_RUN_TOKEN, or a fresh random one) "
      "on\n"
      "its standard input and stops when the launcher does (end of the run, an error, Ctrl-C).\n"
      "cluster.nodes and cluster.devices_per_node come from the hostfile. Checkpoints are\n"
      "written here only; data.path must hold the same corpus on every host. Run config\n"
      "overrides work as for `train` (--section.key=value); see docs/multihost.md.");
  cmd->callback([cmd, args] {
    if (!args->log_level.empty()) runtime::set_log_level(runtime::parse_log_level(args->log_level));
    const auto overrides = runtime::overrides_from_args(cmd->remaining());
    auto config = runtime::load_run_config(args->config_path, overrides);
    std::ifstream in(args->hostfile);
    if (!in) throw ConfigError(fmt::format("cannot read the hostfile '{}'", args->hostfile));
    std::stringstream text;
    text << in.rdbuf();
    const auto hosts = elastic::parse_hostfile(text.str(), args->hostfile);
    if (config.elastic.control != "embedded") {
      throw ConfigError(fmt::format(
          "elastic.control = \"{}\": `breakwater launch` runs its coordinator with the embedded "
          "store; for a run led through etcd start `breakwater coordinator --control "
          "etcd://... --run-id NAME` (and `--standby` ones) and the agents yourself "
          "(docs/multihost.md)",
          config.elastic.control));
    }
    config.cluster.nodes = static_cast<int>(hosts.size());
    config.cluster.devices_per_node = hosts.front().slots;
    runtime::validate(config);
    if (!(args->wait_s > 0)) throw ConfigError("--wait-s must be > 0");
    const auto shell = split_words(args->ssh);
    if (shell.empty()) throw ConfigError("--ssh is empty; give the remote shell, e.g. ssh");
    std::string listen = args->listen;
    if (listen.empty()) {
      listen = fmt::format("{}:{}", elastic::local_address_towards(hosts.front().host),
                           elastic::kDefaultCoordinatorPort);
    }
    std::string token = elastic::coordinator_token(config, false);
    if (token.empty()) token = elastic::random_hex(16);
    config.elastic.run_token = token;
    elastic::Launcher launcher(shell, args->remote_binary);
    elastic::CoordinatorOptions options;
    options.listen = listen;
    options.wait_s = args->wait_s;
    for (const auto& h : hosts) options.expected_names.push_back(h.host);
    options.on_listen = [&](const std::string& host, int port) {
      const auto where = fmt::format("{}:{}", host, port);
      for (const auto& h : hosts) {
        runtime::log(runtime::LogLevel::kInfo, "starting the agent of {}: {}", h.host,
                     fmt::join(launcher.command(h, where), " "));
        launcher.start(h, where, token);
      }
    };
    const bool tty = isatty(fileno(stderr));
    if (!args->quiet) {
      options.on_plan = plan_printer(config);
      options.on_step = [tty, &config](const elastic::StepSummary& s) {
        print_progress(s, tty, config.train.log_every);
      };
      options.on_event = [tty](const elastic::Event& e) { print_event(e, tty); };
    }
    const auto summary = elastic::run_training(config, options);
    launcher.stop(10000);
    if (!args->quiet) print_summary(summary);
  });
}

const Registrar kRegister("train", 50, add_train);
const Registrar kRegisterLaunch("launch", 52, add_launch);
const Registrar kRegisterCoordinator("coordinator", 51, add_coordinator);

}  // namespace
}  // namespace bw::cli
