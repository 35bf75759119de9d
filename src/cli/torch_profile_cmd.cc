// `breakwater profile measure --model small [--microbatch-size N] [--seq-len T] [--repeats K]
// [--out P.json]`: times each GPT layer's forward and backward on this machine, measures its
// memory, prints a table and writes the profile JSON that `breakwater plan` reads
// (model/profiler.h). Registered after the pure `profile` command (profile_cmd.cc, order 10) and
// added under it; creates `profile` itself when that command is not built.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "model/gpt.h"
#include "model/profiler.h"

#if __has_include("plan/profile.h")
#include "plan/profile.h"
#define BW_HAVE_PLAN_PROFILE 1
#endif

namespace bw::cli {
namespace {

struct MeasureArgs {
  model::ProfileOptions options;
  std::string precision = "fp32";
  std::string out = "profile.json";
  bool json = false;
};

// A huge but legal measurement says what it will take before it starts, from its own numbers:
// memory for the largest layer's activations and gradients (a block's attention scores
// mb x heads x T x T and its ~20 d-wide tensors per token, the head's logits mb x T x vocab, each
// held about three times over: forward, saved, gradient), and compute of 6 x parameters x tokens
// plus the attention's 12 x T x d per token and block, for every warm-up and timed run of the
// forward and both backward forms, at 40 GFLOP/s per thread (the rate `small` trains at per
// core on the 2-core development machine, docs/runtime.md).
void warn_if_costly(const model::ProfileOptions& o) {
  auto m = model::named_config(o.model, o.vocab_size);
  if (o.seq_len > 0) m.seq_len = o.seq_len;
  const double tokens = static_cast<double>(o.microbatch_size) * m.seq_len;
  const double f = 4.0;  // bytes per float
  const double block = tokens * (20.0 * m.d_model + static_cast<double>(m.n_heads) * m.seq_len);
  const double head = tokens * m.vocab_size;
  const double bytes = 3 * f * std::max(block, head);
  double params = 0;
  for (int l = 0; l < model::num_layers(m); ++l) params += model::num_parameters(m, l);
  const double runs = 3.0 * (o.repeats + o.warmup);  // forward, backward, backward I + W
  const double flops =
      runs * (6 * params * tokens + 12.0 * m.n_blocks * tokens * m.seq_len * m.d_model);
  const double seconds = flops / (40e9 * o.threads);
  if (bytes < 4.0 * (1 << 30) && seconds < 600) return;
  fmt::print(stderr,
             "note: measuring {} at microbatch {} x seq_len {} needs about {} of memory for its "
             "largest layer and {:.3g} FLOP, about {} on {} thread(s)\n",
             o.model, o.microbatch_size, m.seq_len, io::human_bytes(static_cast<int64_t>(bytes)),
             flops,
             seconds < 7200     ? fmt::format("{:.0f} s", seconds)
             : seconds < 172800 ? fmt::format("{:.1f} h", seconds / 3600)
                                : fmt::format("{:.0f} days", seconds / 86400),
             o.threads);
  std::fflush(stderr);
}

// The output must be openable for writing before a long measurement, not after it; an existing
// file is left as it is until the profile replaces it.
void require_writable(const std::string& path) {
  const bool existed = std::filesystem::exists(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot open profile JSON '{}': {}; choose another --output",
                                  path, std::strerror(errno)));
  }
  ::close(fd);
  if (!existed) std::filesystem::remove(path);
}

void run_measure(const MeasureArgs& args) {
  warn_if_costly(args.options);
  require_writable(args.out);
  model::MeasuredProfile p = model::measure_profile(args.options);
  json::Json doc = model::to_profile_json(p);
  json::write_file(args.out, doc);
#ifdef BW_HAVE_PLAN_PROFILE
  plan::load_profile(args.out);  // the planner must read what we wrote
#endif
  if (args.json) {
    fmt::print("{}\n", doc.dump(2));
    return;
  }
  fmt::print("profile of {} (microbatch {}, seq_len {}) on {}, median of {} runs\n", p.model,
             p.microbatch_size, p.seq_len, p.device, args.options.repeats);
  fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>11} {:>11}\n", "layer", "fwd ms", "bwd ms",
             "bwd-I ms", "bwd-W ms", "act KiB", "out KiB", "param KiB");
  double f = 0, b = 0;
  for (const auto& l : p.layers) {
    fmt::print("{:<10} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.1f} {:>11.1f} {:>11.1f}\n", l.name,
               l.forward_ms, l.backward_ms, l.backward_input_ms, l.backward_weight_ms,
               l.activation_bytes / 1024.0, l.output_bytes / 1024.0, l.param_bytes / 1024.0);
    f += l.forward_ms;
    b += l.backward_ms;
  }
  fmt::print("{:<10} {:>9.3f} {:>9.3f}\n", "total", f, b);
  fmt::print("activation bytes: {}\n", p.activation_measured
                                           ? "measured from the allocator"
                                           : "analytic formula (no allocator statistics)");
  fmt::print("wrote {}\n", args.out);
  std::fflush(stdout);
}

void add_measure(CLI::App& app) {
  CLI::App* profile = nullptr;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == "profile") profile = sub;
  }
  if (profile == nullptr) {
    profile = app.add_subcommand("profile", "Layer profiles for the planner");
    profile->require_subcommand(1);
  }
  auto args = std::make_shared<MeasureArgs>();
  CLI::App* cmd = profile->add_subcommand(
      "measure", "Time each layer's forward/backward and measure its memory on this machine");
  cmd->add_option("--model", args->options.model, "tiny | small | gpt2-124m (or <name>:<blocks>)")
      ->capture_default_str();
  cmd->add_option("--microbatch-size", args->options.microbatch_size, "samples per microbatch")
      ->capture_default_str();
  cmd->add_option("--seq-len", args->options.seq_len, "sequence length; 0 = the model's")
      ->capture_default_str();
  cmd->add_option("--vocab-size", args->options.vocab_size,
                  "256 for byte-level text, 50257 for GPT-2 .bin tokens")
      ->capture_default_str();
  cmd->add_option("--repeats", args->options.repeats, "timed runs per layer (median)")
      ->capture_default_str();
  cmd->add_option("--warmup", args->options.warmup, "untimed runs per layer first")
      ->capture_default_str();
  cmd->add_option("--threads", args->options.threads, "intra-op threads (as a worker uses)")
      ->capture_default_str();
  cmd->add_option("--seed", args->options.seed, "weight seed")->capture_default_str();
  cmd->add_option("--precision", args->precision,
                  "fp32 | bf16 (mixed, as train.precision runs it: autocast, bf16 activations)")
      ->capture_default_str();
  cmd->add_option("--out,--output,-o", args->out, "profile JSON to write")->capture_default_str();
  cmd->add_flag("--json", args->json, "print the profile JSON instead of a table");
  cmd->callback([cmd, args] {
    args->options.precision = model::parse_precision(args->precision);
    const auto& o = args->options;
    require_count(o.vocab_size, 2, 1 << 20, "--vocab-size");
    require_count(o.microbatch_size, 1, 4096, "--microbatch-size");
    require_count(o.seq_len, 0, 1 << 16, "--seq-len");
    require_count(o.repeats, 1, 10000, "--repeats");
    require_count(o.warmup, 0, 10000, "--warmup");
    require_count(o.threads, 1, 256, "--threads");
    run_measure(*args);
  });
}

const Registrar kRegistrar("profile measure", 20, add_measure);

}  // namespace
}  // namespace bw::cli
