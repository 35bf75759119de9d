// Chimera (Li & Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
// Bidirectional Pipelines", SC'21 §3): two replicas of the model's P stages with duplicated
// weights, one running down the devices and one running up, so each device holds two stages
// (stage d of the down replica, stage P-1-d of the up one) and one replica's ramp fills the
// other's bubble.
//
// Chunks: 0..P-1 are the down replica (chunk s = stage s on device s), P..2P-1 the up one (chunk
// P+s = stage s on device P-1-s); Schedule::chunk_stage says so. Microbatch m goes down when
// (m mod P) < P/2, else up: each unit of P microbatches sends half each way. P = 4, B = 4,
// T_B = 2 T_F (dev d holds chunks d and 7-d; `cFm`: forward of chunk c, microbatch m):
//
//   dev 0 | 0F0 0F1 .   .   7F2 7B2---- 7F3 7B3---- .   0B0---- 0B1---- .   .   .   .
//   dev 1 | .   1F0 1F1 6F2 .   6F3 .   6B2---- 1B0---- 1B1---- 6B3---- .   .   .   .
//   dev 2 | .   5F2 2F0 2F1 5F3 .   2B0---- .   2B1---- 5B2---- .   .   5B3---- .   .
//   dev 3 | 4F2 4F3 .   3F0 3B0---- 3F1 3B1---- .   .   .   .   4B2---- .   .   4B3----
//
// Order. Each replica on its own is a 1F1B pipeline over its microbatches (stage s: F x, then
// B x-(P-1-s)). The two per-chunk queues of a device are merged by a list scheduler in unit time
// (F = 1 slot, B = 2, the paper's assumption): whenever the device is free it runs the head of
// whichever queue is ready, a backward before a forward, older microbatches first. The merged
// order is what the lists hold; it is valid for any costs.
//
// Memory: for B <= P each device holds at most P microbatch-stages (the paper's basic unit: P/2
// per replica, stage-sized, so <= P*M_a as 1F1B's device 0). For B > P the two 1F1B pipelines
// keep P-d and d+1 in flight on device d: (P+1)*M_a, one stage more than 1F1B's peak, for a
// bubble below 1F1B's (docs/schedules.md). The paper's "direct concatenation" of basic units
// would keep P*M_a but repeat the basic unit's bubble for every unit.
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_chimera(int devices, int microbatches) {
  const int P = devices, B = microbatches, C = 2 * P;
  std::vector<int> placement(C), stage(C);
  for (int st = 0; st < P; ++st) {
    placement[st] = st;
    placement[P + st] = P - 1 - st;
    stage[st] = stage[P + st] = st;
  }
  Schedule s = empty_schedule("chimera", P, B, placement);
  s.chunk_stage = stage;

  // Microbatches of each replica, in order; queues hold indices into them.
  std::vector<int> route[2];
  for (int m = 0; m < B; ++m) route[(m % P) < P / 2 ? 0 : 1].push_back(m);
  std::vector<std::vector<Action>> queue(C);
  for (int c = 0; c < C; ++c) {
    const int n = static_cast<int>(route[c / P].size()), lag = P - 1 - c % P;
    for (int x = 0; x < n + lag; ++x) {
      if (x < n) queue[c].push_back({ActionKind::F, c, x});
      if (x >= lag) queue[c].push_back({ActionKind::B, c, x - lag});
    }
  }

  constexpr long long kNever = std::numeric_limits<long long>::max();
  std::vector<std::vector<long long>> f_end(C), b_end(C);
  for (int c = 0; c < C; ++c) {
    f_end[c].assign(route[c / P].size(), kNever);
    b_end[c].assign(route[c / P].size(), kNever);
  }
  std::vector<size_t> head(C, 0);
  std::vector<long long> busy_until(P, 0);
  auto ready = [&](int c, long long t) {
    if (head[c] >= queue[c].size()) return false;
    const Action& a = queue[c][head[c]];
    const int st = c % P, i = a.microbatch;
    if (a.kind == ActionKind::F) return st == 0 || f_end[c - 1][i] <= t;
    return f_end[c][i] <= t && (st == P - 1 || b_end[c + 1][i] <= t);
  };
  auto before = [&](int a_chunk, int b_chunk) {  // should a_chunk's head go before b_chunk's?
    const Action& a = queue[a_chunk][head[a_chunk]];
    const Action& b = queue[b_chunk][head[b_chunk]];
    if (a.kind != b.kind) return a.kind == ActionKind::B;
    return route[a_chunk / P][a.microbatch] < route[b_chunk / P][b.microbatch];
  };
  long long remaining = 2LL * B * P, t = 0, last_progress = 0;
  while (remaining > 0) {
    for (int d = 0; d < P; ++d) {
      if (busy_until[d] > t) continue;
      int pick = -1;
      for (int c : {d, C - 1 - d})
        if (ready(c, t) && (pick < 0 || before(c, pick))) pick = c;
      if (pick < 0) continue;
      const Action a = queue[pick][head[pick]++];
      const int slots = a.kind == ActionKind::F ? 1 : 2;
      (a.kind == ActionKind::F ? f_end : b_end)[pick][a.microbatch] = t + slots;
      busy_until[d] = t + slots;
      s.actions[d].push_back({a.kind, pick, route[pick / P][a.microbatch]});
      --remaining;
      last_progress = t;
    }
    ++t;
    BW_CHECK(t - last_progress <= 2 * P + 2, "chimera: merge stalled at slot {} (P {}, B {})", t, P,
             B);
  }
  return s;
}

}  // namespace bw::schedule::detail
