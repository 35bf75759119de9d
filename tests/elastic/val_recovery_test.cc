// A validation loss survives a recovery (docs/elastic.md "Fault injection", phase eval): a
// worker killed while the pipelines evaluate, in the middle of the run or after its last step,
// takes its node out; the next generation evaluates again from the same committed parameters.
// Oracle: the failure-free run of the same config. Every step is committed once with the same
// samples; the evaluation that the fault interrupted gives the failure-free value within 1e-6
// relative (the same parameters; the new plan only splits the microbatches differently), later
// ones within 1e-5 (parameters trained under another batch split, the "same training" loss
// tolerance); the final parameters and AdamW moments agree within the "same training" tolerance
// of tests/same_training.h for its steps at lr 1e-2.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../runtime/cli_runner.h"
#include "../same_training.h"
#include "runtime/checkpointing.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
constexpr double kDeadlineS = 120;
constexpr int kNodes = 4, kSteps = 4, kEvalEvery = 2;

std::string dir() {
  static const std::string d = testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_val_recovery_{}", getpid())).string());
  return d;
}

std::string text(const std::string& name, int bytes, unsigned seed) {
  const auto path = (fs::path(dir()) / name).string();
  std::ofstream out(path);
  std::mt19937 rng(seed);
  for (int i = 0; i < bytes; ++i) out << static_cast<char>('a' + rng() % 26);
  return path;
}

struct Run {
  int status = -1;
  bool timed_out = false;
  std::string output, out_dir;
  std::vector<nlohmann::json> steps, events;
  std::map<int, double> val_loss;  // steps done -> validation loss
};

Run train(const std::string& name, const std::string& inject) {
  static const std::string corpus = text("train.txt", 30000, 5);
  static const std::string val = text("val.txt", 4000, 6);
  Run run;
  run.out_dir = (fs::path(dir()) / name).string();
  std::vector<std::string> args = {"train",
                                   "--quiet",
                                   fmt::format("--cluster.nodes={}", kNodes),
                                   "--model.name=tiny",
                                   "--data.path=" + corpus,
                                   "--data.val_path=" + val,
                                   fmt::format("--train.steps={}", kSteps),
                                   fmt::format("--train.eval_every={}", kEvalEvery),
                                   "--train.eval_batches=2",
                                   "--train.warmup_steps=1",
                                   "--train.lr=1e-2",
                                   "--train.min_lr=1e-2",
                                   "--train.sample_tokens=0",
                                   "--pipeline.microbatches=4",
                                   "--pipeline.microbatch_size=2",
                                   "--elastic.heartbeat_timeout_s=1.5",
                                   "--elastic.step_timeout_s=60",
                                   "--train.out_dir=" + run.out_dir};
  if (!inject.empty()) args.push_back("--elastic.inject=" + inject);
  auto r = run_cli(args, run.out_dir + ".log", kDeadlineS);
  run.status = r.status;
  run.timed_out = r.timed_out;
  run.output = r.output;
  std::ifstream metrics(fs::path(run.out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto doc = nlohmann::json::parse(line);
    if (doc.contains("val_loss")) run.val_loss[doc.at("step").get<int>() + 1] = doc.at("val_loss");
    (doc.contains("event") ? run.events : run.steps).push_back(std::move(doc));
  }
  return run;
}

const Run& reference() {
  static const Run run = train("reference", "");
  return run;
}

void expect_same_state(const std::string& got_dir, const std::string& want_dir) {
  const auto got = runtime::load_checkpoint(runtime::checkpoint_dir(got_dir, kSteps));
  const auto want = runtime::load_checkpoint(runtime::checkpoint_dir(want_dir, kSteps));
  const auto tol = bw::testing::fp32_same_training(kSteps, 1e-2);  // lr 1e-2 to the end
  for (const auto* maps : {&want.weights, &want.optimizer}) {
    const auto& other = maps == &want.weights ? got.weights : got.optimizer;
    const auto cmp = bw::testing::compare_state(other, *maps, tol);
    EXPECT_TRUE(cmp.ok()) << cmp.first;
  }
}

struct Case {
  std::string name;
  std::string inject;
  int interrupted;  // steps done of the evaluation the fault interrupts
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EvalFault : public ::testing::TestWithParam<Case> {};

TEST_P(EvalFault, EvaluationIsRedoneAndMatchesTheFailureFreeRun) {
  const auto& c = GetParam();
  const auto& want = reference();
  ASSERT_EQ(want.status, 0) << want.output;
  ASSERT_EQ(want.val_loss.size(), 2u) << "evaluated after steps 2 and 4:\n" << want.output;
  const auto got = train(c.name, c.inject);
  std::string events;
  for (const auto& e : got.events) events += e.dump() + "\n";
  ASSERT_FALSE(got.timed_out) << "hung:\n" << got.output << events;
  ASSERT_EQ(got.status, 0) << got.output << events;
  int lost = 0, recovered = 0;
  for (const auto& e : got.events) {
    lost += e.at("event") == "node_lost";
    recovered += e.at("event") == "recovered";
  }
  EXPECT_EQ(lost, 1) << events;
  EXPECT_GE(recovered, 1) << events;
  // Exactly once: every step, in order, with the failure-free run's samples.
  ASSERT_EQ(got.steps.size(), want.steps.size()) << got.output;
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].at("step"), want.steps[i].at("step"));
    EXPECT_EQ(got.steps[i].at("samples"), want.steps[i].at("samples")) << "step " << i;
  }
  ASSERT_EQ(got.val_loss.size(), want.val_loss.size()) << got.output;
  for (const auto& [steps_done, v] : want.val_loss) {
    ASSERT_TRUE(got.val_loss.count(steps_done)) << "no validation loss after step " << steps_done;
    const double rel = std::abs(got.val_loss.at(steps_done) - v) / std::abs(v);
    EXPECT_LE(rel, steps_done <= c.interrupted ? 1e-6
                                               : bw::testing::kFp32LossRel)
        << "after " << steps_done << " steps: " << got.val_loss.at(steps_done)
        << " vs failure-free " << v;
  }
  expect_same_state(got.out_dir, want.out_dir);
}

INSTANTIATE_TEST_SUITE_P(
    Elastic, EvalFault,
    ::testing::Values(Case{"kill_during_eval", "kill:node=3:step=2:phase=eval", 2},
                      Case{"kill_during_final_eval", "kill:node=1:step=4:phase=eval", 4}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace bw::elastic
