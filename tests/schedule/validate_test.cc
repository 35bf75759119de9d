// Validator: every way a schedule can be wrong is caught, named, and shown on the grid.
#include "schedule/validate.h"

#include <gtest/gtest.h>

#include "schedule/generate.h"

namespace bw::schedule {
namespace {

Schedule one_f_one_b() { return generate({.kind = "1f1b", .devices = 3, .microbatches = 4}); }

// Expects validation to fail with `needle` in the message; returns the error for more checks.
ScheduleError expect_invalid(const Schedule& s, const std::string& needle,
                             ValidateOptions options = {}) {
  try {
    validate(s, options);
  } catch (const ScheduleError& e) {
    EXPECT_NE(e.problem().find(needle), std::string::npos)
        << "expected '" << needle << "' in: " << e.what();
    return e;
  }
  ADD_FAILURE() << "validate() accepted a schedule that should fail with '" << needle << "'";
  return ScheduleError("", "");
}

void erase(Schedule& s, int device, const Action& a) {
  auto& list = s.actions[device];
  list.erase(std::find(list.begin(), list.end(), a));
}

TEST(Validate, AcceptsTheGeneratedSchedule) { EXPECT_NO_THROW(validate(one_f_one_b())); }

TEST(Validate, MissingBackwardIsNamed) {
  Schedule s = one_f_one_b();
  erase(s, 1, {ActionKind::B, 1, 2});
  expect_invalid(s, "1B2 is missing");
}

TEST(Validate, MissingForwardIsNamed) {
  Schedule s = one_f_one_b();
  erase(s, 2, {ActionKind::F, 2, 3});
  erase(s, 2, {ActionKind::B, 2, 3});
  expect_invalid(s, "2F3 is missing");
}

TEST(Validate, DuplicateActionIsMarkedOnTheGrid) {
  Schedule s = one_f_one_b();
  s.actions[0].push_back({ActionKind::F, 0, 1});
  auto e = expect_invalid(s, "0F1 appears twice");
  EXPECT_NE(e.grid().find(">0F1<"), std::string::npos) << e.grid();
  EXPECT_NE(e.grid().find("dev 0"), std::string::npos) << e.grid();
}

TEST(Validate, BackwardBeforeItsForwardIsAnError) {
  Schedule s = one_f_one_b();
  auto& l = s.actions[2];  // 2F0 2B0 ... -> 2B0 2F0 ...
  std::swap(l[0], l[1]);
  auto e = expect_invalid(s, "2B0 comes before its forward 2F0");
  EXPECT_NE(e.grid().find(">2B0<"), std::string::npos) << e.grid();
}

TEST(Validate, WeightGradientBeforeItsInputGradientIsAnError) {
  Schedule s = generate({.kind = "zb-h1", .devices = 2, .microbatches = 2});
  auto& l = s.actions[1];
  auto i = std::find(l.begin(), l.end(), Action{ActionKind::I, 1, 0});
  auto w = std::find(l.begin(), l.end(), Action{ActionKind::W, 1, 0});
  std::iter_swap(i, w);
  expect_invalid(s, "W needs I first");
}

TEST(Validate, SplitAndFullBackwardOfOneChunkIsAnError) {
  Schedule s = generate({.kind = "zb-h1", .devices = 2, .microbatches = 2});
  s.actions[0].push_back({ActionKind::B, 0, 1});
  expect_invalid(s, "both a full backward");
}

TEST(Validate, ActionOnTheWrongDeviceIsAnError) {
  Schedule s = one_f_one_b();
  s.actions[1][0] = {ActionKind::F, 2, 0};
  expect_invalid(s, "belongs to device 2");
}

TEST(Validate, OutOfRangeNumbersAreErrors) {
  Schedule s = one_f_one_b();
  s.actions[0][0].microbatch = 9;
  expect_invalid(s, "microbatch 9, outside [0, 4)");
  s = one_f_one_b();
  s.chunk_device[1] = 7;
  expect_invalid(s, "chunk 1 is placed on device 7");
}

TEST(Validate, ACycleIsADeadlockWithTheStuckActionsMarked) {
  // Device 1 wants 2B0 before it sends 1F1; device 2 wants 1F1 before it runs 2F0 (and 2B0).
  Schedule s = one_f_one_b();
  auto parse = [](std::initializer_list<const char*> text) {
    std::vector<Action> out;
    for (const char* t : text) out.push_back(*parse_action(t));
    return out;
  };
  s.actions[1] = parse({"1F0", "1B0", "1F1", "1B1", "1F2", "1B2", "1F3", "1B3"});
  s.actions[2] = parse({"2F1", "2B1", "2F0", "2B0", "2F2", "2B2", "2F3", "2B3"});
  auto e = expect_invalid(s, "deadlock");
  EXPECT_NE(e.problem().find("device 1 waits at 1B0 for the backward of chunk 2"),
            std::string::npos)
      << e.problem();
  EXPECT_NE(e.problem().find("device 2 waits at 2F1 for 1F1 (device 1)"), std::string::npos)
      << e.problem();
  EXPECT_NE(e.grid().find(">1B0<"), std::string::npos) << e.grid();
  EXPECT_NE(e.grid().find(">2F1<"), std::string::npos) << e.grid();
  EXPECT_NE(e.grid().find("stuck"), std::string::npos) << e.grid();
}

TEST(Validate, LoweredScheduleNeedsEverySendAndReceive) {
  Schedule l = lower(one_f_one_b());
  erase(l, 0, {ActionKind::SEND_F, 0, 2});
  expect_invalid(l, "0SEND_F2 is missing");
  l = lower(one_f_one_b());
  erase(l, 1, {ActionKind::RECV_B, 1, 3});
  expect_invalid(l, "1RECV_B3 is missing");
}

TEST(Validate, ReceiveAfterItsConsumerIsAnError) {
  Schedule l = lower(one_f_one_b());
  auto& list = l.actions[2];
  auto r = std::find(list.begin(), list.end(), Action{ActionKind::RECV_F, 2, 1});
  auto f = std::find(list.begin(), list.end(), Action{ActionKind::F, 2, 1});
  std::rotate(r, r + 1, f + 1);  // move the RECV just after the F
  expect_invalid(l, "comes after the compute that consumes its tensor");
}

TEST(Validate, SendBeforeItsProducerIsAnError) {
  Schedule l = lower(one_f_one_b());
  auto& list = l.actions[0];
  auto f = std::find(list.begin(), list.end(), Action{ActionKind::F, 0, 1});
  auto send = std::find(list.begin(), list.end(), Action{ActionKind::SEND_F, 0, 1});
  std::rotate(f, send, send + 1);  // move the SEND just before the F
  expect_invalid(l, "0SEND_F1 comes before the compute that produces its tensor (0F1)");
}

TEST(Validate, SendForALocalHandOffIsAnError) {
  Schedule l = lower(generate({.kind = "hanayo", .devices = 2, .microbatches = 2}));
  // Chunks 1 and 2 share device 1.
  l.actions[1].push_back({ActionKind::SEND_F, 1, 0});
  auto& list = l.actions[1];
  list.pop_back();
  auto f = std::find(list.begin(), list.end(), Action{ActionKind::F, 1, 0});
  list.insert(f + 1, {ActionKind::SEND_F, 1, 0});
  expect_invalid(l, "1SEND_F0 is not needed");
}

TEST(Validate, MicrobatchInTwoReplicasIsAnError) {
  Schedule s = generate({.kind = "chimera", .devices = 2, .microbatches = 2});
  // Microbatch 0 goes down (chunks 0, 1); also run it on the up replica's first chunk (2).
  s.actions[1].insert(s.actions[1].begin(), {ActionKind::F, 2, 0});
  expect_invalid(s, "enters two replicas");
}

TEST(Validate, StrictSemanticsAreOptional) {
  const Schedule s = one_f_one_b();
  const Schedule late = lower(s, {.recv_lookahead = 0, .receives_in_time = false});
  EXPECT_NO_THROW(validate(late));
  expect_invalid(late, "deadlock under rendezvous", {.semantics = CommSemantics::kRendezvous});
  const Schedule ok = lower(s, {.recv_lookahead = 0});
  EXPECT_NO_THROW(validate(ok, {.semantics = CommSemantics::kRendezvous}));
  EXPECT_NO_THROW(validate(ok, {.semantics = CommSemantics::kSynchronous}));
  // Receives posted a compute early cannot block: they wait for sends not yet made.
  expect_invalid(lower(s), "deadlock under synchronous",
                 {.semantics = CommSemantics::kSynchronous});
}

TEST(Validate, DryRunStepsOfOneFOneBInUnitTime) {
  // P devices, B microbatches, every action one step: makespan 2(B + P - 1).
  for (int P : {1, 2, 4})
    for (int B : {P, 2 * P}) {
      auto r =
          check(generate({.kind = "1f1b", .devices = P, .microbatches = B}), {.count_steps = true});
      ASSERT_TRUE(r.ok) << r.problem;
      EXPECT_EQ(r.steps, 2 * (B + P - 1)) << "P=" << P << " B=" << B;
    }
}

TEST(Validate, GridShowsAWindowForWideSchedules) {
  Schedule s = generate({.kind = "1f1b", .devices = 32, .microbatches = 64});
  s.actions[20].push_back({ActionKind::F, 20, 5});
  auto e = expect_invalid(s, "20F5 appears twice");
  EXPECT_NE(e.grid().find("dev 20"), std::string::npos);
  EXPECT_EQ(e.grid().find("dev 0 "), std::string::npos) << "grid should window the columns";
}

}  // namespace
}  // namespace bw::schedule
