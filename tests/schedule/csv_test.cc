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
  EXPECT_EQ(s.actions[0].size(), 6u);
  EXPECT_EQ(to_string(s.actions[0][2]), "0B0");
  EXPECT_EQ(to_string(s.actions[0][3]), "0F2");
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
