// The run layout: layer and microbatch splits, replica sets and gradient buckets against brute
// force over grids of pipeline shapes, and the JSON round trip the workers rely on.
#include "runtime/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "schedule/generate.h"

namespace bw::runtime {
namespace {

TEST(SplitLayers, ContiguousBalancedAndComplete) {
  for (int layers = 1; layers <= 14; ++layers) {
    for (int chunks = 1; chunks <= layers; ++chunks) {
      auto split = split_layers(layers, chunks);
      ASSERT_EQ(static_cast<int>(split.size()), chunks);
      int next = 0, lo = layers, hi = 0;
      for (auto [b, e] : split) {
        EXPECT_EQ(b, next) << layers << " layers, " << chunks << " chunks";
        EXPECT_GT(e, b);
        lo = std::min(lo, e - b);
        hi = std::max(hi, e - b);
        next = e;
      }
      EXPECT_EQ(next, layers);
      EXPECT_LE(hi - lo, 1) << layers << " layers, " << chunks << " chunks";
    }
    EXPECT_THROW(split_layers(layers, layers + 1), ConfigError);
  }
}

TEST(SplitMicrobatches, ProportionalWithinOneAndAtLeastOne) {
  const std::vector<std::vector<double>> weights = {{1},    {1, 1},    {2, 3},
                                                    {1, 3}, {1, 2, 5}, {4, 4, 1}};
  for (const auto& w : weights) {
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    for (int total = static_cast<int>(w.size()); total <= 40; ++total) {
      auto split = split_microbatches(total, w);
      ASSERT_EQ(split.size(), w.size());
      EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), total);
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_GE(split[i], 1);
        // Within 1 + 1 of the exact share (one reserved microbatch, one rounding).
        EXPECT_LE(std::abs(split[i] - total * w[i] / sum), 2.0) << "total " << total;
      }
    }
    if (w.size() > 1)
      EXPECT_THROW(split_microbatches(static_cast<int>(w.size()) - 1, w), ConfigError);
  }
}

RunLayout make_layout(const std::vector<int>& devices, const std::string& kind, int num_layers,
                      int waves = 1, const std::vector<std::vector<int>>& widths = {}) {
  RunLayout layout;
  layout.num_layers = num_layers;
  layout.vocab_size = 256;
  layout.microbatch_size = 2;
  int rank = 0, mb = 0;
  for (size_t p = 0; p < devices.size(); ++p) {
    const int d = devices[p];
    schedule::ScheduleSpec spec{kind, d, 4, 2, waves};
    PipelineLayout pl;
    pl.first_rank = rank;
    pl.num_devices = d;
    pl.widths = p < widths.size() ? widths[p] : std::vector<int>(d, 1);
    pl.first_microbatch = mb;
    pl.num_microbatches = 4;
    pl.schedule = schedule::lower(schedule::generate(spec));
    pl.chunk_layers = split_layers(num_layers, pl.schedule.num_chunks);
    layout.pipelines.push_back(pl);
    for (int w : pl.widths) rank += w;
    mb += 4;
  }
  layout.total_microbatches = mb;
  validate_layout(layout);
  return layout;
}

// Brute force: for every layer, scan every rank's layers; buckets are maximal runs of equal sets.
TEST(GradientBuckets, MatchBruteForceReplicaSets) {
  const std::vector<std::vector<int>> shapes = {{1},    {2},       {2, 2}, {1, 3},
                                                {2, 3}, {3, 2, 1}, {4, 1}};
  int checked = 0;
  for (const std::string kind : {"1f1b", "interleaved", "hanayo"}) {
    for (const auto& shape : shapes) {
      const int layers = 12;
      RunLayout layout;
      try {
        layout = make_layout(shape, kind, layers);
      } catch (const ConfigError&) {
        continue;  // e.g. interleaved needs microbatches divisible by devices
      }
      std::vector<std::vector<int>> sets(layers);
      for (int r = 0; r < layout.world_size(); ++r) {
        for (int l : layout.layers_of(r)) sets[l].push_back(r);
      }
      for (int l = 0; l < layers; ++l) {
        EXPECT_EQ(layout.replicas(l), sets[l]) << kind << " layer " << l;
        EXPECT_EQ(sets[l].size(), shape.size()) << "each pipeline holds each layer once";
      }
      auto buckets = gradient_buckets(layout);
      int next = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        EXPECT_EQ(buckets[b].first_layer, next);
        for (int l = buckets[b].first_layer; l < buckets[b].end_layer; ++l) {
          EXPECT_EQ(buckets[b].ranks, sets[l]) << kind << " bucket " << b << " layer " << l;
        }
        if (b > 0) EXPECT_NE(buckets[b].ranks, buckets[b - 1].ranks) << "not maximal";
        next = buckets[b].end_layer;
      }
      EXPECT_EQ(next, layers);
      ++checked;
    }
  }
  EXPECT_GE(checked, 15) << "too few layouts were built to mean anything";
}

