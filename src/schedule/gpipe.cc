// GPipe (Huang et al., NeurIPS'19): every forward, then every backward, one chunk per device.
//
// P = 3 devices, B = 4 microbatches, T_B = 2 T_F (`breakwater schedule --kind gpipe -P 3 -B 4
// --ascii`; one cell per forward, `Fm`/`Bm` for microbatch m, `.` idle):
//
//   dev 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0--- B1--- B2--- B3---
//   dev 1 | .  F0 F1 F2 F3 .  .  .  B0--- B1--- B2--- B3--- .  .
//   dev 2 | .  .  F0 F1 F2 F3 B0--- B1--- B2--- B3--- .  .  .  .
//
// Backwards run in microbatch order, as in PyTorch's ScheduleGPipe.
//
// Bubble (P-1)/(B+P-1) of the makespan on every device; every device keeps all B microbatches'
// activations before its first backward (peak B*M_a).
#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_gpipe(int devices, int microbatches) {
  Schedule s = empty_schedule("gpipe", devices, microbatches, loop_placement(devices, devices));
  for (int d = 0; d < devices; ++d) {
    auto& list = s.actions[d];
    for (int m = 0; m < microbatches; ++m) list.push_back({ActionKind::F, d, m});
    for (int m = 0; m < microbatches; ++m) list.push_back({ActionKind::B, d, m});
  }
  return s;
}

}  // namespace bw::schedule::detail
