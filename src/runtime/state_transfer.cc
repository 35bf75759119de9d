#include "runtime/state_transfer.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/check.h"

namespace bw::runtime {

TransferResult transfer_state(const ModelState& state, Transport& world,
                              const std::vector<LayerCopy>& copies, int self,
                              const std::vector<int>& workers,
                              const std::function<void()>& posted) {
  const auto t0 = std::chrono::steady_clock::now();
  auto rank_of = [&](int worker) {
    auto it = std::find(workers.begin(), workers.end(), worker);
    BW_CHECK(it != workers.end(), "worker {} is not in the generation", worker);
    return static_cast<int>(it - workers.begin());
  };
  struct Incoming {
    int layer;
    int64_t begin;
    LayerState state;
    torch::Tensor step;
    std::unique_ptr<Request> a, b;
  };
  std::vector<Incoming> incoming;
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<torch::Tensor> keep;  // alive until their sends complete
  for (size_t i = 0; i < copies.size(); ++i) {
    const auto& c = copies[i];
    const int tag = static_cast<int>(2 * i);
    if (c.from == self) {
      auto s = state.export_range(c.layer, c.begin, c.end);
      auto step = torch::tensor({s.adam_step}, torch::kInt64);
      keep.push_back(s.flat);
      keep.push_back(step);
      sends.push_back(world.isend(s.flat, rank_of(c.to), tag));
      sends.push_back(world.isend(step, rank_of(c.to), tag + 1));
    } else if (c.to == self) {
      Incoming in{c.layer, c.begin, LayerState::empty(c.end - c.begin, state.placement()),
                  torch::empty({1}, torch::kInt64), nullptr, nullptr};
      in.a = world.irecv(in.state.flat, rank_of(c.from), tag);
      in.b = world.irecv(in.step, rank_of(c.from), tag + 1);
      incoming.push_back(std::move(in));
    }
  }
  if (posted) posted();
  for (auto& in : incoming) {
    in.a->wait();
    in.b->wait();
  }
  for (auto& s : sends) s->wait();
  TransferResult out;
  for (auto& in : incoming) {
    out.bytes_in += static_cast<int64_t>(in.state.flat.nbytes() + in.step.nbytes());
    in.state.adam_step = in.step.item<int64_t>();
    out.received[in.layer].emplace_back(in.begin, std::move(in.state));
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void install(ModelState& state, const RunLayout& layout, int rank,
             const std::vector<int>& mine, const ReceivedPieces& received) {
  static const std::vector<std::pair<int64_t, LayerState>> kNone;
  for (int l : mine) {
    const int64_t n = model::num_parameters(state.model(), l);
    const bool whole = !layout.segmented(l);
    const auto want = whole ? std::make_pair(int64_t{0}, n) : layout.shard_range(rank, n);
    if (whole && state.holds(l)) continue;
    if (!whole && state.holds_shard(l) && state.held_range(l) == want) continue;
    auto it = received.find(l);
    state.assemble(l, want.first, want.second, whole, it == received.end() ? kNone : it->second);
  }
}


}  // namespace bw::runtime
