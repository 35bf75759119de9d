// Generators: every kind over a grid of sizes produces a complete, deadlock-free schedule, and the
// orders the papers specify (1F1B's lags, Hanayo's keys and placement, Megatron's rules).
#include "schedule/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace bw::schedule {
namespace {

std::vector<ScheduleSpec> grid() {
  std::vector<ScheduleSpec> out;
  for (const auto& kind : schedule_kinds())
    for (int P : {1, 2, 3, 4, 6, 8})
      for (int B : {1, 2, 3, 4, 5, 7, 8, 12, 16, 24})
        for (int x : {1, 2, 3}) {
          if (x > 1 && kind != "interleaved" && kind != "hanayo") continue;
          ScheduleSpec s{.kind = kind, .devices = P, .microbatches = B};
          s.chunks_per_device = x;
          s.waves = x;
          try {
            check_spec(s);
          } catch (const ConfigError&) {
            continue;
          }
          out.push_back(s);
        }
  return out;
}

std::string name(const ScheduleSpec& s) {
  return s.kind + " P=" + std::to_string(s.devices) + " B=" + std::to_string(s.microbatches) +
         " v=" + std::to_string(s.chunks_per_device) + " W=" + std::to_string(s.waves);
}

TEST(Generate, EveryKindValidatesOverAGridComputeOnlyAndLowered) {
  int checked = 0;
  for (const auto& spec : grid()) {
    const Schedule s = generate(spec);
    EXPECT_EQ(s.kind, spec.kind);
    EXPECT_EQ(s.num_devices, spec.devices);
    EXPECT_EQ(s.num_microbatches, spec.microbatches);
    EXPECT_EQ(s.num_chunks, num_chunks(spec)) << name(spec);
    EXPECT_EQ(s.chunk_device, chunk_placement(spec)) << name(spec);
    EXPECT_FALSE(s.is_lowered());
    auto r = check(s);
    ASSERT_TRUE(r.ok) << name(spec) << "\n" << r.problem << "\n" << r.grid;
    const Schedule l = lower(s);
    for (auto sem : {CommSemantics::kAsync, CommSemantics::kRendezvous}) {
      auto rl = check(l, {.semantics = sem});
      ASSERT_TRUE(rl.ok) << name(spec) << " lowered, " << semantics_name(sem) << "\n"
                         << rl.problem << "\n"
                         << rl.grid;
    }
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(Generate, ZeroBubbleKindsSplitTheBackwardOthersDoNot) {
  for (const auto& spec : grid()) {
    const bool split = spec.kind == "zb-h1" || spec.kind == "zb-v";
    EXPECT_EQ(generate(spec).has_split_backward(), split) << name(spec);
  }
}

TEST(Generate, OneFOneBRunsForwardXThenBackwardXMinusLag) {
  // P = 3, B = 4: device d warms up with P-1-d forwards.
  const Schedule s = generate({.kind = "1f1b", .devices = 3, .microbatches = 4});
  auto text = [&](int d) {
    std::string out;
    for (const auto& a : s.actions[d]) out += to_string(a) + " ";
    return out;
  };
  EXPECT_EQ(text(0), "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3 ");
  EXPECT_EQ(text(1), "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3 ");
  EXPECT_EQ(text(2), "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 ");
}

TEST(Generate, GPipeRunsAllForwardsThenAllBackwards) {
  const Schedule s = generate({.kind = "gpipe", .devices = 2, .microbatches = 3});
  std::string out;
  for (const auto& a : s.actions[1]) out += to_string(a) + " ";
  EXPECT_EQ(out, "1F0 1F1 1F2 1B0 1B1 1B2 ");
}

TEST(Generate, HanayoPlacementIsAWaveThatTurnsBackEveryPChunks) {
  for (int P : {1, 2, 3, 4, 8})
    for (int W : {1, 2, 3}) {
      const auto place =
          chunk_placement({.kind = "hanayo", .devices = P, .microbatches = P, .waves = W});
      ASSERT_EQ(static_cast<int>(place.size()), 2 * W * P);
      for (int s = 0; s < 2 * W * P; ++s) {
        const int expect = (s / P) % 2 == 0 ? s % P : P - 1 - s % P;
        EXPECT_EQ(place[s], expect) << "P=" << P << " W=" << W << " chunk " << s;
      }
      EXPECT_EQ(place.front(), 0);
      EXPECT_EQ(place.back(), 0);  // first and last chunks share device 0
    }
}

TEST(Generate, HanayoWithBEqualsPOrdersEachDeviceByThePaperKeys) {
  // F(s,m) = 2m+s, B(s,m) = 2m+2S-1-s, S = 2WP; keys distinct per device.
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int W : {1, 2, 3, 4}) {
      const int S = 2 * W * P;
      const Schedule s = generate({.kind = "hanayo", .devices = P, .microbatches = P, .waves = W});
      for (int d = 0; d < P; ++d) {
        std::vector<int> keys;
        for (const auto& a : s.actions[d])
          keys.push_back(a.kind == ActionKind::F ? 2 * a.microbatch + a.chunk
                                                 : 2 * a.microbatch + 2 * S - 1 - a.chunk);
        EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end())) << "P=" << P << " W=" << W;
        EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end())
            << "two actions share a key: P=" << P << " W=" << W << " device " << d;
        EXPECT_EQ(static_cast<int>(s.actions[d].size()), 2 * 2 * W * P);  // 2W chunks x P x F,B
      }
    }
}

