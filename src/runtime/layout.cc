#include "runtime/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/error.h"

namespace bw::runtime {

int PipelineLayout::num_ranks() const { return std::accumulate(widths.begin(), widths.end(), 0); }

int PipelineLayout::stage_first_rank(int stage) const {
  BW_CHECK(stage >= 0 && stage < static_cast<int>(widths.size()), "stage {} of {}", stage,
           widths.size());
  return first_rank + std::accumulate(widths.begin(), widths.begin() + stage, 0);
}

std::pair<int64_t, int64_t> split_range(int64_t n, int parts, int index) {
  BW_CHECK(parts >= 1 && index >= 0 && index < parts, "piece {} of {}", index, parts);
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

int RunLayout::world_size() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.num_ranks();
  return n;
}

std::pair<int, int> RunLayout::locate(int rank) const {
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const auto& pl = pipelines[p];
    if (rank >= pl.first_rank && rank < pl.first_rank + pl.num_ranks()) {
      int r = pl.first_rank;
      for (int k = 0; k < pl.num_devices; ++k) {
        if (rank < r + pl.widths[k]) return {static_cast<int>(p), k};
        r += pl.widths[k];
      }
    }
  }
  BW_CHECK(false, "rank {} not in the layout (world size {})", rank, world_size());
}

int RunLayout::member_of(int rank) const {
  auto [p, k] = locate(rank);
  return rank - pipelines[p].stage_first_rank(k);
}

int RunLayout::width_of(int rank) const {
  auto [p, k] = locate(rank);
  return pipelines[p].widths[k];
}

std::vector<int> RunLayout::stage_ranks(int rank) const {
  auto [p, k] = locate(rank);
  std::vector<int> out(pipelines[p].widths[k]);
  std::iota(out.begin(), out.end(), pipelines[p].stage_first_rank(k));
  return out;
}

std::pair<int, int> RunLayout::sample_range(int rank) const {
  auto [b, e] = split_range(microbatch_size, width_of(rank), member_of(rank));
  return {static_cast<int>(b), static_cast<int>(e)};
}

bool RunLayout::segmented(int layer) const {
  for (const auto& pl : pipelines) {
    for (int c = 0; c < static_cast<int>(pl.chunk_layers.size()); ++c) {
      if (layer >= pl.chunk_layers[c].first && layer < pl.chunk_layers[c].second &&
          pl.widths[pl.schedule.chunk_device[c]] > 1) {
        return true;
      }
    }
  }
  return false;
}

std::pair<int64_t, int64_t> RunLayout::shard_range(int rank, int64_t numel) const {
  return split_range(numel, width_of(rank), member_of(rank));
}

