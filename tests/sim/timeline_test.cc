// The event-driven simulator: timings, communication, memory and traffic on hand-checked cases.
#include "sim/timeline.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "schedule/generate.h"

namespace bw::sim {
namespace {

using schedule::Action;
using schedule::ActionKind;
using schedule::generate;
using schedule::lower;

TEST(Timeline, TwoDevicesOneMicrobatchPaysLatencyAndBandwidthBothWays) {
  // F0 (1) -> transfer -> F1 (1) -> B1 (2) -> transfer -> B0 (2).
  const auto s = generate({.kind = "gpipe", .devices = 2, .microbatches = 1});
  CostModel cm = uniform_costs(2, 1, 2, 100, 1e6);
  cm.link = {.latency_ms = 0.5, .bandwidth_gbps = 8};  // 1e6 bytes = 8e6 bits: 1 ms
  for (const auto& x : {s, lower(s)}) {
    const auto r = simulate(x, cm);
    EXPECT_DOUBLE_EQ(r.makespan_ms, 1 + 1.5 + 1 + 2 + 1.5 + 2);
    ASSERT_EQ(r.links.size(), 2u);
    EXPECT_EQ(r.links[0].src_device, 0);
    EXPECT_DOUBLE_EQ(r.links[0].bytes, 1e6);
    EXPECT_EQ(r.links[1].messages, 1);
    EXPECT_DOUBLE_EQ(r.bytes_sent, 2e6);
  }
}

TEST(Timeline, BytesPerLinkCountEveryMicrobatchBothDirections) {
  const int P = 4, B = 6;
  const auto s = generate({.kind = "1f1b", .devices = P, .microbatches = B});
  const auto r = simulate(lower(s), uniform_costs(P, 1, 2, 1, 10));
  ASSERT_EQ(r.links.size(), 2u * (P - 1));
  for (const auto& l : r.links) {
    EXPECT_EQ(std::abs(l.src_device - l.dst_device), 1);
    EXPECT_DOUBLE_EQ(l.bytes, 10.0 * B);
    EXPECT_EQ(l.messages, B);
  }
  // Hanayo turns locally: device 3 (P = 4) never sends to itself, and the wave sends each
  // microbatch 2W*P - 1 - (turns) times forward.
  const auto h = generate({.kind = "hanayo", .devices = 4, .microbatches = 4, .waves = 1});
  const auto rh = simulate(h, uniform_costs(h.num_chunks, 1, 2, 1, 1));
  double total = 0;
  for (const auto& l : rh.links) {
    EXPECT_NE(l.src_device, l.dst_device);
    total += l.bytes;
  }
  // 8 chunks: 7 hand-offs, one local (chunks 3,4 on device 3): 6 transfers each way per microbatch.
  EXPECT_DOUBLE_EQ(total, 4 * 6 * 2);
}

TEST(Timeline, TransfersOnOneLinkGoOneAtATime) {
  // GPipe, 2 devices, 3 microbatches, F = 1 ms, transfers of 2 ms serialisation each: the second
  // microbatch's activation waits for the first's to clear the link.
  const auto s = generate({.kind = "gpipe", .devices = 2, .microbatches = 3});
  CostModel cm = uniform_costs(2, 1, 1, 1, 2e6);
  cm.link.bandwidth_gbps = 8;  // 2e6 bytes: 2 ms
  const auto r = simulate(s, cm, {});
  double last_end = 0;
  for (const auto& t : r.transfers) {
    if (t.send.kind != ActionKind::SEND_F) continue;
    EXPECT_GE(t.start_ms, last_end - 1e-12);
    last_end = t.end_ms;
  }
  EXPECT_DOUBLE_EQ(last_end, 1 + 2 + 2 + 2);  // F0 ends at 1, three back-to-back transfers
}

TEST(Timeline, ComputeNeverOverlapsOnADeviceAndTakesItsCost) {
  for (const auto& kind : schedule::schedule_kinds()) {
    const auto s = lower(generate({.kind = kind, .devices = 4, .microbatches = 8}));
    const CostModel cm = stage_costs(s, {.forward_ms = 1.5, .backward_ms = 2.5});
    const auto r = simulate(s, cm);
    for (int d = 0; d < s.num_devices; ++d) {
      double free_at = 0;
      for (size_t k = 0; k < s.actions[d].size(); ++k) {
        const Action& a = s.actions[d][k];
        const auto& t = r.timing[d][k];
        if (!schedule::is_compute(a.kind)) continue;
        const auto& c = cm.chunks[a.chunk];
        const double cost = a.kind == ActionKind::F   ? c.forward_ms
                            : a.kind == ActionKind::B ? c.backward_ms
                            : a.kind == ActionKind::I ? c.backward_input_ms
                                                      : c.backward_weight_ms;
        EXPECT_NEAR(t.end_ms - t.start_ms, cost, 1e-9) << kind << " " << to_string(a);
        EXPECT_GE(t.start_ms, free_at - 1e-9) << kind << " " << to_string(a);
        free_at = t.end_ms;
      }
      EXPECT_LE(free_at, r.makespan_ms + 1e-9);
    }
  }
}

TEST(Timeline, ForwardStartsAfterThePreviousChunksForwardEnds) {
  const auto s = generate({.kind = "interleaved", .devices = 3, .microbatches = 6});
  const auto r = simulate(s, uniform_costs(s.num_chunks, 1, 2));
  std::map<std::pair<int, int>, std::pair<double, double>> fwd;
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < s.actions[d].size(); ++k)
      if (s.actions[d][k].kind == ActionKind::F)
        fwd[{s.actions[d][k].chunk, s.actions[d][k].microbatch}] = {r.timing[d][k].start_ms,
                                                                    r.timing[d][k].end_ms};
  for (const auto& [key, span] : fwd) {
    if (key.first == 0) continue;
    const double prev_end = fwd[std::make_pair(key.first - 1, key.second)].second;
    EXPECT_GE(span.first, prev_end - 1e-12);
  }
}

TEST(Timeline, SplitBackwardHoldsActivationsUntilW) {
  // One device, one microbatch: F I W. Memory held from F until W ends.
  schedule::Schedule s;
  s.kind = "custom";
  s.num_devices = 1;
  s.num_chunks = 1;
  s.num_microbatches = 2;
  s.chunk_device = {0};
  s.actions = {{{ActionKind::F, 0, 0},
                {ActionKind::F, 0, 1},
                {ActionKind::I, 0, 0},
                {ActionKind::I, 0, 1},
                {ActionKind::W, 0, 0},
                {ActionKind::W, 0, 1}}};
  const auto r = simulate(s, uniform_costs(1, 1, 2, 5));
  EXPECT_DOUBLE_EQ(r.peak_activation_bytes[0], 10);
  EXPECT_DOUBLE_EQ(r.activation_unit_bytes, 5);
  ASSERT_FALSE(r.activation[0].empty());
  EXPECT_DOUBLE_EQ(r.activation[0].back().bytes, 0);
  EXPECT_DOUBLE_EQ(r.makespan_ms, 1 + 1 + 1 + 1 + 1 + 1);
}

TEST(Timeline, ADeadlockedScheduleThrows) {
  auto s = generate({.kind = "1f1b", .devices = 2, .microbatches = 2});
  std::swap(s.actions[0][0], s.actions[0][2]);  // 0B0 first: waits forever for 1B0
  EXPECT_THROW(simulate(s, uniform_costs(2, 1, 2)), schedule::ScheduleError);
}

TEST(Timeline, MismatchedCostModelIsAConfigError) {
  const auto s = generate({.kind = "1f1b", .devices = 2, .microbatches = 2});
  EXPECT_THROW(simulate(s, uniform_costs(3, 1, 2)), ConfigError);
}

TEST(Timeline, InterNodeLinksApplyAcrossNodes) {
  const auto s = generate({.kind = "gpipe", .devices = 4, .microbatches = 1});
  CostModel cm = uniform_costs(4, 1, 1, 1, 0);
  cm.devices_per_node = 2;
  cm.inter_node_link.latency_ms = 10;  // only the 1 <-> 2 hop crosses nodes
  const auto r = simulate(s, cm);
  EXPECT_DOUBLE_EQ(r.makespan_ms, 8 + 20);
}

TEST(Timeline, SummaryOnlyModeAgreesWithTheFullTimeline) {
  const auto s = generate({.kind = "hanayo", .devices = 4, .microbatches = 12, .waves = 2});
  const auto cm = stage_costs(s, {});
  const auto full = simulate(s, cm);
  const auto fast = simulate(s, cm, {.timeline = false});
  EXPECT_DOUBLE_EQ(full.makespan_ms, fast.makespan_ms);
  EXPECT_EQ(full.peak_activation_bytes, fast.peak_activation_bytes);
  EXPECT_TRUE(fast.timing.empty());
  EXPECT_TRUE(fast.transfers.empty());
}

// An OVERLAP_F_B pair is one interval: it starts when both inputs are there and lasts
// F + B - overlap * min(F, B). Device 1's pair (1F1;1B0) on F = 1, B = 2 per chunk: 1F0 runs
// [1, 2); 1B0 needs nothing remote (chunk 1 is last) and 1F1 needs 0F1 (ends at 2), so the pair
// starts at 2.
TEST(Timeline, OverlappedPairRunsAtOnce) {
  std::istringstream in("0F0,0F1,0B0,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n");
  const schedule::Schedule s = schedule::read_csv(in);
  for (double overlap : {0.0, 0.5, 1.0}) {
    CostModel costs = uniform_costs(2, 1, 2);
    costs.overlap_f_b = overlap;
    const SimResult r = simulate(s, costs);
    const double pair = 3 - overlap * 1;
    EXPECT_DOUBLE_EQ(r.timing[1][2].start_ms, 2);
    EXPECT_DOUBLE_EQ(r.timing[1][2].end_ms, 2 + pair);
    EXPECT_DOUBLE_EQ(r.timing[1][3].end_ms, 2 + pair);  // both end together
    // 0B0 gets its gradient when the pair ends; 1B1 follows the pair.
    EXPECT_DOUBLE_EQ(r.timing[0][2].start_ms, 2 + pair);
    EXPECT_DOUBLE_EQ(r.makespan_ms, 2 + pair + 2 + 2);
    EXPECT_DOUBLE_EQ(r.busy_ms[1], 1 + pair + 2);
  }
}

// UNSHARD runs in the background and gates its chunk's next compute; REDUCE_GRAD holds the
// device; RESHARD is free. One device, F = 1, B = 2.
TEST(Timeline, ChunkActionsCostWhatTheyAreGiven) {
  std::istringstream in("0UNSHARD,0F0,0B0,0REDUCE_GRAD,0RESHARD\n");
  const schedule::Schedule s = schedule::read_csv(in);
  CostModel costs = uniform_costs(1, 1, 2);
  EXPECT_DOUBLE_EQ(simulate(s, costs).makespan_ms, 3);  // zero cost unless given
  costs.chunks[0].unshard_ms = 5;
  costs.chunks[0].reduce_grad_ms = 4;
  const SimResult r = simulate(s, costs);
  EXPECT_DOUBLE_EQ(r.timing[0][1].start_ms, 5);
  EXPECT_DOUBLE_EQ(r.makespan_ms, 5 + 3 + 4);
  EXPECT_DOUBLE_EQ(r.busy_ms[0], 3);
}

}  // namespace
}  // namespace bw::sim
