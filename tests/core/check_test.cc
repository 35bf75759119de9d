#include "core/check.h"

#include <gtest/gtest.h>

namespace bw {
namespace {

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(BW_CHECK(1 + 1 == 2, "math")); }

TEST(Check, FailingCheckThrowsWithFileLineAndValues) {
  int chunk = 7, num_chunks = 4;
  try {
    BW_CHECK(chunk < num_chunks, "chunk {} out of range [0, {})", chunk, num_chunks);
    FAIL() << "BW_CHECK did not throw";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("check_test.cc:"), std::string::npos) << what;
    EXPECT_NE(what.find("chunk < num_chunks"), std::string::npos) << what;
    EXPECT_NE(what.find("chunk 7 out of range [0, 4)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace bw
