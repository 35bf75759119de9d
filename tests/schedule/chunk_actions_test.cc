// PyTorch's chunk actions (UNSHARD, RESHARD, REDUCE_GRAD) and OVERLAP_F_B pairs: the validator's
// rules for them, and the FSDP pass (fsdp.h) checked against those rules over a grid of kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "schedule/fsdp.h"
#include "schedule/generate.h"

namespace bw::schedule {
namespace {

Schedule parse(const std::string& text) {
  std::istringstream in(text);
  return read_csv(in);
}

std::string problem(const std::string& text) {
  const DryRun r = check(parse(text));
  return r.ok ? "" : r.problem;
}

TEST(ChunkActions, FsdpRulesAreThoseOfPyTorchsRuntime) {
  EXPECT_EQ(problem("0UNSHARD,0F0,0B0,0RESHARD\n"), "");
  EXPECT_NE(problem("0UNSHARD,0F0,0RESHARD,0B0\n").find("0B0 computes on chunk 0 while it is "
                                                        "sharded; put 0UNSHARD before it"),
            std::string::npos);
  EXPECT_NE(problem("0UNSHARD,0UNSHARD,0F0,0B0\n").find("already unsharded"), std::string::npos);
  EXPECT_NE(problem("0UNSHARD,0F0,0B0,0RESHARD,0RESHARD\n").find("is not unsharded"), std::string::npos);
  EXPECT_NE(problem("0UNSHARD,0RESHARD,0UNSHARD,0F0,0B0\n").find("has not computed since"),
            std::string::npos);
  EXPECT_NE(problem("0UNSHARD,0F0,0B0,0RESHARD,0UNSHARD\n").find("never used"),
            std::string::npos);
  // A chunk with no FSDP action is not sharded: computes need nothing.
  EXPECT_EQ(problem("0F0,0B0,0REDUCE_GRAD\n"), "");
}

TEST(ChunkActions, ReduceGradComesAfterTheLastBackwardOnce) {
  EXPECT_NE(problem("0F0,0F1,0B0,0REDUCE_GRAD,0B1\n").find("(1 of its 2 B/W actions done)"),
            std::string::npos);
  EXPECT_NE(problem("0F0,0I0,0REDUCE_GRAD,0W0\n").find("0 of its 1"), std::string::npos);
  EXPECT_NE(problem("0F0,0B0,0REDUCE_GRAD,0REDUCE_GRAD\n").find("appears twice"),
            std::string::npos);
}

TEST(ChunkActions, PairsMayNotDependOnEachOther) {
  EXPECT_EQ(problem("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n"), "");
  EXPECT_NE(problem("(0F0;0B0)OVERLAP_F_B\n").find("pairs an action with one it depends on"),
            std::string::npos);
}

TEST(ChunkActions, PairsRunAtOnceInTheDryRun) {
  // Device 1's pair waits for 0F1 (its F) and for nothing else; the step count shows both ran in
  // one step.
  const Schedule s = parse("0F0,0F1,0B0,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n");
  const DryRun r = check(s, {.count_steps = true});
  ASSERT_TRUE(r.ok) << r.problem;
  const DryRun lowered = check(lower(s), {.count_steps = true});
  ASSERT_TRUE(lowered.ok) << lowered.problem << lowered.grid;
}

TEST(ChunkActions, LoweringKeepsPairsWholeAndSendsAfterThem) {
  const Schedule s = parse("0F0,0F1,0B0,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n");
  for (int lookahead : {0, 1, 2}) {
    const Schedule l = lower(s, {.recv_lookahead = lookahead});
    validate(l);
    validate(l, {.semantics = CommSemantics::kRendezvous});
    const auto& dev1 = l.actions[1];
    const auto marker =
        std::find(dev1.begin(), dev1.end(), Action{ActionKind::OVERLAP_F_B, -1, -1});
    ASSERT_NE(marker, dev1.end());
    EXPECT_EQ(to_string(marker[1]), "1F1");
    EXPECT_EQ(to_string(marker[2]), "1B0");
    EXPECT_EQ(to_string(marker[3]), "1SEND_B0") << to_csv(l);
  }
}

// The FSDP pass over every kind: valid under the validator's rules, never more than the window
// unsharded, and writes/reads back as the same CSV.
TEST(ChunkActions, FsdpPassIsValidForEveryKind) {
  for (const std::string& kind : schedule_kinds())
    for (int P : {2, 4})
      for (int B : {P, 2 * P}) {
        ScheduleSpec spec{.kind = kind, .devices = P, .microbatches = B};
        if (kind == "chimera" && P % 2) continue;
        Schedule s;
        try {
          s = generate(spec);
        } catch (const ConfigError&) {
          continue;
        }
        for (int window : {1, 3}) {
          const Schedule f = add_fsdp_actions(s, {.max_active_chunks = window});
          const DryRun r = check(f);
          ASSERT_TRUE(r.ok) << kind << " P=" << P << " B=" << B << ": " << r.problem;
          const Schedule l = lower(f);
          ASSERT_TRUE(check(l).ok) << kind << ": " << check(l).problem;
          std::istringstream in(to_csv(l));
          EXPECT_EQ(to_csv(read_csv(in)), to_csv(l));
          for (const auto& list : f.actions) {
            int active = 0, reduced = 0;
            for (const Action& a : list) {
              active += a.kind == ActionKind::UNSHARD ? 1 : a.kind == ActionKind::RESHARD ? -1 : 0;
              EXPECT_LE(active, window + 1) << kind;
              reduced += a.kind == ActionKind::REDUCE_GRAD;
            }
            EXPECT_EQ(active, 0) << kind;
          }
          int chunks_reduced = 0;
          for (const auto& list : f.actions)
            for (const Action& a : list) chunks_reduced += a.kind == ActionKind::REDUCE_GRAD;
          EXPECT_EQ(chunks_reduced, s.num_chunks) << kind;
        }
      }
}

}  // namespace
}  // namespace bw::schedule