TEST(Generate, HanayoMatchesTheFigureForTwoDevicesOneWave) {
  // P = 2, W = 1, B = 2: chunks 0,3 on device 0 and 1,2 on device 1.
  const Schedule s = generate({.kind = "hanayo", .devices = 2, .microbatches = 2, .waves = 1});
  auto text = [&](int d) {
    std::string out;
    for (const auto& a : s.actions[d]) out += to_string(a) + " ";
    return out;
  };
  EXPECT_EQ(text(0), "0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1 ");
  EXPECT_EQ(text(1), "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1 ");
}

TEST(Generate, HanayoBeyondPRunsGroupsOfPOneSweepApart) {
  // Microbatch m = gP + j enters at t_m = 2j + gS: ordering device 0 by the keys
  // F(s,m) = t_m + s and B(s,m) = t_m + 2S-1-s (backward first on ties) gives its list, and at
  // most 2P microbatches are in flight (m enters after m - 2P left chunk 0).
  for (int P : {1, 2, 3, 4, 5})
    for (int W : {1, 2, 3})
      for (int B : {P + 1, 2 * P, 3 * P + 1, 5 * P}) {
        const int S = 2 * W * P;
        const Schedule s =
            generate({.kind = "hanayo", .devices = P, .microbatches = B, .waves = W});
        for (int d = 0; d < P; ++d) {
          std::vector<long long> keys;
          for (const auto& a : s.actions[d]) {
            const long long t = 2LL * (a.microbatch % P) + 1LL * S * (a.microbatch / P);
            keys.push_back(a.kind == ActionKind::F ? 2 * (t + a.chunk) + 1
                                                   : 2 * (t + 2 * S - 1 - a.chunk));
          }
          EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()))
              << "P=" << P << " W=" << W << " B=" << B << " device " << d;
        }
        std::map<std::pair<int, int>, int> at;
        for (int k = 0; k < static_cast<int>(s.actions[0].size()); ++k) {
          const auto& a = s.actions[0][k];
          if (a.chunk == 0) at[{static_cast<int>(a.kind), a.microbatch}] = k;
        }
        for (int m = 2 * P; m < B; ++m)
          EXPECT_GT((at[{static_cast<int>(ActionKind::F), m}]),
                    (at[{static_cast<int>(ActionKind::B), m - 2 * P}]))
              << "P=" << P << " W=" << W << " B=" << B << " m=" << m;
      }
}

TEST(Generate, InterleavedPlacesChunkCOnDeviceCModP) {
  const auto place = chunk_placement(
      {.kind = "interleaved", .devices = 4, .microbatches = 8, .chunks_per_device = 3});
  ASSERT_EQ(place.size(), 12u);
  for (int c = 0; c < 12; ++c) EXPECT_EQ(place[c], c % 4);
}

TEST(Generate, InterleavedFollowsMegatronsMicrobatchRules) {
  // B < P is refused.
  EXPECT_THROW(generate({.kind = "interleaved", .devices = 4, .microbatches = 3}), ConfigError);
  // B mod G must be 0 or >= P (G = P by default).
  try {
    generate({.kind = "interleaved", .devices = 4, .microbatches = 5});
    FAIL() << "B = 5 on 4 devices should be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mod group size"), std::string::npos) << e.what();
  }
  // A group size that leaves a remainder >= P works (Megatron's
  // microbatch_group_size_per_vp_stage).
  ScheduleSpec ok{.kind = "interleaved", .devices = 4, .microbatches = 10, .chunks_per_device = 2};
  ok.group_size = 6;  // groups of 6 and 4
  auto r = check(lower(generate(ok)));
  EXPECT_TRUE(r.ok) << r.problem << "\n" << r.grid;
  ok.group_size = 3;  // smaller than P
  EXPECT_THROW(generate(ok), ConfigError);
}

