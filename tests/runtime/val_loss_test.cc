// The validation loss (data.val_path, train.eval_every, train.eval_batches; docs/data.md
// "Validation"). Oracle: a single-process forward, written here, of the parameters of the
// checkpoint written at the same step on the first eval_batches global batches of the validation
// file read in order (sample i = window i), each microbatch's mean loss averaged. Every plan's
// value must equal it within 1e-6 relative (the same fp32 operations on the same parameters;
// only the order of the final sum could differ). Plans trained on their own differ in their
// parameters by the transparency tolerance (docs/runtime.md), so their validation losses must
// agree within 1e-5 relative. Bad input (a missing or absent validation file, eval_batches 0)
// is one error line and exit status 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "model/gpt.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::run_cli;

constexpr double kDeadlineS = 90.0;
constexpr int kSteps = 4, kEvalEvery = 2, kEvalBatches = 2, kMicrobatches = 4, kMbs = 2;

std::string work_dir() {
  static const std::string dir = [] {
    return bw::testing::scratch_dir(
        (fs::path(::testing::TempDir()) / fmt::format("bw_val_loss_{}", getpid())).string());
  }();
  return dir;
}

std::string text_file(const std::string& name, int words, unsigned seed) {
  const auto p = (fs::path(work_dir()) / name).string();
  std::ofstream out(p);
  std::mt19937 rng(seed);
  const char* vocab[] = {"wave", "pipeline", "device", "layer", "chunk", "the", "a", "of"};
  for (int i = 0; i < words; ++i) out << vocab[rng() % 8] << (i % 11 == 10 ? "\n" : " ");
  return p;
}

const std::string& corpus() {
  static const std::string p = text_file("train.txt", 20000, 7);
  return p;
}
const std::string& val_file() {
  static const std::string p = text_file("val.txt", 2000, 8);
  return p;
}

struct Run {
  int status = -1;
  std::string output;
  std::map<int, double> val_loss;  // steps done -> validation loss
  std::string out_dir;
};

std::vector<std::string> base_args(const std::string& out_dir) {
  return {"train",
          "--quiet",
          "--model.name=tiny",
          "--data.path=" + corpus(),
          "--data.val_path=" + val_file(),
          fmt::format("--train.steps={}", kSteps),
          fmt::format("--train.eval_every={}", kEvalEvery),
          fmt::format("--train.eval_batches={}", kEvalBatches),
          fmt::format("--train.checkpoint_every={}", kEvalEvery),
          "--train.warmup_steps=1",
          "--train.lr=1e-2",
          "--train.sample_tokens=0",
          fmt::format("--pipeline.microbatches={}", kMicrobatches),
          fmt::format("--pipeline.microbatch_size={}", kMbs),
          "--train.out_dir=" + out_dir};
}

Run read_run(const std::string& out_dir) {
  Run run;
  run.out_dir = out_dir;
  std::ifstream metrics(fs::path(out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) run.val_loss[j.at("step").get<int>() + 1] = j.at("val_loss");
  }
  return run;
}

Run train(const std::string& name, const std::vector<std::string>& extra,
          const std::string& out_dir) {
  auto args = base_args(out_dir);
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_cli(args, out_dir + ".log", kDeadlineS);
  EXPECT_FALSE(r.timed_out) << name << " did not finish within " << kDeadlineS << " s";
  EXPECT_EQ(r.status, 0) << name << ":\n" << r.output;
  Run run = read_run(out_dir);
  run.status = r.timed_out ? -1 : r.status;
  run.output = r.output;
  return run;
}

