#include "forecast/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/file_io.h"

namespace bw::forecast {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Uniform in [0, 1) from the top 53 bits: fixed by the standard, unlike
// std::uniform_real_distribution.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double exponential(std::mt19937_64& rng, double mean) {
  return -mean * std::log1p(-uniform01(rng));
}

}  // namespace

Trace parse_trace(std::string_view text, std::string_view source) {
  Trace trace;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    line = trim(line);
    if (line.empty()) continue;
    auto fail = [&](std::string_view why) {
      throw ConfigError(fmt::format("{} line {}: {} in '{}'; expected `time_ms,add|remove,nodeN`",
                                    source, line_no, why, line));
    };
    const auto c1 = line.find(',');
    const auto c2 = c1 == std::string_view::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string_view::npos) fail("fewer than 3 fields");
    if (line.find(',', c2 + 1) != std::string_view::npos) fail("more than 3 fields");
    const auto time_text = trim(line.substr(0, c1));
    const auto kind_text = trim(line.substr(c1 + 1, c2 - c1 - 1));
    const auto node = trim(line.substr(c2 + 1));
    double time_ms = 0;
    const auto [ptr, ec] =
        std::from_chars(time_text.data(), time_text.data() + time_text.size(), time_ms);
    if (ec != std::errc() || ptr != time_text.data() + time_text.size() || time_text.empty()) {
      fail(fmt::format("time '{}' is not a number", time_text));
    }
    if (!(time_ms >= 0) || !std::isfinite(time_ms)) {
      fail(fmt::format("time {} is negative", time_ms));
    }
    TraceEvent ev;
    ev.time_ms = time_ms;
    if (kind_text == "add") {
      ev.kind = EventKind::kAdd;
    } else if (kind_text == "remove") {
      ev.kind = EventKind::kRemove;
    } else {
      fail(fmt::format("event '{}' is neither add nor remove", kind_text));
    }
    if (node.empty()) fail("empty node name");
    ev.node = std::string(node);
    if (static_cast<long long>(trace.events.size()) >= kMaxTraceEvents) {
      fail(fmt::format("more than the limit of {} events", kMaxTraceEvents));
    }
    trace.events.push_back(std::move(ev));
  }
  std::stable_sort(trace.events.begin(), trace.events.end(),
                   [](const auto& a, const auto& b) { return a.time_ms < b.time_ms; });
  return trace;
}

Trace read_trace(const std::string& path) {
  return parse_trace(io::read_file(path, io::kMaxTableBytes, "failure trace"), path);
}

Trace delay_joins(const Trace& trace, double boot_ms) {
  if (!std::isfinite(boot_ms) || boot_ms < 0)
    throw ConfigError(fmt::format(
        "instance start-up delay must be a finite number of ms >= 0 (got {})", boot_ms));
  if (boot_ms == 0 || trace.events.empty()) return trace;
  const double t0 = trace.events.front().time_ms;
  // Per node: index in `out` of its addition that is still booting at the current time.
  std::unordered_map<std::string, std::size_t> booting;
  std::vector<TraceEvent> out;
  std::vector<char> dropped;
  for (const TraceEvent& e : trace.events) {
    if (e.kind == EventKind::kAdd) {
      TraceEvent moved = e;
      if (e.time_ms > t0) {
        moved.time_ms = e.time_ms + boot_ms;
        booting[e.node] = out.size();
      }
      out.push_back(moved);
      dropped.push_back(0);
      continue;
    }
    auto it = booting.find(e.node);
    if (it != booting.end() && out[it->second].time_ms > e.time_ms) {
      dropped[it->second] = 1;  // gone before it booted: neither event reaches the cluster
      booting.erase(it);
      continue;
    }
    if (it != booting.end()) booting.erase(it);
    out.push_back(e);
    dropped.push_back(0);
  }
  Trace result;
  for (std::size_t k = 0; k < out.size(); ++k)
    if (!dropped[k]) result.events.push_back(out[k]);
  std::stable_sort(result.events.begin(), result.events.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.time_ms < b.time_ms; });
  return result;
}

std::string format_trace(const Trace& trace) {
  std::string out;
  for (const auto& e : trace.events) {
    out += fmt::format("{:.0f},{},{}\n", e.time_ms, e.kind == EventKind::kAdd ? "add" : "remove",
                       e.node);
  }
  return out;
}

std::vector<std::string> live_nodes_at(const Trace& trace, double time_ms) {
  std::vector<std::string> live;
  for (const auto& e : trace.events) {
    if (e.time_ms > time_ms) break;
    const auto it = std::find(live.begin(), live.end(), e.node);
    if (e.kind == EventKind::kAdd) {
      if (it == live.end()) live.push_back(e.node);
    } else if (it != live.end()) {
      live.erase(it);
    }
  }
  return live;
}

int max_live_nodes(const Trace& trace) {
  std::unordered_set<std::string> live;
  std::size_t most = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const auto& e = trace.events[i];
    if (e.kind == EventKind::kAdd) {
      live.insert(e.node);
    } else {
      live.erase(e.node);
    }
    // Count after all events of one timestamp, as live_nodes_at does.
    if (i + 1 == trace.events.size() || trace.events[i + 1].time_ms != e.time_ms) {
      most = std::max(most, live.size());
    }
  }
  return static_cast<int>(most);
}

