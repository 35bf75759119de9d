// Hanayo wave schedule (Liu et al., "Hanayo: Harnessing Wave-like Pipeline Parallelism for
// Enhanced Large Model Training Efficiency", SC'23 §3).
//
// S = 2WP chunks on P devices in W waves: chunk s sits on device s mod P when floor(s/P) is even
// and on P-1-(s mod P) otherwise, so the model runs down the devices, turns, runs back up, and so
// on (the first and last chunks share device 0; at each turn two consecutive chunks share a
// device and hand off locally). P = 2, W = 1 (4 chunks; dev 0 holds 0,3, dev 1 holds 1,2):
//
//   unit slots   0   1   2   3   4   5   6   7   8   9
//   dev 0 |     0F0 .   0F1 3F0 3B0 3F1 3B1 0B0 .   0B1
//   dev 1 |     .   1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1 .
//
// Order. Each device runs its actions in the order of the slot keys
//     F(s, m) = t_m + s,       B(s, m) = t_m + 2S - 1 - s,
// the unit-time timetable in which a microbatch enters at t_m and crosses one chunk per slot. For
// B <= P, t_m = 2m: this is the paper's rule (F = 2m+s, B = 2m+2S-1-s) and reproduces every
// per-device order of its figures; no two actions of one device share a key.
//
// B > P: the naive rule t_m = 2m keeps up to W*P microbatches in flight (activation memory grows
// to W*P*M_a). We bound it: microbatch m may enter only when microbatch m-P has left (its last
// backward, on chunk 0, is done), t_m = max(2m, t_{m-P} + 2S), which is
//     t_m = 2 (m mod P) + 2S floor(m / P).
// At most P microbatches are in flight, each holding at most M_a on a device, so activation
// memory stays <= P*M_a (1F1B's peak) on every device. The keys of consecutive groups interleave
// without colliding (a device's F keys of group g+1 and B keys of group g differ in parity), so
// in unit time every device is busy from its first slot to its last: makespan 4WB + 2P - 2 slots,
// bubble (P-1)/(2WB+P-1), below 1F1B's (P-1)/(B+P-1) for every W >= 1. With T_B = 2 T_F the
// simulated numbers are in docs/schedules.md.
#include <algorithm>

#include "core/check.h"
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_hanayo(int devices, int microbatches, int waves) {
  const int P = devices, B = microbatches;
  const int S = 2 * waves * P;
  Schedule s = empty_schedule("hanayo", P, B, wave_placement(P, S));
  auto entry = [&](int m) -> long long { return 2LL * (m % P) + 2LL * S * (m / P); };
  // Keys are distinct per device, so a slot table sorts them in linear time.
  const long long span = entry(B - 1) + 2LL * S;
  std::vector<Action> slots(static_cast<size_t>(span));
  std::vector<char> used(static_cast<size_t>(span));
  std::vector<std::vector<int>> held(P);
  for (int c = 0; c < S; ++c) held[s.chunk_device[c]].push_back(c);
  for (int d = 0; d < P; ++d) {
    std::fill(used.begin(), used.end(), 0);
    long long lo = span, hi = 0;
    for (int m = 0; m < B; ++m) {
      const long long t = entry(m);
      for (int c : held[d]) {
        const long long kf = t + c, kb = t + 2LL * S - 1 - c;
        slots[kf] = {ActionKind::F, c, m};
        slots[kb] = {ActionKind::B, c, m};
        used[kf] += 1;
        used[kb] += 1;
        lo = std::min(lo, kf);
        hi = std::max(hi, kb);
      }
    }
    auto& list = s.actions[d];
    for (long long k = lo; k <= hi; ++k) {
      BW_CHECK(used[k] <= 1, "hanayo: device {} has two actions at slot {}", d, k);
      if (used[k]) list.push_back(slots[k]);
    }
  }
  return s;
}

}  // namespace bw::schedule::detail