// The oracle: the checkpoint's model, one process, forward only, on the validation file's first
// kEvalBatches global batches in order; the mean of the microbatches' mean losses.
double reference_val_loss(const std::string& out_dir, int steps_done) {
  const auto weights =
      load_checkpoint(
          (fs::path(out_dir) / fmt::format("checkpoint-{:06d}", steps_done)).string())
          .weights;
  const auto model = model::resolve_config("gpt", "tiny", 0, "", 256);
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<model::Layer>> layers;
  for (int l = 0; l < model::num_layers(model); ++l) {
    auto layer = model::build_layer(model, l, 1234);
    for (const auto& [name, p] : layer->parameter_list()) {
      p.copy_(weights.at(checkpoint_tensor_name(l, name)));
    }
    layers.push_back(layer);
  }
  std::ifstream in(val_file(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int T = model.seq_len;
  const int n = kEvalBatches * kMicrobatches;
  double sum = 0;
  for (int mb = 0; mb < n; ++mb) {
    auto x = torch::empty({kMbs, T}, torch::kInt64), y = torch::empty({kMbs, T}, torch::kInt64);
    for (int r = 0; r < kMbs; ++r) {
      const int64_t window = int64_t{mb} * kMbs + r;  // sample i is window i: tokens [iT, iT+T]
      for (int t = 0; t < T; ++t) {
        x[r][t] = static_cast<int64_t>(static_cast<unsigned char>(bytes[window * T + t]));
        y[r][t] = static_cast<int64_t>(static_cast<unsigned char>(bytes[window * T + t + 1]));
      }
    }
    torch::Tensor h = x;
    for (const auto& layer : layers) h = layer->forward(h);
    sum += model::lm_loss(h, y).item<double>();
  }
  return sum / n;
}

struct Plan {
  std::string name;
  std::vector<std::string> args;
};
void PrintTo(const Plan& p, std::ostream* os) { *os << p.name; }

const std::vector<Plan>& plans() {
  static const std::vector<Plan> p = {
      {"one_process", {"--devices=1"}},
      {"one_pipeline_1f1b",
       {"--cluster.nodes=2", "--pipeline.pipelines=[2]", "--pipeline.fault_tolerance=0",
        "--pipeline.schedule=1f1b"}},
      {"two_pipelines_hanayo", {"--cluster.nodes=4", "--pipeline.schedule=hanayo"}},
      {"uneven_gpipe",
       {"--cluster.nodes=3", "--pipeline.pipelines=[2,1]", "--pipeline.schedule=gpipe"}},
  };
  return p;
}

// CTest runs each case in its own process, so the runs are shared on disk by every process of
// this build of the binary (under a lock) instead of being trained again for every case.
const Run& run_of(const Plan& plan) {
  static std::map<std::string, Run> cache;
  auto it = cache.find(plan.name);
  if (it != cache.end()) return it->second;
  Run run;
  bool made = false;
  const auto dir = bw::testing::shared_run("bw_val_loss_runs", BW_BINARY, plan.name,
                                           [&](const std::string& folder) {
                                             made = true;
                                             run = train(plan.name, plan.args, folder);
                                             return run.status == 0;
                                           });
  if (!dir.empty() && !made) {
    run = read_run(dir);
    run.status = 0;
  }
  return cache[plan.name] = run;
}

class ValLoss : public ::testing::TestWithParam<Plan> {};

TEST_P(ValLoss, EqualsASingleProcessForwardOfTheSameParameters) {
  const auto& run = run_of(GetParam());
  ASSERT_EQ(run.status, 0);
  // Evaluated after steps 2 and 4 (every 2, and after the last), nowhere else.
  ASSERT_EQ(run.val_loss.size(), 2u) << run.output;
  int bad = 0;
  for (const auto& [steps_done, got] : run.val_loss) {
    ASSERT_EQ(steps_done % kEvalEvery, 0) << "a validation loss after step " << steps_done;
    const double want = reference_val_loss(run.out_dir, steps_done);
    const double rel = std::abs(got - want) / std::abs(want);
    if (rel > 1e-6 && bad++ < 5) {
      ADD_FAILURE() << GetParam().name << ": after " << steps_done << " steps val_loss " << got
                    << ", single-process forward " << want << " (relative " << rel << ")";
    }
  }
}

TEST_P(ValLoss, AgreesAcrossPlansAndSchedules) {
  const auto& want = run_of(plans().front());
  const auto& got = run_of(GetParam());
  ASSERT_EQ(got.val_loss.size(), want.val_loss.size());
  for (const auto& [steps_done, v] : want.val_loss) {
    ASSERT_TRUE(got.val_loss.count(steps_done)) << GetParam().name << ": none after " << steps_done;
    const double rel = std::abs(got.val_loss.at(steps_done) - v) / std::abs(v);
    EXPECT_LE(rel, 1e-5) << GetParam().name << " after " << steps_done << " steps: "
                         << got.val_loss.at(steps_done) << " vs one process " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, ValLoss, ::testing::ValuesIn(plans()),
                         [](const auto& info) { return info.param.name; });

TEST(ValLoss, ShownInTheProgressLineAndTheSummary) {
  const auto out_dir = (fs::path(work_dir()) / "shown").string();
  auto args = base_args(out_dir);
  args.erase(args.begin() + 1);  // not --quiet
  args.push_back("--devices=1");
  auto r = run_cli(args, out_dir + ".log", kDeadlineS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 2/4  loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(after step 4)"), std::string::npos) << r.output;
}

struct BadCase {
  std::string name;
  std::vector<std::string> args;
  std::string expect;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ValLossBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(ValLossBadInput, OneErrorLineAndExitStatus2) {
  const auto& c = GetParam();
  const auto out_dir = (fs::path(work_dir()) / ("bad_" + c.name)).string();
  std::vector<std::string> args = {"train",
                                   "--quiet",
                                   "--model.name=tiny",
                                   "--data.path=" + corpus(),
                                   "--train.steps=2",
                                   "--pipeline.microbatches=4",
                                   "--pipeline.microbatch_size=2",
                                   "--train.out_dir=" + out_dir};
  args.insert(args.end(), c.args.begin(), c.args.end());
  auto r = run_cli(args, out_dir + ".log", 60.0);
  EXPECT_FALSE(r.timed_out) << c.name << " hung";
  EXPECT_EQ(r.status, 2) << c.name << ":\n" << r.output;
  int errors = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) errors += line.find("error: ") == 0 ? 1 : 0;
  EXPECT_EQ(errors, 1) << r.output;
  EXPECT_NE(r.output.find(c.expect), std::string::npos)
      << c.name << ": expected '" << c.expect << "' in:\n"
      << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Config, ValLossBadInput,
    ::testing::Values(
        BadCase{"eval_every_without_val_path",
                {"--train.eval_every=1"},
                "train.eval_every = 1 asks for a validation loss but data.val_path is empty"},
        BadCase{"val_path_missing",
                {"--train.eval_every=1", "--data.val_path=/nonexistent/val_000000.bin"},
                "data.val_path: "},
        BadCase{"val_glob_matches_nothing",
                {"--train.eval_every=1", "--data.val_path=/nonexistent/val_*.bin"},
                "data.val_path: "},
        BadCase{"eval_batches_zero",
                {"--train.eval_every=1", "--data.val_path=" + val_file(), "--train.eval_batches=0"},
                "train.eval_batches must be in [1, 65536], got 0"},
        BadCase{"val_split_too_short",
                {"--train.eval_every=1", "--data.val_path=" + val_file(),
                 "--train.eval_batches=1000"},
                "lower train.eval_batches"},
        BadCase{"eval_fault_at_a_step_without_evaluation",
                {"--train.eval_every=2", "--data.val_path=" + val_file(),
                 "--elastic.inject=kill:node=1:step=1:phase=eval"},
                "phase eval"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace bw::runtime
