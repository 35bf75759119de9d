#include "runtime/grad_sync.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"
#include "core/error.h"
#include "runtime/optimizer.h"
#include "runtime/shard.h"

namespace bw::runtime {

void zero_gradients(const std::map<int, std::shared_ptr<model::Layer>>& layers) {
  for (const auto& [index, layer] : layers) {
    for (const auto& [name, p] : layer->parameter_list()) {
      if (p.grad().defined()) {
        p.mutable_grad().zero_();
      } else {
        p.mutable_grad() = torch::zeros_like(p);
      }
    }
  }
}

GradSync::GradSync(const RunLayout& layout, int rank,
                   std::map<int, std::shared_ptr<model::Layer>> layers,
                   const TransportFactory& make_group, Transport* world, StageShards* shards,
                   const std::vector<model::TiedGroup>& ties)
    : layout_(layout), rank_(rank), layers_(std::move(layers)), world_(world), shards_(shards) {
  auto make = [&](const std::vector<int>& ranks) -> Transport* {
    if (ranks.size() <= 1) return nullptr;
    auto it = groups_.find(ranks);
    if (it == groups_.end()) {
      std::string name = fmt::format("g{}/grp/{}", layout.generation, fmt::join(ranks, "-"));
      const int index =
          static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
      it = groups_.emplace(ranks, make_group(name, index, static_cast<int>(ranks.size()))).first;
    }
    return it->second.get();
  };
  // Units in layer order: a bucket of unsegmented layers, or the segments of a segmented one.
  auto buckets = gradient_buckets(layout);
  size_t next_bucket = 0;
  for (int l = 0; l < layout.num_layers; ++l) {
    if (layout.segmented(l)) {
      const auto& model_layers = layers_;
      const bool holds = model_layers.count(l) == 1;
      if (!holds) continue;
      BW_CHECK(shards_ != nullptr, "rank {} runs segmented layer {} without shards", rank, l);
      int64_t numel = 0;
      for (const auto& [name, p] : layers_.at(l)->parameter_list()) numel += p.numel();
      const auto range = layout.shard_range(rank, numel);
      for (auto& seg : layout.segments(l, numel)) {
        if (std::find(seg.ranks.begin(), seg.ranks.end(), rank) == seg.ranks.end()) continue;
        MyBucket mine;
        mine.segment = true;
        mine.layer = l;
        mine.offset = seg.begin - range.first;
        mine.count = seg.end - seg.begin;
        mine.group = make(seg.ranks);
        mine.bucket = Bucket{l, l + 1, seg.ranks};
        mine_.push_back(std::move(mine));
      }
      continue;
    }
    if (next_bucket >= buckets.size() || buckets[next_bucket].first_layer != l) continue;
    auto b = std::move(buckets[next_bucket++]);
    const bool member = std::find(b.ranks.begin(), b.ranks.end(), rank) != b.ranks.end();
    if (!member) continue;
    MyBucket mine;
    for (int k = b.first_layer; k < b.end_layer; ++k) {
      BW_CHECK(layers_.count(k) == 1, "rank {} is a replica of layer {} but does not hold it", rank,
               k);
      if (b.ranks.front() == rank) owned_layers_.push_back(k);
      for (const auto& [name, p] : layers_.at(k)->parameter_list()) mine.params.push_back(p);
    }
    mine.group = make(b.ranks);
    mine.bucket = std::move(b);
    mine_.push_back(std::move(mine));
  }
  // Tied groups, after every bucket: the ranks of this rank's pipeline holding a copy.
  const int pipeline = layout.locate(rank).first;
  for (const auto& tie : ties) {
    std::vector<int> ranks;
    MyTie mine;
    mine.name = tie.name;
    for (size_t i = 0; i < tie.members.size(); ++i) {
      const auto& m = tie.members[i];
      if (layout.segmented(m.layer)) {
        throw ConfigError(fmt::format(
            "layer {} holds a copy of the tied matrix '{}' but runs on a sharded stage; tied "
            "embeddings need stages of one device (pipeline.devices_per_stage = 1) or "
            "model.tie_embeddings = false",
            m.layer, tie.name));
      }
      if (i > 0) norm_skip_.emplace(m.layer, m.name);
      const int holder = layout.rank_of_layer(pipeline, m.layer);
      if (std::find(ranks.begin(), ranks.end(), holder) == ranks.end()) ranks.push_back(holder);
      if (holder != rank) continue;
      BW_CHECK(layers_.count(m.layer) == 1, "rank {} holds tied layer {} but has no such layer",
               rank, m.layer);
      bool found = false;
      for (const auto& [name, p] : layers_.at(m.layer)->parameter_list()) {
        if (name != m.name) continue;
        mine.params.push_back(p);
        found = true;
      }
      BW_CHECK(found, "layer {} has no parameter '{}' of tied group '{}'", m.layer, m.name,
               tie.name);
    }
    if (mine.params.empty()) continue;
    std::sort(ranks.begin(), ranks.end());
    mine.group = make(ranks);
    tied_.push_back(std::move(mine));
  }
}

std::map<std::string, std::vector<int64_t>> GradSync::tied_checksums() const {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& t : tied_) {
    for (const auto& p : t.params) {
      BW_CHECK(p.element_size() == 4, "tied copy of '{}' is not 32-bit", t.name);
      out[t.name].push_back(p.detach().view(torch::kInt32).sum().item<int64_t>());
    }
  }
  return out;
}

