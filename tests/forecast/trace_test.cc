// Trace reading and synthetic traces: malformed lines are named, synthetic traces have the
// counts their pattern implies and depend only on the seed.
#include "forecast/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"

namespace bw::forecast {
namespace {

TEST(Trace, ParsesSortsAndRoundTrips) {
  const auto t =
      parse_trace("0,add,node1\n0,add,node2\n\n120000,remove,node1\r\n60000,add,node3\n", "t.csv");
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[2].time_ms, 60000);
  EXPECT_EQ(t.events[2].node, "node3");
  EXPECT_EQ(t.events[3].kind, EventKind::kRemove);
  const auto again = parse_trace(format_trace(t), "again");
  ASSERT_EQ(again.events.size(), t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(again.events[i].time_ms, t.events[i].time_ms) << i;
    EXPECT_EQ(again.events[i].kind, t.events[i].kind) << i;
    EXPECT_EQ(again.events[i].node, t.events[i].node) << i;
  }
  EXPECT_EQ(live_nodes_at(t, 70000), (std::vector<std::string>{"node1", "node2", "node3"}));
  EXPECT_EQ(live_nodes_at(t, 120000), (std::vector<std::string>{"node2", "node3"}));
  EXPECT_EQ(max_live_nodes(t), 3);
}

TEST(Trace, MaxLiveNodesMatchesLiveNodesAtEveryEvent) {
  // Oracle: the slow path, live_nodes_at after every event time.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    SyntheticSpec s;
    s.pattern = FailurePattern::kBursts;
    s.nodes = 20;
    s.interval_ms = 900e3;
    s.rejoin_after_ms = 1200e3;
    s.seed = seed;
    const auto t = make_synthetic(s);
    std::size_t most = 0;
    for (const auto& e : t.events) most = std::max(most, live_nodes_at(t, e.time_ms).size());
    EXPECT_EQ(max_live_nodes(t), static_cast<int>(most)) << "seed " << seed;
  }
  EXPECT_EQ(max_live_nodes(Trace{}), 0);
  // Swapping a node at one timestamp never counts both.
  EXPECT_EQ(max_live_nodes(parse_trace("0,add,a\n5,remove,a\n5,add,b\n", "swap")), 1);
}

struct BadLine {
  std::string text;
  std::string expect;  // part of the message
};

class MalformedTrace : public ::testing::TestWithParam<BadLine> {};

