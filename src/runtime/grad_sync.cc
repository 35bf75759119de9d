#include "runtime/grad_sync.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"

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
                   const TransportFactory& make_group, Transport* world)
    : layout_(layout), rank_(rank), layers_(std::move(layers)), world_(world) {
  for (auto& b : gradient_buckets(layout)) {
    const bool member = std::find(b.ranks.begin(), b.ranks.end(), rank) != b.ranks.end();
    if (!member) continue;
    MyBucket mine;
    for (int l = b.first_layer; l < b.end_layer; ++l) {
      BW_CHECK(layers_.count(l) == 1, "rank {} is a replica of layer {} but does not hold it", rank,
               l);
      if (b.ranks.front() == rank) owned_layers_.push_back(l);
      for (const auto& [name, p] : layers_.at(l)->parameter_list()) mine.params.push_back(p);
    }
    if (b.ranks.size() > 1) {
      auto it = groups_.find(b.ranks);
      if (it == groups_.end()) {
        std::string name = fmt::format("g{}/grp/{}", layout.generation, fmt::join(b.ranks, "-"));
        const int index =
            static_cast<int>(std::find(b.ranks.begin(), b.ranks.end(), rank) - b.ranks.begin());
        it = groups_
                 .emplace(b.ranks, make_group(name, index, static_cast<int>(b.ranks.size())))
                 .first;
      }
      mine.group = it->second.get();
    }
    mine.bucket = std::move(b);
    mine_.push_back(std::move(mine));
  }
}

void GradSync::sync_gradients() {
  for (auto& b : mine_) {
    if (b.group == nullptr) continue;
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
}

std::vector<std::unique_ptr<Transport>> GradSync::release_groups() {
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& b : mine_) b.group = nullptr;
  for (auto& [ranks, t] : groups_) out.push_back(std::move(t));
  groups_.clear();
  return out;
}

std::pair<double, double> GradSync::global_norm_and_loss(double local_loss) {
  double sq = 0.0;
  for (int l : owned_layers_) {
    for (const auto& [name, p] : layers_.at(l)->parameter_list()) {
      sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    }
  }
  auto t = torch::tensor({sq, local_loss}, torch::kFloat64);
  if (world_ != nullptr && world_->size() > 1) world_->allreduce_sum(t);
  return {t[0].item<double>(), t[1].item<double>()};
}

}  // namespace bw::runtime
