#include "core/trace_lanes.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace bw {
namespace {

// Random spans, against brute force: no two spans of one lane overlap, and there are exactly as
// many lanes as spans in flight at the busiest instant (no assignment can use fewer).
TEST(TraceLanes, LanesNeverOverlapAndAreAsFewAsTheMostSpansInFlight) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<std::pair<int, int>> spans;
    for (int i = 0; i < n; ++i) {
      const int begin = static_cast<int>(rng() % 100);
      spans.emplace_back(begin, begin + 1 + static_cast<int>(rng() % 30));
    }
    const std::vector<int> lane = assign_lanes(spans);
    ASSERT_EQ(lane.size(), spans.size());
    int lanes = 0;
    for (int i = 0; i < n; ++i) {
      lanes = std::max(lanes, lane[i] + 1);
      for (int j = i + 1; j < n; ++j) {
        if (lane[i] != lane[j]) continue;
        const bool apart = spans[i].second <= spans[j].first || spans[j].second <= spans[i].first;
        EXPECT_TRUE(apart) << "trial " << trial << ": [" << spans[i].first << ", "
                           << spans[i].second << ") and [" << spans[j].first << ", "
                           << spans[j].second << ") share lane " << lane[i];
      }
    }
    // The most spans [begin, end) holding one instant, over the instants where a span begins.
    int busiest = 0;
    for (const auto& [t, unused] : spans) {
      int in_flight = 0;
      for (const auto& [b, e] : spans) in_flight += b <= t && t < e;
      busiest = std::max(busiest, in_flight);
    }
    EXPECT_EQ(lanes, busiest) << "trial " << trial;
  }
}

TEST(TraceLanes, TouchingSpansShareALane) {
  EXPECT_EQ(assign_lanes<double>({{0, 1}, {1, 2}, {2, 2}, {2, 3}}), std::vector<int>({0, 0, 0, 0}));
  EXPECT_EQ(assign_lanes<double>({{0, 5}, {1, 2}, {2, 6}, {5, 7}}), std::vector<int>({0, 1, 1, 0}));
  EXPECT_TRUE(assign_lanes<double>({}).empty());
}

}  // namespace
}  // namespace bw