TEST_P(MalformedTrace, NamesTheLine) {
  // The bad line is always the third line.
  const std::string text = "0,add,node1\n10,add,node2\n" + GetParam().text + "\n20,add,node9\n";
  try {
    parse_trace(text, "bad.csv");
    FAIL() << "accepted '" << GetParam().text << "'";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.csv line 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find(GetParam().expect), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Lines, MalformedTrace,
                         ::testing::Values(BadLine{"10,add", "fewer than 3 fields"},
                                           BadLine{"10,add,node3,x", "more than 3 fields"},
                                           BadLine{"ten,add,node3", "not a number"},
                                           BadLine{"-5,add,node3", "negative"},
                                           BadLine{"10,fail,node3", "neither add nor remove"},
                                           BadLine{"10,remove,", "empty node name"},
                                           BadLine{"12x,add,node3", "not a number"}));

TEST(Trace, ReadsFilesAndNamesMissingOnes) {
  const std::string path = ::testing::TempDir() + "/forecast_trace_test.csv";
  {
    std::ofstream out(path);
    out << "0,add,a\n5,remove,a\n";
  }
  EXPECT_EQ(read_trace(path).events.size(), 2u);
  EXPECT_THROW(read_trace(path + ".missing"), ConfigError);
}

TEST(Trace, ValidateRejectsInconsistentMembership) {
  EXPECT_NO_THROW(validate_trace(parse_trace("0,add,a\n1,remove,a\n2,add,a\n", "ok")));
  EXPECT_THROW(validate_trace(parse_trace("0,add,a\n1,add,a\n", "dup")), ConfigError);
  EXPECT_THROW(validate_trace(parse_trace("0,add,a\n1,remove,b\n", "ghost")), ConfigError);
}

TEST(Duration, ParsesUnits) {
  EXPECT_DOUBLE_EQ(parse_duration_ms("10m", "x"), 600e3);
  EXPECT_DOUBLE_EQ(parse_duration_ms("90s", "x"), 90e3);
  EXPECT_DOUBLE_EQ(parse_duration_ms("2h", "x"), 7200e3);
  EXPECT_DOUBLE_EQ(parse_duration_ms("1500ms", "x"), 1500);
  EXPECT_DOUBLE_EQ(parse_duration_ms("2.5", "x"), 2500);
  EXPECT_THROW(parse_duration_ms("10 parsecs", "x"), ConfigError);
  EXPECT_THROW(parse_duration_ms("m", "x"), ConfigError);
}

int count(const Trace& t, EventKind k) {
  int n = 0;
  for (const auto& e : t.events) n += e.kind == k;
  return n;
}

class FixedSynthetic : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(FixedSynthetic, RemovesOnePerIntervalDownToTheFloor) {
  const auto [nodes, minutes, min_nodes] = GetParam();
  SyntheticSpec s;
  s.pattern = FailurePattern::kFixed;
  s.nodes = nodes;
  s.interval_ms = minutes * 60e3;
  s.duration_ms = 12 * 3600e3;
  s.min_nodes = min_nodes;
  const auto t = make_synthetic(s);
  validate_trace(t);
  // Removal times are k * interval for k = 1.. while below the duration.
  const int slots = static_cast<int>(std::ceil(s.duration_ms / s.interval_ms)) - 1;
  const int expect = std::min(slots, std::max(0, nodes - min_nodes));
  EXPECT_EQ(count(t, EventKind::kRemove), expect);
  EXPECT_EQ(count(t, EventKind::kAdd), nodes);
  int k = 0;
  for (const auto& e : t.events) {
    if (e.kind == EventKind::kRemove) EXPECT_DOUBLE_EQ(e.time_ms, ++k * s.interval_ms);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, FixedSynthetic,
                         ::testing::Combine(::testing::Values(1, 8, 30, 1024),
                                            ::testing::Values(5, 10, 60), ::testing::Values(0, 4)));

TEST(Synthetic, PoissonCountMatchesRateOverSeeds) {
  // Over 200 seeds of 12 h at one failure per 10 min the mean count is 72 (72 * 200 = 14400
  // draws); its standard error is sqrt(72/200) = 0.6, so 3 is a wide margin.
  double total = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    SyntheticSpec s;
    s.pattern = FailurePattern::kPoisson;
    s.nodes = 1000;
    s.seed = seed;
    const auto t = make_synthetic(s);
    validate_trace(t);
    total += count(t, EventKind::kRemove);
  }
  EXPECT_NEAR(total / 200, 72.0, 3.0);
}

TEST(Synthetic, SameSeedSameTraceOtherSeedOtherTrace) {
  SyntheticSpec s;
  s.pattern = FailurePattern::kBursts;
  s.nodes = 64;
  s.seed = 7;
  const auto a = format_trace(make_synthetic(s));
  EXPECT_EQ(a, format_trace(make_synthetic(s)));
  s.seed = 8;
  EXPECT_NE(a, format_trace(make_synthetic(s)));
}

TEST(Synthetic, BurstsRemoveGroupsWithinTheWindow) {
  SyntheticSpec s;
  s.pattern = FailurePattern::kBursts;
  s.nodes = 4096;
  s.burst_size = 5;
  s.burst_window_ms = 20e3;
  s.interval_ms = 3600e3;
  s.seed = 3;
  const auto t = make_synthetic(s);
  validate_trace(t);
  std::vector<double> removals;
  for (const auto& e : t.events) {
    if (e.kind == EventKind::kRemove) removals.push_back(e.time_ms);
  }
  ASSERT_GT(removals.size(), 0u);
  // Bursts an hour apart on average and 20 s wide: cluster removals by gaps > 20 s.
  std::vector<int> sizes{1};
  for (std::size_t i = 1; i < removals.size(); ++i) {
    if (removals[i] - removals[i - 1] > s.burst_window_ms) {
      sizes.push_back(1);
    } else {
      ++sizes.back();
    }
  }
  int full = 0;
  for (int n : sizes) full += n % 5 == 0;
  // Two bursts can overlap or be cut by the horizon, rarely: most groups have exactly 5.
  EXPECT_GE(full, static_cast<int>(sizes.size()) - 1) << "groups: " << sizes.size();
}

TEST(Synthetic, RejoinsBringNodesBack) {
  SyntheticSpec s;
  s.nodes = 4;
  s.interval_ms = 60e3;
  s.duration_ms = 600e3;
  s.rejoin_after_ms = 90e3;
  const auto t = make_synthetic(s);
  validate_trace(t);
  EXPECT_GT(count(t, EventKind::kAdd), 4);
  for (const auto& e : t.events) EXPECT_LT(e.time_ms, s.duration_ms);
}

TEST(Synthetic, RejectsBadSpecs) {
  SyntheticSpec s;
  s.nodes = 0;
  EXPECT_THROW(make_synthetic(s), ConfigError);
  s.nodes = 4;
  s.interval_ms = 0;
  EXPECT_THROW(make_synthetic(s), ConfigError);
}

}  // namespace
}  // namespace bw::forecast
