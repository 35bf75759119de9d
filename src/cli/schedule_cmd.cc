// `breakwater schedule`: generate (or load) a pipeline schedule, validate it, simulate it, and
// print a summary table; optionally write its CSV, a Chrome trace, an SVG or ASCII timeline, or
// compare every kind side by side on the same costs (--compare).
//
//   breakwater schedule --kind hanayo --waves 2 --devices 4 --microbatches 8 --svg h.svg
//   breakwater schedule --compare --devices 8 --microbatches 32 --forward-ms 1 --backward-ms 2
//   breakwater schedule --from-csv pytorch.csv --trace t.json
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/file_io.h"
#include "core/json.h"
#include "schedule/fsdp.h"
#include "schedule/generate.h"
#include "sim/render.h"
#include "sim/timeline.h"

namespace bw::cli {
namespace {

struct ScheduleArgs {
  std::string kind = "1f1b";
  int devices = 4;
  int microbatches = 8;
  int chunks = 2;
  int waves = 1;
  int group_size = 0;
  std::string profile;
  double forward_ms = 1;
  double backward_ms = 2;
  double backward_input_ms = -1;
  double backward_weight_ms = -1;
  double activation_bytes = 1;
  double output_bytes = 0;
  double latency_ms = 0;
  double bandwidth_gbps = 0;
  std::string from_csv;
  std::string csv;
  bool csv_compute_only = false;
  std::string trace;
  std::string svg;
  bool ascii = false;
  bool compare = false;
  bool json = false;
  std::string semantics = "async";
  int recv_lookahead = 1;
  bool fsdp = false;
  double unshard_ms = 0;
  double reduce_grad_ms = 0;
  double overlap_f_b = 0;
};

// Per-layer costs from a profile JSON (plan/profile.h's format: a "layers" array with
// forward_ms, backward_ms, optional backward_input_ms / backward_weight_ms, activation_bytes,
// output_bytes and param_bytes). Read here so this pure command needs only sim.
std::vector<sim::LayerCost> read_profile(const std::string& path) {
  const json::Json doc = json::read_file(path);
  if (!doc.is_object() || !doc.contains("layers") || !doc["layers"].is_array() ||
      doc["layers"].empty())
    throw ConfigError(fmt::format("{}: expected an object with a non-empty 'layers' array", path));
  if (doc["layers"].size() > 4096)
    throw ConfigError(
        fmt::format("{}: {} layers, more than the limit of 4096", path, doc["layers"].size()));
  std::vector<sim::LayerCost> out;
  int i = 0;
  double total_ms = 0;
  for (const auto& layer : doc["layers"]) {
    const std::string where = fmt::format("{}: layer {}", path, i++);
    sim::LayerCost c;
    c.forward_ms = json::get_non_negative(layer, "forward_ms", where);
    c.backward_ms = json::get_non_negative(layer, "backward_ms", where);
    if (layer.contains("backward_input_ms") != layer.contains("backward_weight_ms"))
      throw ConfigError(
          fmt::format("{}: give both backward_input_ms and backward_weight_ms, or neither", where));
    if (layer.contains("backward_input_ms")) {
      c.backward_input_ms = json::get_non_negative(layer, "backward_input_ms", where);
      c.backward_weight_ms = json::get_non_negative(layer, "backward_weight_ms", where);
    }
    c.activation_bytes = json::get_non_negative(layer, "activation_bytes", where);
    c.output_bytes = json::get_non_negative(layer, "output_bytes", where);
    if (layer.contains("param_bytes"))
      c.param_bytes = json::get_non_negative(layer, "param_bytes", where);
    total_ms += c.forward_ms + c.backward_ms;
    out.push_back(c);
  }
  if (!(total_ms > 0) || !std::isfinite(total_ms))
    throw ConfigError(fmt::format(
        "{}: every layer has forward_ms = backward_ms = 0 (or the sum overflows); a schedule "
        "needs positive times",
        path));
  return out;
}

schedule::CommSemantics parse_semantics(const std::string& name) {
  if (name == "async") return schedule::CommSemantics::kAsync;
  if (name == "rendezvous") return schedule::CommSemantics::kRendezvous;
  if (name == "synchronous") return schedule::CommSemantics::kSynchronous;
  throw ConfigError(fmt::format("--semantics '{}': choose async, rendezvous or synchronous", name));
}

schedule::ScheduleSpec spec_of(const ScheduleArgs& a, const std::string& kind) {
  schedule::ScheduleSpec s;
  s.kind = kind;
  s.devices = a.devices;
  s.microbatches = a.microbatches;
  s.chunks_per_device = a.chunks;
  s.waves = a.waves;
  s.group_size = a.group_size;
  return s;
}

std::string describe(const schedule::ScheduleSpec& s) {
  std::string out = fmt::format("{} P={} B={}", s.kind, s.devices, s.microbatches);
  if (s.kind == "interleaved") out += fmt::format(" v={}", s.chunks_per_device);
  if (s.kind == "hanayo") out += fmt::format(" W={}", s.waves);
  return out;
}

// The costs of `s`: from the profile (balanced over its stages) or from the per-stage flags.
sim::CostModel costs_for(const ScheduleArgs& a, const schedule::Schedule& s,
                         const std::vector<sim::LayerCost>& layers) {
  const sim::LinkModel link{.latency_ms = a.latency_ms, .bandwidth_gbps = a.bandwidth_gbps};
  if (!layers.empty()) {
    const bool duplicated = s.num_stages() != s.num_chunks;
    return sim::layer_costs(layers, sim::balanced_partition(layers, s.num_stages()),
                            duplicated ? s.chunk_stage : std::vector<int>{}, link);
  }
  return sim::stage_costs(s,
                          {.forward_ms = a.forward_ms,
                           .backward_ms = a.backward_ms,
                           .backward_input_ms = a.backward_input_ms,
                           .backward_weight_ms = a.backward_weight_ms,
                           .activation_bytes = a.activation_bytes,
                           .output_bytes = a.output_bytes},
                          link);
}

// costs_for() plus the chunk-action and overlap flags.
sim::CostModel all_costs(const ScheduleArgs& a, const schedule::Schedule& s,
                         const std::vector<sim::LayerCost>& layers) {
  sim::CostModel costs = costs_for(a, s, layers);
  for (auto& c : costs.chunks) {
    c.unshard_ms = a.unshard_ms;
    c.reduce_grad_ms = a.reduce_grad_ms;
  }
  costs.overlap_f_b = a.overlap_f_b;
  return costs;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return fmt::format("{:.3g} {}", b, units[u]);
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

void write_text(const std::string& path, const std::string& text, const char* what) {
  io::write_file(path, text, what);
}

nlohmann::json result_json(const schedule::Schedule& s, const sim::SimResult& r) {
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : r.links)
    links.push_back({{"src", l.src_device},
                     {"dst", l.dst_device},
                     {"bytes", l.bytes},
                     {"messages", l.messages}});
  return {{"kind", s.kind},
          {"devices", s.num_devices},
          {"microbatches", s.num_microbatches},
          {"chunks", s.num_chunks},
          {"makespan_ms", r.makespan_ms},
          {"bubble_ratio", r.overall_bubble_ratio},
          {"bubble_ratio_per_device", r.bubble_ratio},
          {"busy_ms", r.busy_ms},
          {"activation_unit_bytes", r.activation_unit_bytes},
          {"peak_activation_bytes", r.peak_activation_bytes},
          {"peak_activation_units", r.peak_activation_units},
          {"bytes_sent", r.bytes_sent},
          {"links", links}};
}

void print_summary(const ScheduleArgs& a, const schedule::Schedule& s, const sim::SimResult& r,
                   const std::string& costs_text) {
  fmt::print("schedule {}: {} devices, {} microbatches, {} chunks ({})\n", s.kind, s.num_devices,
             s.num_microbatches, s.num_chunks, costs_text);
  const double onef1b = (s.num_devices - 1.0) / (s.num_microbatches + s.num_devices - 1.0);
  fmt::print("makespan {:.4g} ms, bubble {:.2f}% (1F1B on these sizes: {:.2f}%), bytes sent {}\n",
             r.makespan_ms, 100 * r.overall_bubble_ratio, 100 * onef1b, human_bytes(r.bytes_sent));
  fmt::print("valid: every (chunk, microbatch) runs once, no deadlock ({} semantics)\n\n",
             a.semantics);
  fmt::print("{:>6}  {:>10}  {:>8}  {:>12}  {:>14}\n", "device", "busy ms", "bubble", "peak (M_a)",
             "peak bytes");
  for (int d = 0; d < s.num_devices; ++d)
    fmt::print("{:>6}  {:>10.4g}  {:>7.2f}%  {:>12.4g}  {:>14}\n", d, r.busy_ms[d],
               100 * r.bubble_ratio[d], r.peak_activation_units[d],
               human_bytes(r.peak_activation_bytes[d]));
  if (!r.links.empty() && r.links.size() <= 32) {
    fmt::print("\n{:>10}  {:>12}  {:>8}\n", "link", "bytes", "messages");
    for (const auto& l : r.links)
      fmt::print("{:>10}  {:>12}  {:>8}\n", fmt::format("{}->{}", l.src_device, l.dst_device),
                 human_bytes(l.bytes), l.messages);
  }
}

void run_compare(const ScheduleArgs& a, const std::vector<sim::LayerCost>& layers) {
  std::vector<schedule::ScheduleSpec> specs;
  for (const auto& kind : schedule::schedule_kinds()) {
    if (kind == "hanayo") {
      for (int w : {1, 2, 4}) {
        auto s = spec_of(a, kind);
        s.waves = w;
        specs.push_back(s);
      }
    } else {
      specs.push_back(spec_of(a, kind));
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    fmt::print("{:<24}  {:>11}  {:>8}  {:>14}  {:>12}  {}\n", "schedule", "makespan ms", "bubble",
               "peak max (M_a)", "bytes sent", "note");
  for (const auto& spec : specs) {
    try {
      const schedule::Schedule s =
          schedule::lower(schedule::generate(spec), {.recv_lookahead = a.recv_lookahead});
      schedule::validate(s, {.semantics = parse_semantics(a.semantics)});
      const auto r = sim::simulate(s, costs_for(a, s, layers), {.timeline = false});
      if (a.json) {
        rows.push_back(result_json(s, r));
      } else {
        fmt::print("{:<24}  {:>11.4g}  {:>7.2f}%  {:>14.4g}  {:>12}\n", describe(spec),
                   r.makespan_ms, 100 * r.overall_bubble_ratio, max_of(r.peak_activation_units),
                   human_bytes(r.bytes_sent));
      }
    } catch (const ConfigError& e) {
      std::string why = e.what();
      if (auto nl = why.find('\n'); nl != std::string::npos) why = why.substr(0, nl);
      if (a.json)
        rows.push_back({{"kind", spec.kind}, {"error", why}});
      else
        fmt::print("{:<24}  {:>11}  {:>8}  {:>14}  {:>12}  {}\n", describe(spec), "-", "-", "-",
                   "-", why);
    }
  }
  if (a.json) fmt::print("{}\n", rows.dump(2));
}

// Every cost and size flag, before anything is generated.
void check_args(const ScheduleArgs& a) {
  require_count(a.devices, 1, 4096, "--devices");
  require_count(a.microbatches, 1, 1 << 20, "--microbatches");
  require_count(a.chunks, 1, 1024, "--chunks");
  require_count(a.waves, 1, 1024, "--waves");
  require_count(a.group_size, 0, 1 << 20, "--group-size");
  require_count(a.recv_lookahead, 0, 1 << 20, "--recv-lookahead");
  require_positive(a.forward_ms, "--forward-ms");
  require_positive(a.backward_ms, "--backward-ms");
  // -1 (the default) means half of --backward-ms.
  if (a.backward_input_ms != -1) require_non_negative(a.backward_input_ms, "--backward-input-ms");
  if (a.backward_weight_ms != -1)
    require_non_negative(a.backward_weight_ms, "--backward-weight-ms");
  require_non_negative(a.activation_bytes, "--activation-bytes");
  require_non_negative(a.output_bytes, "--output-bytes");
  require_non_negative(a.latency_ms, "--latency-ms");
  require_non_negative(a.bandwidth_gbps, "--bandwidth-gbps (0 = infinite)");
}

// A huge but legal request says what it will cost before it starts. Measured on one core:
// generate + lower + validate + simulate take about 0.4 us and 130 bytes per compute action
// (hanayo P=128 W=8 B=2048: 12.6 M actions, 4.9 s, 1.7 GB).
void warn_if_costly(long long compute_actions) {
  constexpr long long kWarnActions = 2'000'000;
  if (compute_actions < kWarnActions) return;
  fmt::print(stderr,
             "note: {} compute actions to generate, validate and simulate; expect about {:.0f} s "
             "and {} of memory\n",
             compute_actions, compute_actions * 0.4e-6,
             human_bytes(static_cast<double>(compute_actions) * 130));
  std::fflush(stderr);
}

void run(const ScheduleArgs& a) {
  check_args(a);
  const auto semantics = parse_semantics(a.semantics);
  const std::vector<sim::LayerCost> layers =
      a.profile.empty() ? std::vector<sim::LayerCost>{} : read_profile(a.profile);
  if (a.compare) return run_compare(a, layers);

  schedule::Schedule compute_only;
  if (!a.from_csv.empty()) {
    compute_only = schedule::read_csv_file(a.from_csv);
  } else {
    const auto spec = spec_of(a, a.kind);
    schedule::check_spec(spec);
    warn_if_costly(3LL * schedule::num_chunks(spec) * spec.microbatches);
    compute_only = schedule::generate(spec);
  }
  if (a.fsdp) compute_only = schedule::add_fsdp_actions(compute_only);
  // Only a CSV can hold SEND/RECV already (generate() and add_fsdp_actions() add none).
  schedule::Schedule s = !a.from_csv.empty() && compute_only.is_lowered()
                             ? std::move(compute_only)
                             : schedule::lower(compute_only, {.recv_lookahead = a.recv_lookahead});
  compute_only = {};  // its memory serves the validator's tables
  schedule::validate(s, {.semantics = semantics});
  // The per-action timeline costs more than the simulation itself at large sizes: keep it only
  // for the outputs that draw it.
  const bool timeline = !a.trace.empty() || !a.svg.empty() || a.ascii;
  const sim::SimResult r = sim::simulate(s, all_costs(a, s, layers), {.timeline = timeline});

  if (!a.csv.empty())
    schedule::write_csv_file(a.csv, a.csv_compute_only ? schedule::strip_comm(s) : s);
  if (!a.trace.empty()) write_text(a.trace, sim::chrome_trace(s, r), "Chrome trace");
  if (!a.svg.empty()) write_text(a.svg, sim::svg_timeline(s, r), "SVG timeline");

  if (a.json) {
    fmt::print("{}\n", result_json(s, r).dump(2));
    return;
  }
  const std::string costs_text =
      !a.profile.empty() ? fmt::format("profile {}", a.profile)
                         : fmt::format("per stage: F {} ms, B {} ms", a.forward_ms, a.backward_ms);
  print_summary(a, s, r, costs_text);
  if (a.ascii) fmt::print("\n{}", sim::ascii_timeline(s, r));
  for (const auto& [flag, path] :
       {std::pair{"csv", a.csv}, std::pair{"trace", a.trace}, std::pair{"svg", a.svg}})
    if (!path.empty()) fmt::print("wrote {} ({})\n", path, flag);
}

void add(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand(
      "schedule", "Generate, validate and simulate a pipeline schedule (or --compare them all)");
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  cmd->add_option("--kind", args->kind, "Schedule kind: " + kinds)->capture_default_str();
  cmd->add_option("--devices,-P", args->devices, "Devices in the pipeline")->capture_default_str();
  cmd->add_option("--microbatches,-B", args->microbatches, "Microbatches per iteration")
      ->capture_default_str();
  cmd->add_option("--chunks,-v", args->chunks, "Chunks per device (interleaved)")
      ->capture_default_str();
  cmd->add_option("--waves,-W", args->waves, "Waves (hanayo)")->capture_default_str();
  cmd->add_option("--group-size", args->group_size,
                  "Microbatches per chunk round (interleaved; Megatron's "
                  "microbatch_group_size_per_vp_stage; 0 = devices)");
  cmd->add_option("--profile", args->profile,
                  "Per-layer profile JSON; layers are balanced over the schedule's stages")
      ->check(CLI::ExistingFile);
  cmd->add_option("--forward-ms", args->forward_ms, "Forward time of one stage (1/P of the model)")
      ->capture_default_str();
  cmd->add_option("--backward-ms", args->backward_ms, "Backward time of one stage")
      ->capture_default_str();
  cmd->add_option("--backward-input-ms", args->backward_input_ms,
                  "I part of the backward of one stage (zero-bubble kinds; default half)");
  cmd->add_option("--backward-weight-ms", args->backward_weight_ms,
                  "W part of the backward of one stage (default half)");
  cmd->add_option("--activation-bytes", args->activation_bytes,
                  "Activation bytes one stage keeps per microbatch (M_a)")
      ->capture_default_str();
  cmd->add_option("--output-bytes", args->output_bytes,
                  "Bytes a stage sends to the next per microbatch")
      ->capture_default_str();
  cmd->add_option("--latency-ms", args->latency_ms, "Link latency")->capture_default_str();
  cmd->add_option("--bandwidth-gbps", args->bandwidth_gbps, "Link bandwidth (0 = infinite)")
      ->capture_default_str();
  cmd->add_option("--from-csv", args->from_csv,
                  "Load a custom schedule (PyTorch pipelining CSV) instead of generating one")
      ->check(CLI::ExistingFile);
  cmd->add_option("--csv", args->csv,
                  "Write the lowered schedule as CSV (PyTorch's compute_comms format)");
  cmd->add_flag("--compute-only", args->csv_compute_only,
                "With --csv: write only the compute actions (PyTorch's compute_only format)");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace (open in Perfetto)");
  cmd->add_option("--svg", args->svg, "Write an SVG timeline");
  cmd->add_flag("--ascii", args->ascii, "Print an ASCII timeline");
  cmd->add_flag("--compare", args->compare, "Every kind side by side on the same costs");
  cmd->add_flag("--json", args->json, "Print JSON instead of tables");
  cmd->add_option("--semantics", args->semantics,
                  "Communication semantics the validator checks: async (isend/irecv, the "
                  "runtime's), rendezvous (blocking sends) or synchronous")
      ->capture_default_str();
  cmd->add_option("--recv-lookahead", args->recv_lookahead,
                  "Post each receive this many compute actions ahead")
      ->capture_default_str();
  cmd->add_flag("--fsdp", args->fsdp,
                "Add PyTorch's FSDP actions (UNSHARD/RESHARD, 3 chunks unsharded per device) and "
                "REDUCE_GRAD after each chunk's last backward, so --csv writes what PyTorch's "
                "runtime dumps (compute_comms)");
  cmd->add_option("--unshard-ms", args->unshard_ms,
                  "Time of one UNSHARD all-gather (in the background; the chunk's compute waits)")
      ->capture_default_str();
  cmd->add_option("--reduce-grad-ms", args->reduce_grad_ms, "Time one REDUCE_GRAD holds its device")
      ->capture_default_str();
  cmd->add_option("--overlap-f-b", args->overlap_f_b,
                  "Share of the shorter action an OVERLAP_F_B pair hides: 0 = the pair takes "
                  "F + B, 1 = max(F, B)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([cmd, args] {
    reject_nan_values(*cmd);
    run(*args);
  });
}

const Registrar kRegistrar("schedule", 20, add);

}  // namespace
}  // namespace bw::cli