void validate_trace(const Trace& trace) {
  std::unordered_set<std::string> live;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const auto& e = trace.events[i];
    if (e.kind == EventKind::kAdd && !live.insert(e.node).second) {
      throw ConfigError(fmt::format("trace event {} (t={:.0f} ms) adds {} which is already live",
                                    i + 1, e.time_ms, e.node));
    }
    if (e.kind == EventKind::kRemove && live.erase(e.node) == 0) {
      throw ConfigError(fmt::format("trace event {} (t={:.0f} ms) removes {} which is not live",
                                    i + 1, e.time_ms, e.node));
    }
  }
}

Trace make_synthetic(const SyntheticSpec& spec) {
  if (spec.nodes <= 0) {
    throw ConfigError(fmt::format("synthetic trace needs nodes > 0 (got {})", spec.nodes));
  }
  if (!(spec.duration_ms > 0)) {
    throw ConfigError(
        fmt::format("synthetic trace needs a duration > 0 (got {} ms)", spec.duration_ms));
  }
  if (!(spec.interval_ms > 0)) {
    throw ConfigError(fmt::format(
        "synthetic trace needs a failure interval > 0 (got {} ms); raise --failure-every",
        spec.interval_ms));
  }
  if (spec.pattern == FailurePattern::kBursts &&
      (spec.burst_size <= 0 || spec.burst_window_ms < 0)) {
    throw ConfigError(fmt::format("bursts need --burst-size > 0 and a window >= 0 (got {}, {} ms)",
                                  spec.burst_size, spec.burst_window_ms));
  }
  if (spec.nodes > kMaxTraceNodes) {
    throw ConfigError(fmt::format("synthetic trace: {} nodes, more than the limit of {}",
                                  spec.nodes, kMaxTraceNodes));
  }
  // Bound the events before generating any: removals ~ duration / interval (x burst size).
  const double per_failure = spec.pattern == FailurePattern::kBursts ? spec.burst_size : 1.0;
  const double expected =
      spec.duration_ms / spec.interval_ms * per_failure * (spec.rejoin_after_ms > 0 ? 2.0 : 1.0);
  if (!(expected <= static_cast<double>(kMaxTraceEvents))) {
    throw ConfigError(fmt::format(
        "synthetic trace: about {:.3g} events over {:.3g} ms, more than the limit of {}; "
        "shorten --hours or lengthen the failure interval",
        expected, spec.duration_ms, kMaxTraceEvents));
  }
  std::mt19937_64 rng(spec.seed);
  Trace trace;
  std::vector<std::string> live;
  int next_id = 1;
  for (int i = 0; i < spec.nodes; ++i) {
    live.push_back(fmt::format("node{}", next_id++));
    trace.events.push_back({0.0, EventKind::kAdd, live.back()});
  }
  // Removal times first; rejoins are interleaved by replaying them in time order below.
  std::vector<double> removal_times;
  double t = 0;
  while (true) {
    if (spec.pattern == FailurePattern::kFixed) {
      t += spec.interval_ms;
    } else {
      t += exponential(rng, spec.interval_ms);
    }
    if (t >= spec.duration_ms) break;
    if (spec.pattern == FailurePattern::kBursts) {
      std::vector<double> burst;
      for (int k = 0; k < spec.burst_size; ++k) {
        burst.push_back(t + uniform01(rng) * spec.burst_window_ms);
      }
      std::sort(burst.begin(), burst.end());
      for (double b : burst) {
        if (b < spec.duration_ms) removal_times.push_back(b);
      }
    } else {
      removal_times.push_back(t);
    }
  }
  std::sort(removal_times.begin(), removal_times.end());
  // Pending rejoins (time, name), kept sorted.
  std::vector<std::pair<double, std::string>> rejoins;
  auto flush_rejoins = [&](double until) {
    while (!rejoins.empty() && rejoins.front().first <= until) {
      auto [when, name] = rejoins.front();
      rejoins.erase(rejoins.begin());
      live.push_back(name);
      trace.events.push_back({when, EventKind::kAdd, name});
    }
  };
  for (double when : removal_times) {
    flush_rejoins(when);
    if (static_cast<int>(live.size()) <= spec.min_nodes || live.empty()) continue;
    const auto pick = static_cast<std::size_t>(uniform01(rng) * static_cast<double>(live.size()));
    const std::string name = live[std::min(pick, live.size() - 1)];
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(std::min(pick, live.size() - 1)));
    trace.events.push_back({when, EventKind::kRemove, name});
    if (spec.rejoin_after_ms > 0 && when + spec.rejoin_after_ms < spec.duration_ms) {
      const std::pair<double, std::string> item{when + spec.rejoin_after_ms, name};
      rejoins.insert(
          std::upper_bound(rejoins.begin(), rejoins.end(), item,
                           [](const auto& a, const auto& b) { return a.first < b.first; }),
          item);
    }
  }
  flush_rejoins(spec.duration_ms);
  std::stable_sort(trace.events.begin(), trace.events.end(),
                   [](const auto& a, const auto& b) { return a.time_ms < b.time_ms; });
  return trace;
}

double parse_duration_ms(std::string_view text, std::string_view what) {
  const auto s = trim(text);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || s.empty()) {
    throw ConfigError(
        fmt::format("{}: '{}' is not a duration; write e.g. 10m, 90s, 2h or 500ms", what, text));
  }
  const std::string_view unit = s.substr(static_cast<std::size_t>(ptr - s.data()));
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1e3;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60e3;
  } else if (unit == "h") {
    scale = 3600e3;
  } else {
    throw ConfigError(
        fmt::format("{}: unknown unit '{}' in '{}'; use ms, s, m or h", what, unit, text));
  }
  if (!(value >= 0)) {
    throw ConfigError(fmt::format("{}: '{}' is negative", what, text));
  }
  return value * scale;
}

}  // namespace bw::forecast