// Brute force from layers_of alone: a layer's holders per pipeline; its checkpoint writers are
// one per pipeline, min(R + 1, pipelines) of them, pipelines holding it whole before those that
// shard it (whose lowest rank writes), each group in pipeline order.
TEST(CheckpointWriters, OnePerPipelineWholeHoldersFirst) {
  struct Case {
    std::vector<int> devices;
    std::vector<std::vector<int>> widths;
  };
  const std::vector<Case> cases = {{{2}, {}},
                                   {{2, 2}, {}},
                                   {{1, 3}, {}},
                                   {{2, 2, 1}, {{2, 1}, {1, 1}, {1}}},
                                   {{2, 2}, {{2, 2}, {1, 2}}},
                                   {{1, 2}, {{2}, {1, 1}}}};
  int checked = 0;
  for (const auto& c : cases) {
    const auto layout = make_layout(c.devices, "1f1b", 8, 1, c.widths);
    const int pipelines = static_cast<int>(c.devices.size());
    for (int l = 0; l < layout.num_layers; ++l) {
      std::vector<std::vector<int>> holders(pipelines);
      for (int r = 0; r < layout.world_size(); ++r) {
        const auto mine = layout.layers_of(r);
        if (std::find(mine.begin(), mine.end(), l) != mine.end())
          holders[layout.locate(r).first].push_back(r);
      }
      std::vector<int> order;  // pipelines: whole holders first, then sharded
      for (int whole = 1; whole >= 0; --whole) {
        for (int p = 0; p < pipelines; ++p) {
          if ((holders[p].size() == 1) == (whole == 1)) order.push_back(p);
        }
      }
      for (int replicas = 0; replicas <= 3; ++replicas) {
        std::vector<int> want;
        for (size_t i = 0; i < order.size() && static_cast<int>(i) <= replicas; ++i) {
          want.push_back(*std::min_element(holders[order[i]].begin(), holders[order[i]].end()));
        }
        EXPECT_EQ(layout.checkpoint_writers(l, replicas), want)
            << "layer " << l << ", replicas " << replicas << ", pipelines " << pipelines;
        ++checked;
      }
      if (!layout.segmented(l)) {
        EXPECT_EQ(layout.checkpoint_writers(l, 0), std::vector<int>{layout.replicas(l).front()});
      }
    }
  }
  EXPECT_GE(checked, 150);
}

TEST(RunLayoutJson, RoundTripsExactly) {
  auto layout = make_layout({2, 3}, "hanayo", 12);
  layout.generation = 7;
  auto back = layout_from_json(nlohmann::json::parse(to_json(layout).dump()));
  EXPECT_EQ(to_json(back), to_json(layout));
  ASSERT_EQ(back.pipelines.size(), 2u);
  EXPECT_EQ(back.pipelines[1].schedule.actions, layout.pipelines[1].schedule.actions);
  EXPECT_EQ(back.generation, 7);
  EXPECT_EQ(back.locate(3), std::make_pair(1, 1));
}

TEST(RunLayout, ValidationCatchesBrokenLayouts) {
  auto layout = make_layout({2}, "1f1b", 6);
  auto broken = layout;
  broken.pipelines[0].chunk_layers[1].first = 4;  // a hole
  EXPECT_THROW(validate_layout(broken), InternalError);
  broken = layout;
  broken.total_microbatches = 5;
  EXPECT_THROW(validate_layout(broken), InternalError);
}

}  // namespace
}  // namespace bw::runtime
