// Lanes for spans that may overlap, so that each lane can be one track of a Chrome trace.
//
// Chrome's trace format (and Perfetto's importer) draws the complete events ("ph": "X") of one
// track (pid, tid) as a stack: two of them that overlap must nest, one inside the other. Compute
// on a device runs one action at a time and nests by itself; transfers in flight do not (a send
// posted before the previous one completed, a link busy with the next transfer while the last
// one's latency runs). assign_lanes spreads such spans over lanes in which no two overlap at all,
// first fit in order of start: the fewest lanes possible, the largest number of spans in flight
// at one time (an interval graph's greedy colouring is optimal).
//
// Pure; header-only; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

namespace bw {

// The lane of each span (begin, end), 0-based, in the order given. Two spans share a lane only
// when one ends no later than the other begins (touching spans share one).
template <typename T>
std::vector<int> assign_lanes(const std::vector<std::pair<T, T>>& spans) {
  std::vector<size_t> order(spans.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  std::vector<int> lane(spans.size(), 0);
  std::vector<T> lane_end;  // the end of the last span of each lane
  for (size_t i : order) {
    const auto [begin, end] = spans[i];
    size_t l = 0;
    while (l < lane_end.size() && lane_end[l] > begin) ++l;
    if (l == lane_end.size()) lane_end.push_back(end);
    lane_end[l] = std::max(end, begin);
    lane[i] = static_cast<int>(l);
  }
  return lane;
}

}  // namespace bw
