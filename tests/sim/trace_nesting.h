// Test helper: every track of a Chrome trace nests.
//
// Chrome's trace format draws the complete events ("ph": "X") of one track (pid, tid) as a
// stack, so two of them that overlap must nest: an event that starts inside another one of its
// track ends inside it too. Perfetto's importer mis-draws or drops the rest. tracks_nest checks
// this for every track of a trace (the simulator's, `breakwater schedule --trace`, and the real
// run's, out_dir/trace.json) and names the first offenders. Times are compared to 1 ns, the
// resolution Perfetto keeps (the simulator's microseconds are doubles).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace bw::testing {

inline ::testing::AssertionResult tracks_nest(const nlohmann::json& trace) {
  constexpr double kEpsUs = 1e-3;
  struct Slice {
    double begin, end;
    std::string name;
  };
  std::map<std::pair<long long, long long>, std::vector<Slice>> tracks;
  std::map<std::pair<long long, long long>, std::string> names;
  size_t total = 0;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    const std::pair<long long, long long> key(e.value("pid", 0LL), e.value("tid", 0LL));
    if (ph == "M" && e.at("name") == "thread_name") names[key] = e.at("args").at("name");
    if (ph != "X") continue;
    const double ts = e.at("ts"), dur = e.at("dur");
    tracks[key].push_back({ts, ts + dur, e.at("name")});
    ++total;
  }
  size_t bad = 0;
  std::string first;
  for (auto& [key, slices] : tracks) {
    // By start, the longer first at a tie: it is the outer one.
    std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<const Slice*> open;  // the enclosing slices, innermost last
    for (const Slice& s : slices) {
      while (!open.empty() && open.back()->end <= s.begin + kEpsUs) open.pop_back();
      if (!open.empty() && s.end > open.back()->end + kEpsUs) {
        if (++bad <= 5) {
          const auto n = names.find(key);
          first += fmt::format(
              "\n  pid {} tid {} ({}): {} [{}, {}] starts inside {} [{}, {}] and ends after it",
              key.first, key.second, n != names.end() ? n->second : "unnamed", s.name, s.begin,
              s.end, open.back()->name, open.back()->begin, open.back()->end);
        }
        continue;  // drawn wrongly: it encloses nothing that follows
      }
      open.push_back(&s);
    }
  }
  if (total == 0) return ::testing::AssertionFailure() << "the trace has no complete events";
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << total
         << " complete events start inside another event of their track and end after it" << first;
}

}  // namespace bw::testing
