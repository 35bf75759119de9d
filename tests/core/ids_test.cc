#include "core/ids.h"

#include <gtest/gtest.h>

#include <type_traits>
#include <unordered_set>

namespace bw {
namespace {

TEST(Ids, DistinctKindsDoNotConvert) {
  static_assert(!std::is_convertible_v<Rank, ChunkId>);
  static_assert(!std::is_convertible_v<int, Rank>);
  Rank a(2), b(3);
  EXPECT_LT(a, b);
  EXPECT_EQ(fmt::format("{}", b), "3");
  std::unordered_set<Rank> set{a, b, Rank(2)};
  EXPECT_EQ(set.size(), 2u);
}

}  // namespace
}  // namespace bw
