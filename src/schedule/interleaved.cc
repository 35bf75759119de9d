// Interleaved 1F1B (Megatron-LM, Narayanan et al. SC'21 §2.2): each device holds v chunks,
// chunk c on device c mod P, so a microbatch loops over the devices v times.
//
// P = 2, v = 2, B = 4, T_B = 2 T_F (chunks 0,2 on dev 0 and 1,3 on dev 1; `cFm` is the forward
// of chunk c for microbatch m; one cell per chunk forward):
//
// clang-format off
//   dev 0 | 0F0 0F1 2F0 2F1 0F2 .   2B0---- 0F3 2B1---- 2F2 0B0---- 2F3 0B1---- .   2B2---- .   2B3---- 0B2---- 0B3----
//   dev 1 | .   1F0 1F1 3F0 3B0---- 3F1 3B1---- 1F2 1B0---- 1F3 1B1---- 3F2 3B2---- 3F3 3B3---- 1B2---- 1B3---- .   .
// clang-format on
//
// Order as in current Megatron-core (`get_schedule_table`, `get_pp_rank_microbatches`):
// microbatches go in groups of G (microbatch_group_size_per_vp_stage, default P); virtual step k
// visits, group by group, local chunk j = 0..v-1 for every microbatch of the group. Forward k uses
// that table; backward k uses it with the local chunks reversed. Device d warms up with
// min(vB, 2(P-1-d) + (v-1)G) forwards, then alternates one forward and one backward, then drains.
// Microbatch counts that are not a multiple of P: like Megatron, B mod G must be 0 or >= P (a
// shorter last group makes the first device wait on a microbatch the last device only sends after
// a backward that itself waits on the first device: the dry run shows the cycle); B < P is
// refused. With G = P and B a multiple of P the bubble is (P-1)/(vB+P-1).
#include <algorithm>
#include <utility>

#include "schedule/generators.h"

namespace bw::schedule::detail {

namespace {

// (microbatch, local chunk) for each virtual step, Megatron's schedule table.
std::vector<std::pair<int, int>> schedule_table(int microbatches, int v, int group) {
  std::vector<std::pair<int, int>> table;
  table.reserve(static_cast<size_t>(microbatches) * v);
  for (int first = 0; first < microbatches; first += group) {
    const bool last = first + group >= microbatches;
    const int end = last ? microbatches : first + group;
    for (int j = 0; j < v; ++j)
      for (int m = first; m < end; ++m) table.emplace_back(m, j);
    if (last) break;
  }
  return table;
}

}  // namespace

Schedule make_interleaved(int devices, int microbatches, int v, int group) {
  const int P = devices, B = microbatches;
  Schedule s = empty_schedule("interleaved", P, B, loop_placement(P, P * v));
  const auto table = schedule_table(B, v, group);
  const int total = B * v;
  for (int d = 0; d < P; ++d) {
    auto& list = s.actions[d];
    const int warmup = std::min(total, 2 * (P - 1 - d) + (v - 1) * group);
    auto forward = [&](int k) {
      auto [m, j] = table[k];
      list.push_back({ActionKind::F, j * P + d, m});
    };
    auto backward = [&](int k) {
      auto [m, j] = table[k];
      list.push_back({ActionKind::B, (v - 1 - j) * P + d, m});
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

}  // namespace bw::schedule::detail
