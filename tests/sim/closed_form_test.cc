// The simulator against closed forms, exact for uniform costs, over grids of P, B, v and W.
//
// Uniform costs: every chunk of a schedule with S chunks per replica costs T * P / S, so every
// kind runs the same model (a 1F1B stage costs T_F forward, T_B backward). Bubble ratios are
// checked to 1e-9; memory in units of M_a (one stage's activations per microbatch) exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "schedule/generate.h"
#include "sim/timeline.h"

namespace bw::sim {
namespace {

using schedule::ScheduleSpec;

SimResult run(const ScheduleSpec& spec, double tf = 1, double tb = 2, bool lowered = false) {
  auto s = schedule::generate(spec);
  if (lowered) s = schedule::lower(s);
  return simulate(s, stage_costs(s, {.forward_ms = tf, .backward_ms = tb}));
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(ClosedForm, GPipeAndOneFOneBBubbleIsPMinusOneOverBPlusPMinusOne) {
  for (const char* kind : {"gpipe", "1f1b"})
    for (int P = 1; P <= 8; ++P)
      for (int B = 1; B <= 24; ++B)
        for (double tb : {1.0, 2.0, 3.0}) {
          const auto r = run({.kind = kind, .devices = P, .microbatches = B}, 1, tb);
          const double want = (P - 1.0) / (B + P - 1.0);
          ASSERT_NEAR(r.overall_bubble_ratio, want, 1e-9)
              << kind << " P=" << P << " B=" << B << " T_B=" << tb;
          for (int d = 0; d < P; ++d) ASSERT_NEAR(r.bubble_ratio[d], want, 1e-9);
          ASSERT_NEAR(r.makespan_ms, (B + P - 1) * (1 + tb), 1e-9);
        }
}

TEST(ClosedForm, LoweredSchedulesTakeTheSameTimeWithFreeLinks) {
  for (const auto& kind : schedule::schedule_kinds())
    for (int P : {2, 4, 5})
      for (int B : {P, 2 * P + 2}) {
        ScheduleSpec spec{.kind = kind, .devices = P, .microbatches = B};
        if (kind == "chimera" && P % 2) continue;
        if (kind == "interleaved") spec.group_size = B % P == 0 ? 0 : B;
        EXPECT_NEAR(run(spec, 1, 2, true).makespan_ms, run(spec).makespan_ms, 1e-9)
            << kind << " P=" << P << " B=" << B;
      }
}

TEST(ClosedForm, InterleavedBubbleIsPMinusOneOverVBPlusPMinusOne) {
  for (int P = 1; P <= 8; ++P)
    for (int v = 1; v <= 4; ++v)
      for (int B = P; B <= 4 * P; B += P) {
        const auto r =
            run({.kind = "interleaved", .devices = P, .microbatches = B, .chunks_per_device = v});
        ASSERT_NEAR(r.overall_bubble_ratio, (P - 1.0) / (v * B + P - 1.0), 1e-9)
            << "P=" << P << " v=" << v << " B=" << B;
      }
}

TEST(ClosedForm, OneFOneBPeakMemoryIsPMinusDUnitsAndGPipeIsB) {
  for (int P = 1; P <= 8; ++P)
    for (int B = P; B <= 3 * P; ++B) {
      const auto f = run({.kind = "1f1b", .devices = P, .microbatches = B});
      const auto g = run({.kind = "gpipe", .devices = P, .microbatches = B});
      for (int d = 0; d < P; ++d) {
        EXPECT_DOUBLE_EQ(f.peak_activation_units[d], P - d) << "1F1B P=" << P << " B=" << B;
        EXPECT_DOUBLE_EQ(g.peak_activation_units[d], B) << "GPipe P=" << P << " B=" << B;
      }
      EXPECT_DOUBLE_EQ(f.peak_activation_units.front(), P);  // P * M_a on device 0
      EXPECT_DOUBLE_EQ(f.peak_activation_units.back(), 1);   // M_a on the last
    }
}

// Hanayo with B = P: device d peaks at ((2W-1)P + 1 + d) / (2W) M_a, exactly.
TEST(ClosedForm, HanayoPeakMemoryWithBEqualsP) {
  for (int P = 1; P <= 8; ++P)
    for (int W = 1; W <= 4; ++W) {
      const auto r = run({.kind = "hanayo", .devices = P, .microbatches = P, .waves = W});
      for (int d = 0; d < P; ++d)
        EXPECT_NEAR(r.peak_activation_units[d], ((2.0 * W - 1) * P + 1 + d) / (2.0 * W), 1e-12)
            << "P=" << P << " W=" << W << " device " << d;
    }
}

TEST(ClosedForm, HanayoBubbleWithBEqualsPDecreasesInWAndBeats1F1B) {
  for (int P = 2; P <= 8; ++P)
    for (double tb : {1.0, 2.0}) {
      double previous =
          run({.kind = "1f1b", .devices = P, .microbatches = P}, 1, tb).overall_bubble_ratio;
      for (int W = 1; W <= 4; ++W) {
        const double bubble =
            run({.kind = "hanayo", .devices = P, .microbatches = P, .waves = W}, 1, tb)
                .overall_bubble_ratio;
        EXPECT_LT(bubble, previous) << "P=" << P << " W=" << W << " T_B=" << tb;
        previous = bubble;
      }
    }
}

// B a multiple of P, T_B >= T_F: every device idles exactly 2(P-1) chunk backwards,
// (P-1) T_B / W, not the (P-1)(T_F + T_B)/(2W) of a chunk-counting argument (docs/schedules.md
// has the worked example); the two agree only when T_F = T_B.
TEST(ClosedForm, HanayoBubbleTimeWithBEqualsPIsTwoPMinusOneChunkBackwards) {
  for (int P = 1; P <= 8; ++P)
    for (int W = 1; W <= 4; ++W)
      for (int B : {P, 2 * P, 3 * P})
        for (double tb : {1.0, 1.5, 2.0, 3.0}) {
          const auto r =
              run({.kind = "hanayo", .devices = P, .microbatches = B, .waves = W}, 1, tb);
          for (int d = 0; d < P; ++d)
            EXPECT_NEAR(r.makespan_ms - r.busy_ms[d], (P - 1) * tb / W, 1e-9)
                << "P=" << P << " W=" << W << " B=" << B << " T_B=" << tb << " device " << d;
        }
}

// With F = B (unit time) the wave timetable is the schedule: for B a multiple of P the makespan
// is 4WB + 2P - 2 slots of one chunk's F, i.e. bubble (P-1)/(2WB+P-1) (the bounded-in-flight rule
// included: its groups of P interleave without a gap).
TEST(ClosedForm, HanayoUnitTimeBubbleIsPMinusOneOverTwoWBPlusPMinusOne) {
  for (int P = 1; P <= 6; ++P)
    for (int W = 1; W <= 3; ++W)
      for (int B = P; B <= 4 * P; B += P) {
        const auto r = run({.kind = "hanayo", .devices = P, .microbatches = B, .waves = W}, 1, 1);
        EXPECT_NEAR(r.overall_bubble_ratio, (P - 1.0) / (2.0 * W * B + P - 1.0), 1e-9)
            << "P=" << P << " W=" << W << " B=" << B;
      }
}

// B > P: groups of P one sweep apart keep every device at <= P*M_a (1F1B's peak), and the
// bubble stays below 1F1B's, with T_B = 2 T_F.
TEST(ClosedForm, HanayoBeyondPStaysWithin1F1BMemoryAndBelowItsBubble) {
  for (int P = 2; P <= 12; ++P)
    for (int W = 1; W <= 4; ++W)
      for (int B : {P + 1, 2 * P - 1, 2 * P, 3 * P, 4 * P, 4 * P + 3, 8 * P}) {
        const auto r = run({.kind = "hanayo", .devices = P, .microbatches = B, .waves = W});
        EXPECT_LE(max_of(r.peak_activation_units), P + 1e-12)
            << "P=" << P << " W=" << W << " B=" << B;
        EXPECT_LT(r.overall_bubble_ratio, (P - 1.0) / (B + P - 1.0))
            << "P=" << P << " W=" << W << " B=" << B;
      }
}

// ZB-H1: bubble (P-1)(T_F + T_I - T_W) on every device, peak P*M_a (1F1B's), when T_W <= T_F
// and T_W <= T_I (so a deferred W never delays the critical I chain).
TEST(ClosedForm, ZbH1BubbleIsPMinusOneTimesFPlusIMinusW) {
  for (int P = 1; P <= 8; ++P)
    for (int B = P; B <= 3 * P; B += P)
      for (double tf : {1.0, 2.0})
        for (double ti : {1.0, 1.5, 2.0})
          for (double tw : {0.5, 1.0}) {
            if (tw > tf || tw > ti) continue;
            auto s = schedule::generate({.kind = "zb-h1", .devices = P, .microbatches = B});
            StageCost c{.forward_ms = tf,
                        .backward_ms = ti + tw,
                        .backward_input_ms = ti,
                        .backward_weight_ms = tw};
            const auto r = simulate(s, stage_costs(s, c));
            for (int d = 0; d < P; ++d)
              ASSERT_NEAR(r.makespan_ms - r.busy_ms[d], (P - 1) * (tf + ti - tw), 1e-9)
                  << "P=" << P << " B=" << B << " F=" << tf << " I=" << ti << " W=" << tw
                  << " device " << d;
            EXPECT_DOUBLE_EQ(max_of(r.peak_activation_units), P);
          }
}

TEST(ClosedForm, ZbVKeeps1F1BMemoryAndHasNoBubbleBeyondTheRamp) {
  // T_F = T_I = T_W: after the first forwards reach the last device the pipeline is full.
  for (int P = 2; P <= 8; ++P)
    for (int B = 2 * P; B <= 4 * P; B += P) {
      const auto r = run({.kind = "zb-v", .devices = P, .microbatches = B}, 1, 2);
      EXPECT_LE(max_of(r.peak_activation_units), P + 1e-12) << "P=" << P << " B=" << B;
      const double onef1b = (P - 1.0) / (B + P - 1.0);
      EXPECT_LT(r.overall_bubble_ratio, onef1b / 3) << "P=" << P << " B=" << B;
    }
}

TEST(ClosedForm, ChimeraBasicUnitStaysWithinPUnitsAndBeats1F1B) {
  for (int P = 2; P <= 8; P += 2) {
    const auto r = run({.kind = "chimera", .devices = P, .microbatches = P});
    EXPECT_LE(max_of(r.peak_activation_units), P + 1e-12) << "P=" << P;
    EXPECT_LT(r.overall_bubble_ratio, (P - 1.0) / (2 * P - 1.0)) << "P=" << P;
    for (int B : {2 * P, 4 * P}) {
      const auto rb = run({.kind = "chimera", .devices = P, .microbatches = B});
      EXPECT_LE(max_of(rb.peak_activation_units), P + 1 + 1e-12) << "P=" << P << " B=" << B;
      EXPECT_LT(rb.overall_bubble_ratio, (P - 1.0) / (B + P - 1.0)) << "P=" << P << " B=" << B;
    }
  }
}

}  // namespace
}  // namespace bw::sim

namespace bw::sim {
namespace {

// The runtime's per-action overhead: on one device every action adds it once to the makespan;
// on P devices it lies between the busiest device's own overheads and all overheads in sequence.
TEST(ActionOverhead, OneDeviceAddsItPerActionAndPipelinesStayWithinBounds) {
  for (const char* kind : {"gpipe", "1f1b", "hanayo", "zb-h1"})
    for (int P : {1, 2, 4})
      for (int B : {P, 2 * P + 1})
        for (double o : {0.05, 0.5}) {
          auto s = schedule::lower(
              schedule::generate({.kind = kind, .devices = P, .microbatches = B, .waves = 2}));
          CostModel cm = stage_costs(s, {.forward_ms = 1, .backward_ms = 2});
          const SimResult base = simulate(s, cm);
          cm.action_overhead_ms = o;
          const SimResult with = simulate(s, cm);
          size_t total = 0;
          double lower = 0;
          for (int d = 0; d < P; ++d) {
            total += s.actions[d].size();
            lower = std::max(lower, with.busy_ms[d] + o * s.actions[d].size());
          }
          EXPECT_NEAR(with.busy_ms[0], base.busy_ms[0], 1e-9) << "overhead is not compute";
          if (P == 1) {
            ASSERT_NEAR(with.makespan_ms, base.makespan_ms + o * total, 1e-9) << kind;
          } else {
            ASSERT_GE(with.makespan_ms, lower - 1e-9) << kind << " P=" << P << " B=" << B;
            ASSERT_LE(with.makespan_ms, base.makespan_ms + o * total + 1e-9)
                << kind << " P=" << P << " B=" << B;
            ASSERT_GT(with.makespan_ms, base.makespan_ms) << kind << " P=" << P << " B=" << B;
          }
        }
}

}  // namespace
}  // namespace bw::sim
