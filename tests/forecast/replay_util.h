// Hand-made traces, costs and checks shared by the replay tests.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "forecast/replay.h"

namespace bw::forecast {

// `n` nodes added at time 0, then the trace lines `rest`.
inline Trace nodes_then(int n, const std::string& rest) {
  std::string text;
  for (int i = 1; i <= n; ++i) text += fmt::format("0,add,node{}\n", i);
  return parse_trace(text + rest, "test");
}

// Reconfiguration 2 s; restart 3 s with checkpoints of 0.5 s every 2 steps; rebalance 1.5 s,
// restart 4 s and half the work useful for redundant computation.
inline PolicyCosts hand_costs() {
  PolicyCosts c;
  c.breakwater.fixed_reconfigure_ms = 2000;
  c.restart.restart_ms = 3000;
  c.restart.checkpoint_ms = 500;
  c.restart.checkpoint_every_steps = 2;
  c.redundant.rebalance_ms = 1500;
  c.redundant.restart_ms = 4000;
  c.redundant.useful_share = 0.5;
  return c;
}

// Every part of the breakdown as expected, and the parts adding up to the replayed duration.
inline void expect_breakdown(const ReplayResult& r, const TimeBreakdown& want) {
  EXPECT_NEAR(r.time.useful_ms, want.useful_ms, 1e-6);
  EXPECT_NEAR(r.time.redundant_ms, want.redundant_ms, 1e-6);
  EXPECT_NEAR(r.time.lost_ms, want.lost_ms, 1e-6);
  EXPECT_NEAR(r.time.checkpoint_ms, want.checkpoint_ms, 1e-6);
  EXPECT_NEAR(r.time.reconfigure_ms, want.reconfigure_ms, 1e-6);
  EXPECT_NEAR(r.time.restart_ms, want.restart_ms, 1e-6);
  EXPECT_NEAR(r.time.rebalance_ms, want.rebalance_ms, 1e-6);
  EXPECT_NEAR(r.time.stalled_ms, want.stalled_ms, 1e-6);
  EXPECT_NEAR(r.time.total_ms(), r.duration_ms, 1e-6);
}

}  // namespace bw::forecast
