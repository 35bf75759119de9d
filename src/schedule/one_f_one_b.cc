// 1F1B (PipeDream-Flush; DAPPLE, Fan et al. PPoPP'21): warm up with P-1-d forwards, then alternate
// one forward and one backward, then drain the backwards. One chunk per device.
//
// P = 3, B = 4, T_B = 2 T_F (`breakwater schedule --kind 1f1b -P 3 -B 4 --ascii`):
//
//   dev 0 | F0 F1 F2 .  .  .  .  B0--- F3 B1--- .  B2--- .  B3---
//   dev 1 | .  F0 F1 .  .  B0--- F2 B1--- F3 B2--- .  B3--- .  .
//   dev 2 | .  .  F0 B0--- F1 B1--- F2 B2--- F3 B3--- .  .  .  .
//
// Device d runs, for x = 0, 1, ...: F x (if x < B), then B x-(P-1-d) (if in range). It keeps at
// most P-d microbatches in flight: peak P*M_a on device 0, M_a on the last. Bubble (P-1)/(B+P-1).
// B < P is allowed (all forwards, then all backwards).
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_1f1b(int devices, int microbatches) {
  Schedule s = empty_schedule("1f1b", devices, microbatches, loop_placement(devices, devices));
  for (int d = 0; d < devices; ++d) {
    auto& list = s.actions[d];
    const int lag = devices - 1 - d;
    for (int x = 0; x < microbatches + lag; ++x) {
      if (x < microbatches) list.push_back({ActionKind::F, d, x});
      if (x - lag >= 0) list.push_back({ActionKind::B, d, x - lag});
    }
  }
  return s;
}

}  // namespace bw::schedule::detail
