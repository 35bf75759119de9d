// Hanayo wave schedule (Liu et al., "Hanayo: Harnessing Wave-like Pipeline Parallelism for
// Enhanced Large Model Training Efficiency", SC'23 §3).
//
// S = 2WP chunks on P devices in W waves: chunk s sits on device s mod P when floor(s/P) is even
// and on P-1-(s mod P) otherwise, so the model runs down the devices, turns, runs back up, and so
// on (the first and last chunks share device 0; at each turn two consecutive chunks share a
// device and hand off locally). P = 2, W = 1, B = 2, T_B = 2 T_F (dev 0 holds chunks 0 and 3,
// dev 1 holds 1 and 2; one cell per chunk forward):
//
//   dev 0 | 0F0 0F1 .   3F0 3B0---- 3F1 3B1---- .   0B0---- .   .   0B1----
//   dev 1 | .   1F0 2F0 1F1 2F1 .   2B0---- 1B0---- 2B1---- 1B1---- .   .
//
// Order. Each device runs its actions in the order of the slot keys
//     F(s, m) = t_m + s,       B(s, m) = t_m + 2S - 1 - s,
// the unit-time timetable in which microbatch m enters at t_m and crosses one chunk per slot.
// For B <= P, t_m = 2m: the paper's rule (F = 2m+s, B = 2m+2S-1-s), which reproduces every
// per-device order of its figures; no two actions of a device share a key.
//
// B > P. The naive rule t_m = 2m for every m keeps up to W*P microbatches in flight (memory grows
// to W*P*M_a). Microbatches go instead in groups of P, group g entering one chunk-sweep (S slots)
// after group g-1:
//     t_m = 2 (m mod P) + S floor(m / P).
// Group g's forwards then run while group g-1 runs its backwards: of each pair (microbatch j of
// group g-1, microbatch j of group g) one is in its forward sweep with chunks [0, x) live and the
// other in its backward sweep with chunks [0, S-x) live, together one chunk per P-window, i.e.
// M_a per device, so a device holds at most P*M_a (1F1B's peak) — checked exactly by the tests
// over grids of P, W and B. At most 2P microbatches are in flight. Keys of adjacent groups can
// tie (a forward of group g with a backward of group g-1); the backward goes first (it frees
// memory). Every dependency has a strictly smaller key, so any such order is deadlock-free.
// With T_B = 2 T_F the bubble is below 1F1B's (P-1)/(B+P-1) for every B > P tested; the numbers
// are in docs/schedules.md.
#include <algorithm>

#include "core/check.h"
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_hanayo(int devices, int microbatches, int waves) {
  const int P = devices, B = microbatches;
  const int S = 2 * waves * P;
  Schedule s = empty_schedule("hanayo", P, B, wave_placement(P, S));
  auto entry = [&](int m) -> long long { return 2LL * (m % P) + 1LL * S * (m / P); };
  // Per key at most one F and one B on a device (see above): two slot tables sort them in linear
  // time.
  const long long span = entry(B - 1) + 2LL * S;
  std::vector<Action> forward(static_cast<size_t>(span)), backward(static_cast<size_t>(span));
  std::vector<char> has_f(static_cast<size_t>(span)), has_b(static_cast<size_t>(span));
  std::vector<std::vector<int>> held(P);
  for (int c = 0; c < S; ++c) held[s.chunk_device[c]].push_back(c);
  for (int d = 0; d < P; ++d) {
    std::fill(has_f.begin(), has_f.end(), 0);
    std::fill(has_b.begin(), has_b.end(), 0);
    long long lo = span, hi = 0;
    for (int m = 0; m < B; ++m) {
      const long long t = entry(m);
      for (int c : held[d]) {
        const long long kf = t + c, kb = t + 2LL * S - 1 - c;
        BW_CHECK(!has_f[kf] && !has_b[kb], "hanayo: device {} has two {} at slot {}", d,
                 has_f[kf] ? "forwards" : "backwards", has_f[kf] ? kf : kb);
        forward[kf] = {ActionKind::F, c, m};
        backward[kb] = {ActionKind::B, c, m};
        has_f[kf] = has_b[kb] = 1;
        lo = std::min(lo, kf);
        hi = std::max(hi, kb);
      }
    }
    auto& list = s.actions[d];
    for (long long k = lo; k <= hi; ++k) {
      if (has_b[k]) list.push_back(backward[k]);
      if (has_f[k]) list.push_back(forward[k]);
    }
  }
  return s;
}

}  // namespace bw::schedule::detail
