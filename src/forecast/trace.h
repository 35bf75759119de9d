// Membership traces: the cluster's node additions and removals over time.
//
// File format (the one public spot-instance traces use, e.g. Bamboo's and Oobleck's artifacts):
// one event a line, `time_ms,add|remove,nodeN`, no header. Blank lines are skipped. A malformed
// line is a ConfigError naming the line number. Events are kept sorted by time (stable, so the
// file order of simultaneous events is preserved).
//
// Synthetic traces come from a seed: removals at a fixed interval, as a Poisson process at a
// rate, or in correlated bursts (several nodes lost within a short window, as when a rack or a
// spot-instance pool is reclaimed). Removed nodes can come back after a delay, which exercises
// joins. The generator uses its own uniform/exponential draws on top of std::mt19937_64, whose
// output the standard fixes, so a seed gives the same trace on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bw::forecast {

enum class EventKind { kAdd, kRemove };

struct TraceEvent {
  double time_ms = 0;
  EventKind kind = EventKind::kAdd;
  std::string node;
};

struct Trace {
  std::vector<TraceEvent> events;  // sorted by time_ms
};

// Parses trace text; `source` names the input in error messages ("trace.csv").
Trace parse_trace(std::string_view text, std::string_view source);
// Reads and parses a trace file; a missing file is a ConfigError naming the path.
Trace read_trace(const std::string& path);
// The text form, one event a line (parse_trace(format_trace(t)) == t up to time rounding to ms).
std::string format_trace(const Trace& trace);

// Instance start-up: a node added after the first timestamp becomes usable `boot_ms` later (its
// addition moves by that much); one removed before then never becomes usable (its addition and
// that removal are dropped). Events at the first timestamp (the initial membership) and every
// other removal keep their times; the result is sorted by time, simultaneous events in trace
// order. boot_ms must be finite and >= 0 (ConfigError); 0 returns the trace unchanged.
Trace delay_joins(const Trace& trace, double boot_ms);

// The nodes alive after applying every event with time <= time_ms, in order of addition.
std::vector<std::string> live_nodes_at(const Trace& trace, double time_ms);
// The most nodes live at once over the whole trace (O(events)).
int max_live_nodes(const Trace& trace);
// Checks that removals name live nodes and additions name absent ones; ConfigError otherwise.
void validate_trace(const Trace& trace);

enum class FailurePattern { kFixed, kPoisson, kBursts };

// Limits of make_synthetic, checked before anything is generated (docs/forecast.md).
inline constexpr int kMaxTraceNodes = 100000;
// Events of one trace (read or synthetic); replay time grows with about the square of the
// events (~35 s for 300 k events on one core), so more would run for hours.
inline constexpr long long kMaxTraceEvents = 1'000'000;

struct SyntheticSpec {
  FailurePattern pattern = FailurePattern::kFixed;
  int nodes = 32;  // added at time 0, named node1..nodeN
  double duration_ms = 12 * 3600e3;
  double interval_ms = 600e3;     // fixed: time between removals; poisson/bursts: mean gap
  int burst_size = 4;             // bursts: nodes removed per burst
  double burst_window_ms = 30e3;  // bursts: removals of one burst spread over this window
  double rejoin_after_ms = 0;     // > 0: a removed node comes back this long after leaving
  int min_nodes = 0;              // never remove below this many live nodes
  std::uint64_t seed = 1;
};

// A synthetic trace; ConfigError for non-positive sizes or intervals, or beyond the limits above.
Trace make_synthetic(const SyntheticSpec& spec);

// "10m", "90s", "2h", "1500ms" or a bare number of seconds, in milliseconds; ConfigError naming
// `what` otherwise.
double parse_duration_ms(std::string_view text, std::string_view what);

}  // namespace bw::forecast
