#include "schedule/generate.h"

#include <fmt/format.h>

#include "core/error.h"
#include "schedule/generators.h"

namespace bw::schedule {

namespace {

// Keeps a generated schedule's size reasonable (a typo like --microbatches 1e9 is an error, not an
// out-of-memory).
constexpr long long kMaxComputeActions = 16LL << 20;  // docs/schedules.md, "Limits"

bool known_kind(const std::string& kind) {
  for (const auto& k : schedule_kinds())
    if (k == kind) return true;
  return false;
}

}  // namespace

std::vector<std::string> schedule_kinds() {
  return {"gpipe", "1f1b", "interleaved", "chimera", "hanayo", "zb-h1", "zb-v"};
}

void check_spec(const ScheduleSpec& spec) {
  if (!known_kind(spec.kind)) {
    std::string kinds;
    for (const auto& k : schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
    throw ConfigError(
        fmt::format("unknown schedule kind '{}'; choose one of: {}", spec.kind, kinds));
  }
  if (spec.devices < 1)
    throw ConfigError(fmt::format("{} needs devices >= 1 (got {})", spec.kind, spec.devices));
  if (spec.microbatches < 1)
    throw ConfigError(
        fmt::format("{} needs microbatches >= 1 (got {})", spec.kind, spec.microbatches));
  if (spec.kind == "interleaved") {
    if (spec.chunks_per_device < 1)
      throw ConfigError(
          fmt::format("interleaved needs chunks per device (v) >= 1 (got {}); raise --chunks",
                      spec.chunks_per_device));
    if (spec.microbatches < spec.devices)
      throw ConfigError(fmt::format(
          "interleaved needs microbatches ({}) >= devices ({}), as Megatron does; raise "
          "--microbatches",
          spec.microbatches, spec.devices));
    const int G = spec.group_size == 0 ? spec.devices : spec.group_size;
    if (G < spec.devices || G > spec.microbatches)
      throw ConfigError(fmt::format(
          "interleaved needs devices ({}) <= group size ({}) <= microbatches ({}), as Megatron's "
          "microbatch_group_size_per_vp_stage",
          spec.devices, G, spec.microbatches));
    const int rest = spec.microbatches % G;
    if (rest != 0 && rest < spec.devices)
      throw ConfigError(fmt::format(
          "interleaved: microbatches ({}) mod group size ({}) is {}, which is neither 0 nor >= "
          "devices ({}); as in Megatron, the last group would wait on itself (dependency bubbles "
          "or a deadlock). Use a multiple of {} microbatches, or a group size that divides {} or "
          "leaves a remainder >= {} (--group-size)",
          spec.microbatches, G, rest, spec.devices, G, spec.microbatches, spec.devices));
  }
  if (spec.kind == "hanayo" && spec.waves < 1)
    throw ConfigError(
        fmt::format("hanayo needs waves (W) >= 1 (got {}); raise --waves", spec.waves));
  if (spec.kind == "chimera" && spec.devices % 2 != 0)
    throw ConfigError(fmt::format(
        "chimera needs an even number of devices (got {}): its two pipelines run in opposite "
        "directions and meet in the middle",
        spec.devices));
  const long long compute = 3LL * num_chunks(spec) * spec.microbatches;
  if (compute > kMaxComputeActions)
    throw ConfigError(fmt::format(
        "{} with {} devices, {} microbatches and {} chunks is too large ({} actions, at most {})",
        spec.kind, spec.devices, spec.microbatches, num_chunks(spec), compute, kMaxComputeActions));
}

int num_chunks(const ScheduleSpec& spec) {
  const long long P = spec.devices;
  long long n = P;
  if (spec.kind == "interleaved") n = P * spec.chunks_per_device;
  if (spec.kind == "chimera" || spec.kind == "zb-v") n = 2 * P;
  if (spec.kind == "hanayo") n = 2LL * spec.waves * P;
  if (n > (1 << 24)) throw ConfigError(fmt::format("{} would need {} chunks", spec.kind, n));
  return static_cast<int>(n);
}

std::vector<int> chunk_placement(const ScheduleSpec& spec) {
  check_spec(spec);
  const int P = spec.devices, n = num_chunks(spec);
  if (spec.kind == "hanayo" || spec.kind == "zb-v") return detail::wave_placement(P, n);
  if (spec.kind == "chimera") {
    std::vector<int> out(n);
    for (int s = 0; s < P; ++s) {
      out[s] = s;              // down: stage s on device s
      out[P + s] = P - 1 - s;  // up: stage s on device P-1-s
    }
    return out;
  }
  return detail::loop_placement(P, n);
}

std::vector<int> chunk_stages(const ScheduleSpec& spec) {
  const int n = num_chunks(spec);
  std::vector<int> out(n);
  for (int c = 0; c < n; ++c) out[c] = spec.kind == "chimera" ? c % spec.devices : c;
  return out;
}

Schedule generate(const ScheduleSpec& spec) {
  check_spec(spec);
  const int P = spec.devices, B = spec.microbatches;
  if (spec.kind == "gpipe") return detail::make_gpipe(P, B);
  if (spec.kind == "1f1b") return detail::make_1f1b(P, B);
  if (spec.kind == "interleaved")
    return detail::make_interleaved(P, B, spec.chunks_per_device,
                                    spec.group_size == 0 ? P : spec.group_size);
  if (spec.kind == "chimera") return detail::make_chimera(P, B);
  if (spec.kind == "hanayo") return detail::make_hanayo(P, B, spec.waves);
  if (spec.kind == "zb-h1") return detail::make_zb_h1(P, B);
  return detail::make_zb_v(P, B);
}

namespace detail {

Schedule empty_schedule(std::string kind, int devices, int microbatches,
                        std::vector<int> placement) {
  Schedule s;
  s.kind = std::move(kind);
  s.num_devices = devices;
  s.num_chunks = static_cast<int>(placement.size());
  s.num_microbatches = microbatches;
  s.chunk_device = std::move(placement);
  s.actions.resize(devices);
  const size_t per_device = 3 * static_cast<size_t>(s.num_chunks) * microbatches / devices + 4;
  for (auto& list : s.actions) list.reserve(per_device);
  return s;
}

std::vector<int> loop_placement(int devices, int chunks) {
  std::vector<int> out(chunks);
  for (int c = 0; c < chunks; ++c) out[c] = c % devices;
  return out;
}

std::vector<int> wave_placement(int devices, int chunks) {
  std::vector<int> out(chunks);
  for (int c = 0; c < chunks; ++c) {
    const int r = c % devices;
    out[c] = (c / devices) % 2 == 0 ? r : devices - 1 - r;
  }
  return out;
}

}  // namespace detail
}  // namespace bw::schedule
