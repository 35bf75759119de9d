// The real run's trace: spans, their store message and the merged Chrome trace (trace_events.h).
#include "runtime/trace_events.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/json.h"
#include "core/trace_lanes.h"

namespace bw::runtime {

int64_t trace_time_us(std::chrono::steady_clock::time_point t) {
  using namespace std::chrono;
  // Read once per process, together: the wall clock aligns processes, the monotonic clock keeps
  // each process's spans in order whatever the wall clock does later.
  static const auto base = [] {
    const auto wall = system_clock::now();
    const auto mono = steady_clock::now();
    return std::make_pair(duration_cast<microseconds>(wall.time_since_epoch()).count(), mono);
  }();
  return base.first + duration_cast<microseconds>(t - base.second).count();
}

namespace {

// Communication tracks of a pipeline start at this tid (device tracks use 0.. and 100 + rank);
// thread_sort_index is kSortStride x the device track's tid for the device, and just above it
// for its sends' and receives' lanes, so that Perfetto draws them under their device.
constexpr int kCommTid = 1 << 21;
constexpr int kSortStride = 1000;

[[noreturn]] void bad_steps(const std::string& text, const std::string& why) {
  throw ConfigError(fmt::format(
      "config key train.trace_steps (\"{}\") {}; give steps of this run in 0-based numbers, "
      "e.g. \"10-11\" or \"3,5,10-11\", or \"\" for none",
      text, why));
}

int parse_step(std::string_view part, const std::string& text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 0) {
    bad_steps(text, fmt::format("has '{}', which is not a step number", part));
  }
  return v;
}

}  // namespace

std::vector<int> parse_trace_steps(const std::string& text, int steps) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::set<int> seen;
  std::string_view rest(text);
  while (true) {
    const auto comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    int lo = 0, hi = 0;
    if (const auto dash = part.find('-'); dash != std::string_view::npos && dash > 0) {
      lo = parse_step(part.substr(0, dash), text);
      hi = parse_step(part.substr(dash + 1), text);
      if (hi < lo)
        bad_steps(text, fmt::format("has the range {}-{}, which ends before it begins", lo, hi));
    } else {
      lo = hi = parse_step(part, text);
    }
    if (hi >= steps) {
      bad_steps(text, fmt::format("names step {}, but the run has steps 0..{} (train.steps = {})",
                                  hi, steps - 1, steps));
    }
    if (hi - lo + 1 > kMaxTracedSteps) {
      bad_steps(text, fmt::format("names more than {} steps", kMaxTracedSteps));
    }
    for (int s = lo; s <= hi; ++s) {
      if (!seen.insert(s).second) bad_steps(text, fmt::format("names step {} twice", s));
    }
    if (static_cast<int>(seen.size()) > kMaxTracedSteps) {
      bad_steps(text, fmt::format("names more than {} steps", kMaxTracedSteps));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  out.assign(seen.begin(), seen.end());
  return out;
}

nlohmann::json to_json(const RankTrace& trace) {
  nlohmann::json spans = nlohmann::json::array();
  for (const auto& s : trace.spans) spans.push_back({s.name, s.cat, s.begin_us, s.end_us});
  return {{"step", trace.step}, {"rank", trace.rank}, {"spans", std::move(spans)}};
}

RankTrace rank_trace_from_json(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  RankTrace t;
  t.step =
      static_cast<int>(json::get_int_in(doc, "step", where, 0, std::numeric_limits<int>::max()));
  t.rank = static_cast<int>(json::get_int_in(doc, "rank", where, 0, 1 << 20));
  if (!doc.contains("spans") || !doc.at("spans").is_array()) {
    throw ConfigError(fmt::format("{}: field 'spans' must be an array", where));
  }
  const auto& spans = doc.at("spans");
  if (spans.size() > static_cast<size_t>(kMaxTraceSpans)) {
    throw ConfigError(fmt::format("{}: {} spans, more than the {} a step may have", where,
                                  spans.size(), kMaxTraceSpans));
  }
  constexpr int64_t kMaxUs = int64_t{1} << 62;
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& s = spans[i];
    auto bad = [&](const char* why) {
      throw ConfigError(fmt::format("{}: span {} {}", where, i, why));
    };
    if (!s.is_array() || s.size() != 4) bad("must be [name, cat, begin_us, end_us]");
    if (!s[0].is_string() || !s[1].is_string()) bad("has a name or category that is not a string");
    if (!s[2].is_number_integer() || !s[3].is_number_integer())
      bad("has a time that is not an integer");
    TraceSpan span;
    span.name = s[0].get<std::string>();
    span.cat = s[1].get<std::string>();
    if (span.name.size() > 64 || span.cat.size() > 16)
      bad("has a name over 64 or a category over 16 bytes");
    // Unsigned and signed JSON integers alike: bounds checked on the value as an integer.
    const auto to_us = [&](const nlohmann::json& v) -> int64_t {
      if (v.is_number_unsigned()) {
        const auto u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(kMaxUs)) bad("has a time out of range");
        return static_cast<int64_t>(u);
      }
      const auto x = v.get<int64_t>();
      if (x < 0 || x > kMaxUs) bad("has a time out of range");
      return x;
    };
    span.begin_us = to_us(s[2]);
    span.end_us = to_us(s[3]);
    if (span.end_us < span.begin_us) bad("ends before it begins");
    t.spans.push_back(std::move(span));
  }
  return t;
}