int GradSync::num_tied_across() const {
  int n = 0;
  for (const auto& t : tied_) n += t.group != nullptr ? 1 : 0;
  return n;
}

void GradSync::sync_gradients() {
  for (auto& b : mine_) {
    if (b.group == nullptr) continue;
    if (b.segment) {
      auto slice = shards_->shard_gradient(b.layer).narrow(0, b.offset, b.count);
      auto flat = slice.contiguous();
      b.group->allreduce_sum(flat);
      slice.copy_(flat);
      continue;
    }
    std::vector<torch::Tensor> grads;
    for (const auto& p : b.params) grads.push_back(p.grad().reshape({-1}));
    auto flat = torch::cat(grads);
    b.group->allreduce_sum(flat);
    int64_t offset = 0;
    for (const auto& p : b.params) {
      const int64_t n = p.numel();
      p.mutable_grad().copy_(flat.narrow(0, offset, n).view_as(p));
      offset += n;
    }
  }
  for (auto& t : tied_) {
    // Two copies (embedding and head): fl(a + b) is the same in any order, so every copy, local
    // or across ranks, ends with the same bits.
    auto sum = t.params.front().grad().clone();
    for (size_t i = 1; i < t.params.size(); ++i) sum.add_(t.params[i].grad());
    if (t.group != nullptr) t.group->allreduce_sum(sum);
    for (auto& p : t.params) p.mutable_grad().copy_(sum);
  }
}

std::vector<std::unique_ptr<Transport>> GradSync::release_groups() {
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& b : mine_) b.group = nullptr;
  for (auto& t : tied_) t.group = nullptr;
  for (auto& [ranks, t] : groups_) out.push_back(std::move(t));
  groups_.clear();
  return out;
}

std::pair<double, double> GradSync::global_norm_and_loss(double local_loss) {
  double sq = 0.0;
  for (int l : owned_layers_) {
    for (const auto& [name, p] : layers_.at(l)->parameter_list()) {
      if (norm_skip_.count({l, name}) > 0) continue;  // counted with its primary copy
      sq += sum_of_squares(p.grad());
    }
  }
  if (shards_ != nullptr) sq += shards_->counted_sq_norm();
  auto t = torch::tensor({sq, local_loss}, torch::kFloat64);
  if (world_ != nullptr && world_->size() > 1) world_->allreduce_sum(t);
  return {t[0].item<double>(), t[1].item<double>()};
}

}  // namespace bw::runtime
