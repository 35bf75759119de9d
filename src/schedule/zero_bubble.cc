// Zero Bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24): the backward is
// split into I (gradient for the input, on the critical path) and W (gradient for the weights,
// needed by nobody downstream), and W fills what would be bubbles.
//
// ZB-H1 (§3, handcrafted, 1F1B's peak memory). One chunk per device. Device d runs, for
// x = 0, 1, ...:  F x,  I x-(P-1-d),  W x-(P-1)   (each when in [0, B)).
// Warm-up: P-1-d lone forwards, then d (F, I) pairs; steady state (F, I, W) triples; cool-down
// P-1-d (I, W) pairs, then d lone W. P = 3, B = 4, T_F = T_I = T_W:
//
//   dev 0 | F0 F1 F2 .  .  I0 W0 F3 I1 W1 I2 W2 I3 W3
//   dev 1 | .  F0 F1 .  I0 F2 I1 W0 F3 I2 W1 I3 W2 W3
//   dev 2 | .  .  F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3
//
// Activations are held from F to W: every device keeps at most P microbatches, 1F1B's peak
// P*M_a. Bubble (P-1)(T_F + T_I - T_W) per device whenever T_W <= min(T_F, T_I) (tests), a
// third of 1F1B's (P-1)(T_F + T_I + T_W) when T_F = T_I = T_W.
//
// ZB-V (§6): 2P chunks in a V, chunk c on device c for c < P and on 2P-1-c otherwise, so device d
// holds chunks d and 2P-1-d and the turn (chunks P-1, P) is local on the last device. Order as in
// PyTorch's ScheduleZBVZeroBubble: warm-up 2(P-d)-1 forwards of the first chunk, d forward pairs
// (second chunk, first chunk), P-d rounds of (F, I, W) of the second chunk; steady rounds of
// (F, I, W) on the first chunk then the second; cool-down d rounds of I on both, P-d rounds of
// (I, W) of the first chunk, then the remaining W. Schedules with B < 2P-1 are those of 2P-1
// microbatches with the missing microbatches' actions left out. Peak memory P*M_a (each chunk holds
// half a stage), zero bubble when T_F = T_I = T_W and B >= 2P - 1 except the unavoidable ramp.
// P = 2, B = 4, T_F = T_I = T_W (dev 0 holds chunks 0 and 3, dev 1 holds 1 and 2):
//
// clang-format off
//   dev 0 | 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3 .
//   dev 1 | .   1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3
// clang-format on
#include <algorithm>

#include "schedule/generators.h"

namespace bw::schedule::detail {

Schedule make_zb_h1(int devices, int microbatches) {
  const int P = devices, B = microbatches;
  Schedule s = empty_schedule("zb-h1", P, B, loop_placement(P, P));
  for (int d = 0; d < P; ++d) {
    auto& list = s.actions[d];
    for (int x = 0; x < B + P - 1; ++x) {
      if (x < B) list.push_back({ActionKind::F, d, x});
      const int i = x - (P - 1 - d);
      if (i >= 0 && i < B) list.push_back({ActionKind::I, d, i});
      const int w = x - (P - 1);
      if (w >= 0 && w < B) list.push_back({ActionKind::W, d, w});
    }
  }
  return s;
}

Schedule make_zb_v(int devices, int microbatches) {
  const int P = devices, B = microbatches;
  Schedule s = empty_schedule("zb-v", P, B, wave_placement(P, 2 * P));
  const int n = std::max(2 * P - 1, B);  // the order of n microbatches, filtered to B below
  for (int d = 0; d < P; ++d) {
    const int c0 = d, c1 = 2 * P - 1 - d;
    std::vector<Action> ops;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (P - d) - 1; ++k) ops.push_back({ActionKind::F, c0, f0++});
    for (int k = 0; k < d; ++k) {
      ops.push_back({ActionKind::F, c1, f1++});
      ops.push_back({ActionKind::F, c0, f0++});
    }
    for (int k = 0; k < P - d; ++k) {
      ops.push_back({ActionKind::F, c1, f1++});
      ops.push_back({ActionKind::I, c1, b1});
      ops.push_back({ActionKind::W, c1, b1});
      ++b1;
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) ops.push_back({ActionKind::F, c0, f0++});
      ops.push_back({ActionKind::I, c0, b0});
      ops.push_back({ActionKind::W, c0, b0});
      ++b0;
      ops.push_back({ActionKind::F, c1, f1++});
      ops.push_back({ActionKind::I, c1, b1});
      ops.push_back({ActionKind::W, c1, b1});
      ++b1;
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < d; ++k) {
      ops.push_back({ActionKind::I, c0, b0++});
      ops.push_back({ActionKind::I, c1, b1++});
    }
    for (int k = 0; k < P - d; ++k) {
      ops.push_back({ActionKind::I, c0, b0++});
      ops.push_back({ActionKind::W, c0, w0++});
    }
    while (w1 < b1) ops.push_back({ActionKind::W, c1, w1++});
    while (w0 < b0) ops.push_back({ActionKind::W, c0, w0++});
    auto& list = s.actions[d];
    for (const auto& a : ops)
      if (a.microbatch < B) list.push_back(a);
  }
  return s;
}

}  // namespace bw::schedule::detail
