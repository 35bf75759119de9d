// Slow ranks (elastic/slow_ranks.h) and fault injection `slow` (elastic/inject.h).
//
// SlowRanks: its relative compute against values worked out by hand, and the window rule.
// SlowRank (end to end): a run with one node injected slow flags that node's rank, and only it,
// in metrics.jsonl, the progress line and the summary, and trains on exactly the samples and
// to the same losses as the same run without the injection (the slowdown is time, not work).
#include "elastic/slow_ranks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../runtime/cli_runner.h"
#include "core/error.h"
#include "elastic/inject.h"
#include "run_files.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;

TEST(SlowRanks, RelativeComputeIsTimePerUnitOfWorkOverTheMedianRanks) {
  SlowRanks s(1.5, 2);
  // Rank 2 does twice the work, rank 3 none (not judged).
  s.reset({1.0, 1.0, 2.0, 0.0});
  s.add({10.0, 12.0, 20.0, 5.0});
  // Speeds 10, 12, 10 ms per unit: the (lower) median is 10.
  ASSERT_EQ(s.relative().size(), 4u);
  EXPECT_DOUBLE_EQ(s.relative()[0], 1.0);
  EXPECT_DOUBLE_EQ(s.relative()[1], 1.2);
  EXPECT_DOUBLE_EQ(s.relative()[2], 1.0);
  EXPECT_DOUBLE_EQ(s.relative()[3], 0.0);
  EXPECT_TRUE(s.slow().empty());
}

TEST(SlowRanks, FlaggedAfterWindowStepsInARowAndClearedByAStepUnder) {
  SlowRanks s(1.5, 3);
  s.reset({1.0, 1.0, 1.0, 1.0});
  const std::vector<double> normal = {10, 10, 10, 10}, rank1_slow = {10, 20, 10, 10};
  s.add(rank1_slow);
  s.add(rank1_slow);
  EXPECT_TRUE(s.slow().empty()) << "two steps over a window of three";
  s.add(normal);  // the run of steps over the threshold is broken
  s.add(rank1_slow);
  s.add(rank1_slow);
  EXPECT_TRUE(s.slow().empty());
  s.add(rank1_slow);
  EXPECT_EQ(s.slow(), std::vector<int>({1}));
  EXPECT_DOUBLE_EQ(s.relative()[1], 2.0);
  s.add({10, 14, 10, 10});  // 1.4x: under 1.5
  EXPECT_TRUE(s.slow().empty());
  // A new generation starts a new history.
  s.add(rank1_slow);
  s.add(rank1_slow);
  s.reset({1.0, 1.0, 1.0, 1.0});
  s.add(rank1_slow);
  EXPECT_TRUE(s.slow().empty());
}

TEST(SlowRanks, TwoRanksCompareTheSlowerWithTheFaster) {
  SlowRanks s(1.25, 1);
  s.reset({1.0, 1.0});
  s.add({30.0, 10.0});
  EXPECT_EQ(s.slow(), std::vector<int>({0}));
  EXPECT_DOUBLE_EQ(s.relative()[0], 3.0);
  EXPECT_DOUBLE_EQ(s.relative()[1], 1.0);
}

TEST(SlowInjection, ParsesFactorAndStepAndRefusesBadOnes) {
  const auto f = parse_faults("slow:node=2:factor=2.5:step=3:device=1");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].action, "slow");
  EXPECT_EQ(f[0].node, 2);
  EXPECT_EQ(f[0].device, 1);
  EXPECT_EQ(f[0].step, 3);
  EXPECT_DOUBLE_EQ(f[0].factor, 2.5);
  EXPECT_EQ(parse_faults("slow:node=0:factor=2")[0].step, 0);
  for (const char* bad : {"slow:node=1:factor=0", "slow:node=1:factor=-2", "slow:node=1:factor=0.5",
                          "slow:node=1:factor=nan", "slow:node=1:factor=2x", "slow:node=1",
                          "slow:node=1:factor=2:phase=forward", "kill:node=1:step=0:factor=2"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_faults(bad), bw::ConfigError);
  }
}

std::string dir() {
  static const std::string d = testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_slow_ranks_{}", getpid())).string());
  return d;
}

std::string corpus() { return testing::letters_corpus(dir(), 5); }

struct TrainRun {
  int status = -1;
  std::string output;
  std::vector<nlohmann::json> steps;
};

TrainRun train(const std::string& name, const std::vector<std::string>& extra) {
  const auto out_dir = (fs::path(dir()) / name).string();
  std::vector<std::string> args = {"train",
                                   "--cluster.nodes=4",
                                   "--pipeline.pipelines=[2,2]",
                                   "--model.name=tiny:4",
                                   "--data.path=" + corpus(),
                                   "--train.steps=8",
                                   "--train.sample_tokens=0",
                                   "--train.log_every=1",
                                   "--pipeline.microbatches=8",
                                   "--pipeline.microbatch_size=2",
                                   "--elastic.slow_window=3",
                                   "--train.out_dir=" + out_dir};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = testing::run_cli(args, out_dir + ".log", 180);
  TrainRun run;
  run.status = r.timed_out ? -1 : r.status;
  run.output = r.output;
  run.steps = testing::read_run_metrics(out_dir).steps;
  return run;
}

TEST(SlowRank, AnInjectedSlowNodeIsFlaggedAndTrainsTheSameSamples) {
  // Node 1 computes 6x slower from the start; the threshold (3) leaves room for the noise of
  // four processes sharing a small machine. With one device per node, node 1 is worker 1 and,
  // in generation 0 of [2,2], rank 1 (pipeline 0's second stage).
  const TrainRun base = train("base", {"--elastic.slow_threshold=3"});
  const TrainRun slow =
      train("slow", {"--elastic.slow_threshold=3", "--elastic.inject=slow:node=1:factor=6"});
  ASSERT_EQ(base.status, 0) << base.output;
  ASSERT_EQ(slow.status, 0) << slow.output;
  ASSERT_EQ(base.steps.size(), 8u);
  ASSERT_EQ(slow.steps.size(), 8u);
  for (size_t i = 0; i < base.steps.size(); ++i) {
    SCOPED_TRACE(fmt::format("step {}", i));
    // The same samples and the same arithmetic: the slowdown is only time.
    EXPECT_EQ(slow.steps[i].at("samples"), base.steps[i].at("samples"));
    EXPECT_EQ(slow.steps[i].at("loss").get<double>(), base.steps[i].at("loss").get<double>());
    EXPECT_TRUE(base.steps[i].at("slow_ranks").empty()) << base.steps[i].dump();
    const auto& rel = slow.steps[i].at("relative_compute");
    ASSERT_EQ(rel.size(), 4u);
    EXPECT_GT(rel[1].get<double>(), 3.0) << slow.steps[i].dump();
    // Flagged after the window's third step on, and nothing else ever.
    const auto want = i + 1 >= 3 ? nlohmann::json::array({1}) : nlohmann::json::array();
    EXPECT_EQ(slow.steps[i].at("slow_ranks"), want) << slow.steps[i].dump();
  }
  EXPECT_NE(slow.output.find("slow: rank 1 "), std::string::npos) << slow.output;
  EXPECT_NE(slow.output.find("rank 1 (worker 1, generation 0): slow after 6 step(s) from step 3"),
            std::string::npos)
      << slow.output;
  EXPECT_EQ(base.output.find("slow rank"), std::string::npos) << base.output;
}

}  // namespace
}  // namespace bw::elastic
