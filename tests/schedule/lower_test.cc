// Lowering: the contract with the runtime (schedule.h), checked action by action.
#include "schedule/lower.h"

#include <gtest/gtest.h>

#include "schedule/generate.h"

namespace bw::schedule {
namespace {

int position(const std::vector<Action>& list, const Action& a) {
  for (int k = 0; k < static_cast<int>(list.size()); ++k)
    if (list[k] == a) return k;
  return -1;
}

TEST(Lower, InsertsSendsAndReceivesAroundEveryCrossDeviceHandOff) {
  for (const auto& kind : schedule_kinds()) {
    ScheduleSpec spec{.kind = kind, .devices = 4, .microbatches = 8};
    const Schedule s = generate(spec);
    const Schedule l = lower(s);
    EXPECT_EQ(strip_comm(l).actions, s.actions) << kind << ": lowering changed the compute order";
    for (int m = 0; m < s.num_microbatches; ++m)
      for (int c = 0; c < s.num_chunks; ++c) {
        const int d = s.chunk_device[c];
        const auto& list = l.actions[d];
        const int f = position(list, {ActionKind::F, c, m});
        if (f < 0) continue;  // Chimera: not this microbatch's replica
        int back = position(list, {ActionKind::B, c, m});
        if (back < 0) back = position(list, {ActionKind::I, c, m});
        ASSERT_GE(back, 0);
        const int p = s.prev_chunk(c), n = s.next_chunk(c);
        const int recv_f = position(list, {ActionKind::RECV_F, c, m});
        const int send_b = position(list, {ActionKind::SEND_B, c, m});
        if (p >= 0 && s.chunk_device[p] != d) {
          EXPECT_GE(recv_f, 0) << kind << " " << c << "," << m;
          EXPECT_LT(recv_f, f) << kind;
          EXPECT_GT(send_b, back) << kind;
        } else {
          EXPECT_EQ(recv_f, -1) << kind << ": local or first chunk needs no RECV_F";
          EXPECT_EQ(send_b, -1) << kind;
        }
        const int send_f = position(list, {ActionKind::SEND_F, c, m});
        const int recv_b = position(list, {ActionKind::RECV_B, c, m});
        if (n >= 0 && s.chunk_device[n] != d) {
          EXPECT_GT(send_f, f) << kind;
          EXPECT_GE(recv_b, 0) << kind;
          EXPECT_LT(recv_b, back) << kind;
        } else {
          EXPECT_EQ(send_f, -1) << kind;
          EXPECT_EQ(recv_b, -1) << kind;
        }
      }
  }
}

TEST(Lower, HanayoTurnPointsAndTheZbVFoldHandOffLocally) {
  // Hanayo P=4, W=1: chunks 3 and 4 both live on device 3; 7 and 0 on device 0.
  const Schedule h = lower(generate({.kind = "hanayo", .devices = 4, .microbatches = 4}));
  EXPECT_EQ(position(h.actions[3], {ActionKind::SEND_F, 3, 0}), -1);
  EXPECT_EQ(position(h.actions[3], {ActionKind::RECV_F, 4, 0}), -1);
  EXPECT_EQ(position(h.actions[3], {ActionKind::SEND_B, 4, 0}), -1);
  EXPECT_EQ(position(h.actions[3], {ActionKind::RECV_B, 3, 0}), -1);
  EXPECT_GE(position(h.actions[3], {ActionKind::SEND_F, 4, 0}), 0);  // to device 2
  const Schedule v = lower(generate({.kind = "zb-v", .devices = 4, .microbatches = 8}));
  EXPECT_EQ(position(v.actions[3], {ActionKind::SEND_F, 3, 0}), -1);
  EXPECT_EQ(position(v.actions[3], {ActionKind::RECV_B, 3, 0}), -1);
}

TEST(Lower, ReceivesArePostedOneComputeAhead) {
  // 1F1B device 1 of 3: RECV_F 1 m comes before the compute that precedes F 1 m.
  const Schedule s = generate({.kind = "1f1b", .devices = 3, .microbatches = 4});
  const Schedule l = lower(s, {.recv_lookahead = 1, .receives_in_time = false});
  std::string out;
  for (const auto& a : l.actions[1]) out += to_string(a) + " ";
  EXPECT_EQ(out,
            "1RECV_F0 1RECV_F1 1F0 1SEND_F0 1RECV_B0 1F1 1SEND_F1 1RECV_F2 1B0 1SEND_B0 "
            "1RECV_B1 1F2 1SEND_F2 1RECV_F3 1B1 1SEND_B1 1RECV_B2 1F3 1SEND_F3 1RECV_B3 1B2 "
            "1SEND_B2 1B3 1SEND_B3 ");
  const Schedule l0 = lower(s, {.recv_lookahead = 0, .receives_in_time = false});
  out.clear();
  for (const auto& a : l0.actions[2]) out += to_string(a) + " ";
  EXPECT_EQ(out.substr(0, 35), "2RECV_F0 2F0 2B0 2SEND_B0 2RECV_F1 ");
}

TEST(Lower, JustInTimeReceivesDeadlockOneFOneBWithBlockingSendsUntilMovedEarlier) {
  const Schedule s = generate({.kind = "1f1b", .devices = 4, .microbatches = 8});
  const Schedule late = lower(s, {.recv_lookahead = 0, .receives_in_time = false});
  EXPECT_TRUE(check(late).ok);  // fine with isend/irecv
  const auto strict = check(late, {.semantics = CommSemantics::kRendezvous});
  EXPECT_FALSE(strict.ok);
  EXPECT_NE(strict.problem.find("deadlock"), std::string::npos) << strict.problem;
  const Schedule fixed = lower(s, {.recv_lookahead = 0, .receives_in_time = true});
  const auto ok = check(fixed, {.semantics = CommSemantics::kRendezvous});
  EXPECT_TRUE(ok.ok) << ok.problem << "\n" << ok.grid;
}

TEST(Lower, EveryGeneratorRunsWithBlockingSendsForEveryLookahead) {
  for (const auto& kind : schedule_kinds())
    for (int P : {2, 4, 6})
      for (int B : {P, P + 2, 3 * P})
        for (int L : {0, 1, 2, 4}) {
          ScheduleSpec spec{.kind = kind, .devices = P, .microbatches = B};
          try {
            check_spec(spec);
          } catch (const ConfigError&) {
            continue;
          }
          const Schedule l = lower(generate(spec), {.recv_lookahead = L});
          const auto r = check(l, {.semantics = CommSemantics::kRendezvous});
          EXPECT_TRUE(r.ok) << kind << " P=" << P << " B=" << B << " L=" << L << "\n" << r.problem;
        }
}

TEST(Lower, RefusesAnAlreadyLoweredSchedule) {
  const Schedule l = lower(generate({.kind = "gpipe", .devices = 2, .microbatches = 2}));
  EXPECT_THROW(lower(l), ConfigError);
  EXPECT_THROW(
      lower(generate({.kind = "gpipe", .devices = 2, .microbatches = 2}), {.recv_lookahead = -1}),
      ConfigError);
}

}  // namespace
}  // namespace bw::schedule
