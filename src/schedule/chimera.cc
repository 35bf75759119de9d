// Chimera (Li & Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
// Bidirectional Pipelines", SC'21 §3): two replicas of the model's P stages with duplicated
// weights, one running down the devices and one running up, so each device holds two stages
// (stage d of the down replica, stage P-1-d of the up one) and one replica's ramp fills the
// other's bubble.
//
// Chunks: 0..P-1 are the down replica (chunk s = stage s on device s), P..2P-1 the up one (chunk
// P+s = stage s on device P-1-s); Schedule::chunk_stage says so. Microbatch m goes down when
// (m mod P) < P/2, else up: each basic unit of P microbatches sends half each way. P = 4, B = 4
// (d: down, u: up; F one slot, B two):
//
//   dev 0 | 0d 1d 3u .. 2u 3u3u 2u2u 0d0d 1d1d ...
//   (drawn exactly in docs/images/chimera.svg)
//
// Order. The per-device lists are the order a greedy list scheduler produces in unit time (F = 1,
// B = 2 slots, the paper's assumption): whenever a device is free it runs a ready backward if it
// has one (oldest microbatch first), else a ready forward (oldest first). A replica admits a new
// microbatch only while fewer than P/2 of its microbatches are in flight, so each device holds at
// most P/2 microbatches per replica: peak activation memory <= P*M_a, as 1F1B's device 0. For
// B = P this gives the paper's basic unit; for B > P units follow each other without the flush in
// between (the paper's "direct concatenation" leaves one).
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_chimera(int devices, int microbatches) {
  const int P = devices, B = microbatches, half = P / 2;
  std::vector<int> placement(2 * P), stage(2 * P);
  for (int st = 0; st < P; ++st) {
    placement[st] = st;
    placement[P + st] = P - 1 - st;
    stage[st] = stage[P + st] = st;
  }
  Schedule s = empty_schedule("chimera", P, B, placement);
  s.chunk_stage = stage;

  // Microbatches of each replica, in order.
  std::vector<int> route[2];
  for (int m = 0; m < B; ++m) route[(m % P) < half ? 0 : 1].push_back(m);

  constexpr long long kNever = std::numeric_limits<long long>::max();
  const int C = 2 * P;
  // f_end[c][i], b_end[c][i]: slot at which chunk c finished its F / B of the i-th microbatch of
  // its replica.
  std::vector<std::vector<long long>> f_end(C), b_end(C);
  std::vector<int> next_f(C, 0), next_b(C, 0);
  for (int c = 0; c < C; ++c) {
    const auto n = route[c / P].size();
    f_end[c].assign(n, kNever);
    b_end[c].assign(n, kNever);
  }
  std::vector<std::vector<int>> held(P);
  for (int c = 0; c < C; ++c) held[placement[c]].push_back(c);
  std::vector<long long> busy_until(P, 0);
  int in_flight[2] = {0, 0};
  long long remaining = 2LL * B * P;
  long long t = 0;
  long long last_progress = 0;
  while (remaining > 0) {
    for (int d = 0; d < P; ++d) {
      if (busy_until[d] > t) continue;
      int best_c = -1;
      bool best_backward = false;
      int best_m = 0;
      for (int c : held[d]) {
        const int r = c / P;
        const int st = c % P;
        const auto n = static_cast<int>(route[r].size());
        // Backward candidate.
        if (int i = next_b[c]; i < n && f_end[c][i] <= t && (st == P - 1 || b_end[c + 1][i] <= t)) {
          const int m = route[r][i];
          if (!best_backward || m < best_m) {
            best_c = c;
            best_backward = true;
            best_m = m;
          }
        }
        if (best_backward) continue;
        if (int i = next_f[c]; i < n) {
          const bool input_ready = st == 0 ? in_flight[r] < half : f_end[c - 1][i] <= t;
          const int m = route[r][i];
          if (input_ready && (best_c < 0 || m < best_m)) {
            best_c = c;
            best_m = m;
          }
        }
      }
      if (best_c < 0) continue;
      const int r = best_c / P;
      if (best_backward) {
        const int i = next_b[best_c]++;
        b_end[best_c][i] = t + 2;
        busy_until[d] = t + 2;
        s.actions[d].push_back({ActionKind::B, best_c, route[r][i]});
        if (best_c % P == 0) --in_flight[r];
      } else {
        const int i = next_f[best_c]++;
        f_end[best_c][i] = t + 1;
        busy_until[d] = t + 1;
        s.actions[d].push_back({ActionKind::F, best_c, route[r][i]});
        if (best_c % P == 0) ++in_flight[r];
      }
      --remaining;
      last_progress = t;
    }
    ++t;
    BW_CHECK(t - last_progress < 16, "chimera: list scheduler stalled at slot {}", t);
  }
  return s;
}

}  // namespace bw::schedule::detail