TEST(Generate, InterleavedWithBEqualsPRunsMegatronsWarmup) {
  // Device d warms up with min(vB, 2(P-1-d) + (v-1)P) forwards.
  const int P = 4, v = 2, B = 8;
  const Schedule s =
      generate({.kind = "interleaved", .devices = P, .microbatches = B, .chunks_per_device = v});
  for (int d = 0; d < P; ++d) {
    int warmup = 0;
    while (s.actions[d][warmup].kind == ActionKind::F) ++warmup;
    EXPECT_EQ(warmup, std::min(v * B, 2 * (P - 1 - d) + (v - 1) * P) + 1) << "device " << d;
  }
}

TEST(Generate, ChimeraHasTwoReplicasInOppositeDirections) {
  const Schedule s = generate({.kind = "chimera", .devices = 4, .microbatches = 8});
  EXPECT_EQ(s.num_chunks, 8);
  EXPECT_EQ(s.num_stages(), 4);
  EXPECT_EQ(s.chunk_stage, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(s.chunk_device, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(s.next_chunk(3), -1);  // end of the down replica
  EXPECT_EQ(s.prev_chunk(4), -1);  // start of the up replica
  EXPECT_EQ(s.next_chunk(4), 5);
  // Microbatches 0,1 (and 4,5) go down, 2,3 (and 6,7) up.
  for (const auto& a : s.actions[0])
    if (a.kind == ActionKind::F) EXPECT_EQ(a.chunk == 0, (a.microbatch % 4) < 2) << to_string(a);
}

TEST(Generate, ZbVPlacesChunksInAV) {
  const auto place = chunk_placement({.kind = "zb-v", .devices = 4, .microbatches = 8});
  EXPECT_EQ(place, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
}

TEST(Generate, ZbH1RunsFIThenWDelayedByPMinusOne) {
  const Schedule s = generate({.kind = "zb-h1", .devices = 3, .microbatches = 4});
  std::string out;
  for (const auto& a : s.actions[0]) out += to_string(a) + " ";
  EXPECT_EQ(out, "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3 ");
  out.clear();
  for (const auto& a : s.actions[2]) out += to_string(a) + " ";
  EXPECT_EQ(out, "2F0 2I0 2F1 2I1 2F2 2I2 2W0 2F3 2I3 2W1 2W2 2W3 ");
}

TEST(Generate, InvalidCombinationsAreClearErrors) {
  auto message = [](const ScheduleSpec& s) {
    try {
      generate(s);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message({.kind = "hanayo", .devices = 4, .microbatches = 8, .waves = 0}).find("waves"),
            std::string::npos);
  EXPECT_NE(message({.kind = "wavy", .devices = 4, .microbatches = 8}).find("unknown schedule"),
            std::string::npos);
  EXPECT_NE(message({.kind = "chimera", .devices = 3, .microbatches = 8}).find("even"),
            std::string::npos);
  EXPECT_NE(message({.kind = "1f1b", .devices = 0, .microbatches = 8}).find("devices"),
            std::string::npos);
  EXPECT_NE(message({.kind = "1f1b", .devices = 2, .microbatches = 0}).find("microbatches"),
            std::string::npos);
  EXPECT_NE(message({.kind = "interleaved", .devices = 4, .microbatches = 2}).find(">= devices"),
            std::string::npos);
  EXPECT_NE(
      message({.kind = "interleaved", .devices = 4, .microbatches = 8, .chunks_per_device = 0})
          .find("chunks per device"),
      std::string::npos);
  EXPECT_NE(message({.kind = "gpipe", .devices = 4096, .microbatches = 100000}).find("too large"),
            std::string::npos);
}

TEST(Generate, KindsAreListedOnce) {
  auto kinds = schedule_kinds();
  EXPECT_EQ(kinds.size(), 7u);
  std::sort(kinds.begin(), kinds.end());
  EXPECT_EQ(std::unique(kinds.begin(), kinds.end()), kinds.end());
}

}  // namespace
}  // namespace bw::schedule