std::vector<Segment> RunLayout::segments(int layer, int64_t numel) const {
  // Cut points of every pipeline's stage holding the layer.
  std::vector<int64_t> cuts{0, numel};
  for (int p = 0; p < static_cast<int>(pipelines.size()); ++p) {
    const int r = rank_of_layer(p, layer);
    const int w = width_of(r);
    for (int j = 1; j < w; ++j) cuts.push_back(split_range(numel, w, j).first);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Segment> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Segment s{layer, cuts[i], cuts[i + 1], {}};
    for (int p = 0; p < static_cast<int>(pipelines.size()); ++p) {
      const int first = rank_of_layer(p, layer);
      const int w = width_of(first);
      for (int j = 0; j < w; ++j) {
        auto [b, e] = split_range(numel, w, j);
        if (b <= s.begin && s.end <= e) s.ranks.push_back(first + j);
      }
    }
    std::sort(s.ranks.begin(), s.ranks.end());
    BW_CHECK(static_cast<int>(s.ranks.size()) == static_cast<int>(pipelines.size()),
             "segment [{}, {}) of layer {} has {} holders for {} pipelines", s.begin, s.end, layer,
             s.ranks.size(), pipelines.size());
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int> RunLayout::layers_of(int rank) const {
  auto [p, d] = locate(rank);
  const auto& pl = pipelines[p];
  std::vector<int> out;
  for (int c = 0; c < static_cast<int>(pl.chunk_layers.size()); ++c) {
    if (pl.schedule.chunk_device[c] != d) continue;
    for (int l = pl.chunk_layers[c].first; l < pl.chunk_layers[c].second; ++l) out.push_back(l);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int RunLayout::rank_of_layer(int pipeline, int layer) const {
  const auto& pl = pipelines[pipeline];
  for (int c = 0; c < static_cast<int>(pl.chunk_layers.size()); ++c) {
    if (layer >= pl.chunk_layers[c].first && layer < pl.chunk_layers[c].second) {
      return pl.stage_first_rank(pl.schedule.chunk_device[c]);
    }
  }
  BW_CHECK(false, "layer {} not held by pipeline {}", layer, pipeline);
}

std::vector<int> RunLayout::checkpoint_writers(int layer, int replicas) const {
  std::vector<int> whole, sharded;
  for (int p = 0; p < static_cast<int>(pipelines.size()); ++p) {
    const int r = rank_of_layer(p, layer);
    (width_of(r) == 1 ? whole : sharded).push_back(r);
  }
  whole.insert(whole.end(), sharded.begin(), sharded.end());
  whole.resize(std::min(whole.size(), static_cast<size_t>(std::max(replicas, 0)) + 1));
  return whole;
}

std::vector<int> RunLayout::replicas(int layer) const {
  std::vector<int> out;
  for (int p = 0; p < static_cast<int>(pipelines.size()); ++p) {
    out.push_back(rank_of_layer(p, layer));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Bucket> gradient_buckets(const RunLayout& layout) {
  std::vector<Bucket> out;
  for (int l = 0; l < layout.num_layers; ++l) {
    if (layout.segmented(l)) continue;
    auto ranks = layout.replicas(l);
    if (!out.empty() && out.back().ranks == ranks && out.back().end_layer == l) {
      out.back().end_layer = l + 1;
    } else {
      out.push_back(Bucket{l, l + 1, std::move(ranks)});
    }
  }
  return out;
}

std::vector<std::pair<int, int>> split_layers(int num_layers, int num_chunks) {
  if (num_chunks < 1 || num_chunks > num_layers) {
    throw ConfigError(fmt::format(
        "the schedule needs {} chunks but the model has only {} layers; use fewer devices per "
        "pipeline, fewer chunks per device (pipeline.chunks_per_device, pipeline.waves), or a "
        "model with more blocks (model.name, e.g. tiny:{})",
        num_chunks, num_layers, std::max(num_chunks - 2, 1)));
  }
  std::vector<std::pair<int, int>> out;
  const int base = num_layers / num_chunks, extra = num_layers % num_chunks;
  int begin = 0;
  for (int c = 0; c < num_chunks; ++c) {
    const int n = base + (c < extra ? 1 : 0);
    out.emplace_back(begin, begin + n);
    begin += n;
  }
  return out;
}

std::vector<int> split_microbatches(int total, const std::vector<double>& weights) {
  const int n = static_cast<int>(weights.size());
  if (total < n) {
    throw ConfigError(
        fmt::format("{} microbatches cannot feed {} pipelines (each needs at least one); raise "
                    "pipeline.microbatches to >= {}",
                    total, n, n));
  }
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int> out(n, 1);
  int left = total - n;
  std::vector<std::pair<double, int>> remainders;
  for (int i = 0; i < n; ++i) {
    const double share = left * weights[i] / sum;
    const int whole = static_cast<int>(std::floor(share));
    out[i] += whole;
    remainders.emplace_back(share - whole, i);
  }
  int given = std::accumulate(out.begin(), out.end(), 0);
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int k = 0; given < total; ++k, ++given) out[remainders[k % n].second] += 1;
  return out;
}

void validate_layout(const RunLayout& layout) {
  BW_CHECK(!layout.pipelines.empty(), "layout without pipelines");
  int rank = 0, mb = 0;
  for (size_t p = 0; p < layout.pipelines.size(); ++p) {
    const auto& pl = layout.pipelines[p];
    BW_CHECK(pl.first_rank == rank, "pipeline {} starts at rank {}, expected {}", p, pl.first_rank,
             rank);
    BW_CHECK(pl.first_microbatch == mb, "pipeline {} starts at microbatch {}, expected {}", p,
             pl.first_microbatch, mb);
    BW_CHECK(pl.num_microbatches >= 1, "pipeline {} has no microbatches", p);
    BW_CHECK(pl.schedule.num_devices == pl.num_devices,
             "pipeline {}: schedule for {} devices, not {}", p, pl.schedule.num_devices,
             pl.num_devices);
    BW_CHECK(pl.schedule.num_microbatches == pl.num_microbatches,
             "pipeline {}: schedule for {} microbatches, not {}", p, pl.schedule.num_microbatches,
             pl.num_microbatches);
    BW_CHECK(static_cast<int>(pl.chunk_layers.size()) == pl.schedule.num_chunks &&
                 static_cast<int>(pl.schedule.chunk_device.size()) == pl.schedule.num_chunks,
             "pipeline {}: {} chunk ranges for {} chunks", p, pl.chunk_layers.size(),
             pl.schedule.num_chunks);
    int layer = 0;
    for (const auto& [b, e] : pl.chunk_layers) {
      BW_CHECK(b == layer && e > b, "pipeline {}: chunk layers [{}, {}) after layer {}", p, b, e,
               layer);
      layer = e;
    }
    BW_CHECK(layer == layout.num_layers, "pipeline {} covers {} of {} layers", p, layer,
             layout.num_layers);
    BW_CHECK(static_cast<int>(pl.schedule.actions.size()) == pl.num_devices,
             "pipeline {}: {} action lists for {} devices", p, pl.schedule.actions.size(),
             pl.num_devices);
    BW_CHECK(static_cast<int>(pl.widths.size()) == pl.num_devices,
             "pipeline {}: {} stage widths for {} devices", p, pl.widths.size(), pl.num_devices);
    for (int w : pl.widths) {
      BW_CHECK(w >= 1 && w <= layout.microbatch_size,
               "pipeline {}: a stage of {} ranks cannot split microbatches of {} samples", p, w,
               layout.microbatch_size);
    }
    rank += pl.num_ranks();
    mb += pl.num_microbatches;
  }
  BW_CHECK(mb == layout.total_microbatches, "pipelines hold {} of {} microbatches", mb,
           layout.total_microbatches);
}

nlohmann::json to_json(const RunLayout& layout) {
  nlohmann::json doc;
  doc["generation"] = layout.generation;
  doc["num_layers"] = layout.num_layers;
  doc["vocab_size"] = layout.vocab_size;
  doc["microbatch_size"] = layout.microbatch_size;
  doc["total_microbatches"] = layout.total_microbatches;
  doc["pipelines"] = nlohmann::json::array();
  for (const auto& pl : layout.pipelines) {
    nlohmann::json p;
    p["first_rank"] = pl.first_rank;
    p["num_devices"] = pl.num_devices;
    p["widths"] = pl.widths;
    p["chunk_layers"] = pl.chunk_layers;
    p["first_microbatch"] = pl.first_microbatch;
    p["num_microbatches"] = pl.num_microbatches;
    p["schedule_kind"] = pl.schedule.kind;
    p["chunk_device"] = pl.schedule.chunk_device;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& list : pl.schedule.actions) {
      std::vector<std::string> row;
      for (const auto& a : list) row.push_back(schedule::to_string(a));
      rows.push_back(row);
    }
    p["actions"] = rows;
    doc["pipelines"].push_back(p);
  }
  return doc;
}

RunLayout layout_from_json(const nlohmann::json& doc) {
  RunLayout layout;
  layout.generation = doc.at("generation").get<int>();
  layout.num_layers = doc.at("num_layers").get<int>();
  layout.vocab_size = doc.at("vocab_size").get<int>();
  layout.microbatch_size = doc.at("microbatch_size").get<int>();
  layout.total_microbatches = doc.at("total_microbatches").get<int>();
  for (const auto& p : doc.at("pipelines")) {
    PipelineLayout pl;
    pl.first_rank = p.at("first_rank").get<int>();
    pl.num_devices = p.at("num_devices").get<int>();
    pl.widths = p.at("widths").get<std::vector<int>>();
    pl.chunk_layers = p.at("chunk_layers").get<std::vector<std::pair<int, int>>>();
    pl.first_microbatch = p.at("first_microbatch").get<int>();
    pl.num_microbatches = p.at("num_microbatches").get<int>();
    pl.schedule.kind = p.at("schedule_kind").get<std::string>();
    pl.schedule.num_devices = pl.num_devices;
    pl.schedule.num_chunks = static_cast<int>(pl.chunk_layers.size());
    pl.schedule.num_microbatches = pl.num_microbatches;
    pl.schedule.chunk_device = p.at("chunk_device").get<std::vector<int>>();
    for (const auto& row : p.at("actions")) {
      std::vector<schedule::Action> list;
      for (const auto& text : row) {
        auto a = schedule::parse_action(text.get<std::string>());
        BW_CHECK(a.has_value(), "bad action '{}' in the published layout", text.get<std::string>());
        list.push_back(*a);
      }
      pl.schedule.actions.push_back(std::move(list));
    }
    layout.pipelines.push_back(std::move(pl));
  }
  validate_layout(layout);
  return layout;
}

}  // namespace bw::runtime
