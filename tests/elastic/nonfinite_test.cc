// The one non-finite-step rule (elastic/nonfinite.h) that the single process and the supervisor
// share: its verdicts and skip counts, step by step, against the documented policy.
#include "elastic/nonfinite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace bw::elastic {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(NonfiniteRule, StopStopsAtTheFirstNonFiniteValueAndCountsNothing) {
  runtime::TrainConfig train;  // nonfinite = "stop"
  SkipCount skips;
  EXPECT_EQ(judge_step(train, 2.5, 1.0, skips), StepVerdict::kApply);
  EXPECT_EQ(judge_step(train, kNaN, 1.0, skips), StepVerdict::kStop);
  EXPECT_EQ(judge_step(train, 2.5, kInf, skips), StepVerdict::kStop);
  EXPECT_EQ(skips.total, 0);
  EXPECT_EQ(skips.consecutive, 0);
}

TEST(NonfiniteRule, SkipSkipsUpToTheLimitInARowAndAFiniteStepResetsTheRow) {
  runtime::TrainConfig train;
  train.nonfinite = "skip";
  train.skip_limit = 2;
  SkipCount skips;
  EXPECT_EQ(judge_step(train, kNaN, 1.0, skips), StepVerdict::kSkip);
  EXPECT_EQ(judge_step(train, 1.0, -kInf, skips), StepVerdict::kSkip);
  EXPECT_EQ(skips.total, 2);
  EXPECT_EQ(skips.consecutive, 2);
  EXPECT_EQ(judge_step(train, kNaN, kNaN, skips), StepVerdict::kStop);  // a third in a row
  EXPECT_EQ(skips.total, 2);
  EXPECT_EQ(judge_step(train, 3.0, 1.0, skips), StepVerdict::kApply);
  EXPECT_EQ(skips.consecutive, 0);
  EXPECT_EQ(skips.total, 2);
  EXPECT_EQ(judge_step(train, kNaN, 1.0, skips), StepVerdict::kSkip);
  EXPECT_EQ(skips.total, 3);
  EXPECT_EQ(skips.consecutive, 1);
}

TEST(NonfiniteRule, TheMessageNamesTheStepTheValuesAndTheRowUnderSkip) {
  runtime::TrainConfig train;
  train.out_dir = "/nonexistent/for/this/test";
  train.nonfinite = "skip";
  const auto m = divergence_message(train, 7, kNaN, 3.0, SkipCount{4, 2});
  EXPECT_NE(m.find("training diverged at step 7"), std::string::npos) << m;
  EXPECT_NE(m.find("after 2 skipped steps in a row"), std::string::npos) << m;
  EXPECT_NE(m.find("There is no checkpoint"), std::string::npos) << m;
}

}  // namespace
}  // namespace bw::elastic
