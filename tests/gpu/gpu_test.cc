// Training on CUDA devices (docs/runtime.md "Device and backend"), against the same binary's
// runs: the single-process run on the GPU is the oracle of the pipelines (docs/design.md
// guarantees 4 and 5 on a GPU), and the CPU run in fp32 is the oracle of the GPU's fp32 run.
// Every test skips with one line where no GPU is visible.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli_runner.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"
#include "runtime/device.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::run_cli;

#define BW_REQUIRE_GPU(n)                                                                   \
  do {                                                                                      \
    if (visible_gpus() < (n))                                                               \
      GTEST_SKIP() << "needs " << (n) << " visible GPU(s), this machine has " << visible_gpus(); \
  } while (0)

std::string work_dir() {
  static const std::string dir = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_gpu_{}", getpid())).string());
  return dir;
}

std::string corpus() {
  static const std::string path = [] {
    auto p = (fs::path(work_dir()) / "corpus.txt").string();
    std::ofstream out(p);
    std::mt19937 rng(7);
    const char* words[] = {"wave", "pipeline", "device", "layer", "chunk", "the", "a", "of"};
    for (int i = 0; i < 40000; ++i) out << words[rng() % 8] << (i % 13 == 12 ? "\n" : " ");
    return p;
  }();
  return path;
}

struct TrainRun {
  int status = -1;
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  std::string log;
};

constexpr int kSteps = 8;

TrainRun train(const std::string& name, std::vector<std::string> extra, int steps = kSteps,
          std::function<void(pid_t)> during = [](pid_t) {}) {
  const auto out_dir = (fs::path(work_dir()) / name).string();
  std::vector<std::string> args = {"train", "--quiet", "--model.name=small",
                                   "--data.path=" + corpus(), fmt::format("--train.steps={}", steps),
                                   "--train.warmup_steps=2", "--train.lr=1e-3",
                                   "--train.sample_tokens=0", "--pipeline.microbatches=8",
                                   "--pipeline.microbatch_size=2", "--train.out_dir=" + out_dir};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_cli(args, out_dir + ".log", 300, during);
  TrainRun out;
  out.status = r.status;
  out.log = r.output;
  if (r.status != 0) return out;
  std::ifstream metrics(fs::path(out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    out.losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  }
  out.params = load_checkpoint(
                   (fs::path(out_dir) / fmt::format("checkpoint-{:06d}", steps)).string())
                   .weights;
  return out;
}

// Losses within `loss_rel` per step, parameters within abs + rel |p|.
void expect_close(const TrainRun& got, const TrainRun& want, double loss_rel, double abs, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.status, 0) << what << "\n" << got.log;
  ASSERT_EQ(want.status, 0) << what << " (reference)\n" << want.log;
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], loss_rel * std::abs(want.losses[s]))
        << what << ": step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (const auto& [name, ref] : want.params) {
    const auto& p = got.params.at(name);
    const double excess = ((p - ref).abs() - (abs + rel * ref.abs())).max().item<double>();
    EXPECT_LE(excess, 0.0) << what << ": " << name;
  }
}

const TrainRun& gpu_reference() {
  static const TrainRun run = train("reference", {"--devices=1", "--cluster.device=cuda"});
  return run;
}

// bf16 tolerances (the derivation of tests/elastic/recovery_test.cc): 2^-8 relative per loss,
// parameters within 1e-2 * steps / 256 + 2^-8 |p|.
constexpr double kBf16Loss = 1.0 / 256, kBf16Abs = 1e-2 * kSteps / 256, kBf16Rel = 1.0 / 256;

TEST(GpuTraining, Fp32OnTheGpuMatchesTheCpu) {
  BW_REQUIRE_GPU(1);
  const auto cpu = train("cpu_fp32", {"--devices=1", "--train.precision=fp32"});
  const auto gpu = train("gpu_fp32", {"--devices=1", "--cluster.device=cuda",
                                      "--train.precision=fp32"});
  // Other kernels, other summation orders (and TF32 is off in LibTorch's defaults).
  expect_close(gpu, cpu, 1e-4, 1e-4, 1e-3, "fp32 cuda vs cpu");
}

TEST(GpuTraining, HanayoOnOneGpuOverGlooMatchesOneProcess) {
  BW_REQUIRE_GPU(1);
  const auto& want = gpu_reference();
  const auto got = train("hanayo_shared", {"--devices=4", "--cluster.device=cuda",
                                           "--cluster.gpus=[0, 0, 0, 0]", "--pipeline.schedule=hanayo",
                                           "--pipeline.pipelines=[4]", "--pipeline.fault_tolerance=0"});
  expect_close(got, want, kBf16Loss, kBf16Abs, kBf16Rel, "hanayo, 4 workers on GPU 0");
}

TEST(GpuTraining, NcclPipelinesMatchOneProcess) {
  BW_REQUIRE_GPU(2);
  const auto& want = gpu_reference();
  const auto got = train("nccl", {"--devices=2", "--cluster.device=cuda", "--cluster.backend=nccl",
                                  "--pipeline.schedule=1f1b", "--pipeline.pipelines=[2]",
                                  "--pipeline.fault_tolerance=0"});
  expect_close(got, want, kBf16Loss, kBf16Abs, kBf16Rel, "1f1b over nccl on 2 GPUs");
}

TEST(GpuRecovery, AKilledWorkerIsSurvivedExactlyAsTheFailureFreeRun) {
  BW_REQUIRE_GPU(1);
  // Two pipelines of two workers on GPU 0; worker 1 of node 1 is killed in a backward.
  const std::vector<std::string> cluster = {"--devices=4", "--cluster.device=cuda",
                                            "--cluster.gpus=[0, 0, 0, 0]",
                                            "--pipeline.pipelines=[2, 2]",
                                            "--pipeline.schedule=1f1b"};
  const auto want = train("recovery_reference", cluster);
  auto with_fault = cluster;
  with_fault.push_back("--elastic.inject=kill:node=3:step=3:phase=backward");
  const auto got = train("recovery_killed", with_fault);
  expect_close(got, want, kBf16Loss, kBf16Abs, kBf16Rel, "killed worker on a GPU");
}

TEST(GpuCheckpoints, ResumeOnTheGpuEndsWhereTheUninterruptedRunEnds) {
  BW_REQUIRE_GPU(1);
  const auto& want = gpu_reference();
  const auto first = train("resume_first", {"--devices=2", "--cluster.device=cuda",
                                            "--cluster.gpus=[0, 0]", "--pipeline.pipelines=[2]",
                                            "--pipeline.fault_tolerance=0",
                                            "--train.checkpoint_every=4"});
  ASSERT_EQ(first.status, 0) << first.log;
  const auto ckpt = (fs::path(work_dir()) / "resume_first" / "checkpoint-000004").string();
  const auto resumed = train("resume_second", {"--devices=1", "--cluster.device=cuda",
                                               "--train.resume=" + ckpt});
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  TrainRun tail = resumed;
  TrainRun ref = want;
  ref.losses.erase(ref.losses.begin(), ref.losses.begin() + 4);
  expect_close(tail, ref, kBf16Loss, kBf16Abs, kBf16Rel, "resumed at step 4 on the GPU");
}

}  // namespace
}  // namespace bw::runtime