std::string merged_chrome_trace(const std::vector<TracedStep>& steps, bool one_host) {
  using nlohmann::json;
  json events = json::array();
  int64_t origin = std::numeric_limits<int64_t>::max();
  if (!steps.empty()) {
    for (const auto& r : steps.front().ranks)
      for (const auto& s : r.spans) origin = std::min(origin, s.begin_us);
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_tids;
  // Sends and receives of every step, gathered per (pid, device track, direction) and spread
  // over lanes after the loop (core/trace_lanes.h), so that each track nests.
  struct CommSpan {
    const TraceSpan* span;
    int step, rank;
  };
  struct CommTrack {
    std::string device_label;  // "device 1 (rank 3, worker 2)"
    std::vector<CommSpan> spans;
  };
  std::map<std::tuple<int, int, int>, CommTrack> comm;  // (pid, device tid, 0 send / 1 receive)
  json step_info = json::array();
  for (const auto& st : steps) {
    // Track of each rank: the first rank of a (pipeline, device) is the device's track.
    std::map<int, std::pair<int, int>> track;  // rank -> (pid, tid)
    std::map<int, std::string> label;          // rank -> its device track's name
    std::set<std::pair<int, int>> taken;
    for (size_t r = 0; r < st.rank_at.size(); ++r) {
      const auto [p, d] = st.rank_at[r];
      const int pid = st.generation * 1000 + p;
      const int tid = taken.insert({pid, d}).second ? d : 100 + static_cast<int>(r);
      track[static_cast<int>(r)] = {pid, tid};
      const int worker = r < st.workers.size() ? st.workers[r] : -1;
      label[static_cast<int>(r)] = fmt::format("device {} (rank {}, worker {})", d, r, worker);
      if (named_pids.insert(pid).second) {
        const std::string kind =
            p < static_cast<int>(st.pipeline_kinds.size()) ? st.pipeline_kinds[p] : "?";
        events.push_back(
            {{"ph", "M"},
             {"pid", pid},
             {"name", "process_name"},
             {"args",
              {{"name", fmt::format("generation {} pipeline {} ({})", st.generation, p, kind)}}}});
        events.push_back({{"ph", "M"},
                          {"pid", pid},
                          {"name", "process_sort_index"},
                          {"args", {{"sort_index", pid}}}});
      }
      if (named_tids.insert({pid, tid}).second) {
        events.push_back({{"ph", "M"},
                          {"pid", pid},
                          {"tid", tid},
                          {"name", "thread_name"},
                          {"args", {{"name", label[static_cast<int>(r)]}}}});
        events.push_back({{"ph", "M"},
                          {"pid", pid},
                          {"tid", tid},
                          {"name", "thread_sort_index"},
                          {"args", {{"sort_index", kSortStride * tid}}}});
      }
    }
    for (const auto& rt : st.ranks) {
      auto it = track.find(rt.rank);
      if (it == track.end()) continue;  // a rank the layout does not have: nothing to draw
      const auto [pid, tid] = it->second;
      for (const auto& s : rt.spans) {
        if (s.cat == "comm") {
          const int direction = s.name.find("SEND") != std::string::npos ? 0 : 1;
          CommTrack& c = comm[{pid, tid, direction}];
          if (c.spans.empty()) c.device_label = label[rt.rank];
          c.spans.push_back({&s, st.step, rt.rank});
          continue;
        }
        events.push_back({{"ph", "X"},
                          {"pid", pid},
                          {"tid", tid},
                          {"name", s.name},
                          {"cat", s.cat},
                          {"ts", static_cast<double>(s.begin_us - origin)},
                          {"dur", static_cast<double>(s.end_us - s.begin_us)},
                          {"args", {{"step", st.step}, {"rank", rt.rank}}}});
      }
    }
    step_info.push_back({{"step", st.step},
                         {"generation", st.generation},
                         {"pipelines", st.pipeline_kinds.size()},
                         {"ranks", st.rank_at.size()},
                         {"missing_ranks", st.missing}});
  }
  // Communication tracks: tid kCommTid and up within each pid, in order of (device, direction,
  // lane), each named after its device and drawn just below it.
  std::map<int, int> next_tid;  // pid -> the next free communication tid
  for (const auto& [key, c] : comm) {
    const auto [pid, device_tid, direction] = key;
    std::vector<std::pair<int64_t, int64_t>> bounds;
    for (const auto& cs : c.spans) bounds.emplace_back(cs.span->begin_us, cs.span->end_us);
    const std::vector<int> lanes = assign_lanes(bounds);
    const int count = lanes.empty() ? 0 : *std::max_element(lanes.begin(), lanes.end()) + 1;
    const auto next = next_tid.try_emplace(pid, kCommTid).first;
    const int first = next->second;
    next->second += count;
    const std::string what = direction == 0 ? "sends" : "receives";
    for (int l = 0; l < count; ++l) {
      events.push_back(
          {{"ph", "M"},
           {"pid", pid},
           {"tid", first + l},
           {"name", "thread_name"},
           {"args",
            {{"name", l == 0 ? fmt::format("{} {}", c.device_label, what)
                             : fmt::format("{} {} #{}", c.device_label, what, l + 1)}}}});
      events.push_back(
          {{"ph", "M"},
           {"pid", pid},
           {"tid", first + l},
           {"name", "thread_sort_index"},
           {"args",
            {{"sort_index", kSortStride * device_tid + 1 + direction * (kSortStride / 2) +
                                std::min(l, kSortStride / 2 - 2)}}}});
    }
    for (size_t i = 0; i < c.spans.size(); ++i) {
      const CommSpan& cs = c.spans[i];
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", first + lanes[i]},
                        {"name", cs.span->name},
                        {"cat", cs.span->cat},
                        {"ts", static_cast<double>(cs.span->begin_us - origin)},
                        {"dur", static_cast<double>(cs.span->end_us - cs.span->begin_us)},
                        {"args", {{"step", cs.step}, {"rank", cs.rank}, {"device", device_tid}}}});
    }
  }
  json doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"source", "breakwater train"},
        {"steps", std::move(step_info)},
        {"origin_unix_us", origin},
        {"clock", one_host ? "one host: every rank reads the same wall clock (CLOCK_REALTIME, "
                             "advanced by CLOCK_MONOTONIC per process)"
                           : "several hosts: each host's wall clock (CLOCK_REALTIME, advanced by "
                             "CLOCK_MONOTONIC per process); ranks of different hosts are aligned "
                             "as well as the hosts' clocks agree (NTP/PTP)"}}}};
  return doc.dump();
}

}  // namespace bw::runtime
