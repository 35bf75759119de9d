#include "schedule/csv.h"

#include <gtest/gtest.h>

#include <sstream>

#include "schedule/generate.h"

namespace bw::schedule {
namespace {

TEST(Csv, RoundTripsEveryKindComputeOnlyAndLowered) {
  for (const auto& kind : schedule_kinds()) {
    const Schedule s = generate({.kind = kind, .devices = 4, .microbatches = 8});
    for (const Schedule& x : {s, lower(s)}) {
      std::istringstream in(to_csv(x));
      Schedule back = read_csv(in, {.kind = kind, .chunk_stage = x.chunk_stage});
      EXPECT_EQ(back.actions, x.actions) << kind;
      EXPECT_EQ(back.chunk_device, x.chunk_device) << kind << ": placement inferred";
      EXPECT_EQ(back.num_microbatches, x.num_microbatches);
      EXPECT_EQ(back.num_chunks, x.num_chunks);
      EXPECT_NO_THROW(validate(back)) << kind;
    }
  }
}

TEST(Csv, ReadsIdleCellsAndOverlapPairs) {
  std::istringstream in("0F0,,0F1,(0B0;1F0)OVERLAP_F_B, 0B1\n, 1F1 ,1B0,1B1\n");
  // Chunk 1 runs on device 0 (inside the pair) and device 1: inconsistent placement.
  EXPECT_THROW(read_csv(in), ConfigError);
  std::istringstream ok("0F0,,0F1,(0B0;0F2)OVERLAP_F_B, 0B1,0B2\n");
  const Schedule s = read_csv(ok);
  ASSERT_EQ(s.actions.size(), 1u);
  // The pair is its marker and its two actions.
  ASSERT_EQ(s.actions[0].size(), 7u);
  EXPECT_EQ(s.actions[0][2].kind, ActionKind::OVERLAP_F_B);
  EXPECT_EQ(to_string(s.actions[0][3]), "0B0");
  EXPECT_EQ(to_string(s.actions[0][4]), "0F2");
  EXPECT_EQ(to_csv(s), "0F0,0F1,(0B0;0F2)OVERLAP_F_B,0B1,0B2\n");
}

// PyTorch's compute_comms format, as `_PipelineScheduleRuntime._dump_csv` writes it: FSDP and
// gradient-reduction actions carry no microbatch. Reads, validates, and writes back unchanged.
TEST(Csv, ReadsAndWritesPyTorchComputeComms) {
  const std::string text =
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n";
  std::istringstream in(text);
  const Schedule s = read_csv(in);
  EXPECT_EQ(s.num_devices, 2);
  EXPECT_EQ(s.num_chunks, 2);
  EXPECT_EQ(s.num_microbatches, 2);
  EXPECT_EQ(s.actions[0][0], (Action{ActionKind::UNSHARD, 0, -1}));
  EXPECT_EQ(s.actions[1].back(), (Action{ActionKind::RESHARD, 1, -1}));
  EXPECT_TRUE(s.is_lowered());
  validate(s);
  validate(s, {.semantics = CommSemantics::kRendezvous});
  EXPECT_EQ(to_csv(s), text);
  // --compute-only keeps what PyTorch's compute_only format holds.
  EXPECT_EQ(to_csv(strip_comm(s)), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

TEST(Csv, ChunkActionsTakeNoMicrobatch) {
  std::istringstream in("0UNSHARD3,0F0,0B0\n");
  try {
    read_csv(in, {.source = "u.csv"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("u.csv:1:1: '0UNSHARD3'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without a microbatch: 0UNSHARD"), std::string::npos)
        << e.what();
  }
  std::istringstream three("(0F0;0F1;0F2)OVERLAP_F_B\n");
  EXPECT_THROW(read_csv(three), ConfigError);
  std::istringstream comm("(0F0;0SEND_F0)OVERLAP_F_B\n");
  EXPECT_THROW(read_csv(comm), ConfigError);
}

TEST(Csv, MalformedCellNamesLineAndColumn) {
  std::istringstream in("0F0,0F1\n1F0, 1X1\n");
  try {
    read_csv(in, {.source = "s.csv"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.csv:2:6: '1X1'"), std::string::npos) << e.what();
  }
  std::istringstream no_mb("0F0,0F\n");
  try {
    read_csv(no_mb, {.source = "t.csv"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("t.csv:1:5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("microbatch number"), std::string::npos) << e.what();
  }
}

TEST(Csv, PlacementCanBeGivenAndUnusedChunksNeedIt) {
  std::istringstream in("0F0,0B0\n\n");
  EXPECT_THROW(
      {
        std::istringstream gap("1F0,1B0\n0F0,0B0\n");
        auto s = read_csv(gap);
        EXPECT_EQ(s.chunk_device, (std::vector<int>{1, 0}));
        std::istringstream missing("2F0,2B0\n");
        read_csv(missing);  // chunks 0 and 1 never run: placement unknown
      },
      ConfigError);
  const Schedule s = read_csv(in, {.chunk_device = std::vector<int>{0}});
  EXPECT_EQ(s.num_devices, 1);  // trailing empty rows dropped
}

TEST(Csv, EmptyInputIsAnError) {
  std::istringstream in("\n\n");
  EXPECT_THROW(read_csv(in), ConfigError);
}

}  // namespace
}  // namespace bw::schedule
