// Training on CUDA devices (docs/runtime.md "Device and backend"), against the same binary's
// runs: the single-process run on the GPU is the oracle of the pipelines (docs/design.md
// guarantees 4 and 5 on a GPU), and the CPU run in fp32 is the oracle of the GPU's fp32 run.
// Every test skips with one line where no GPU is visible, and records the GPUs it needs as the
// gtest property gpus_needed (and what only it exercises as `exercises`), so that
// scripts/gpu_check.sh can tell a skip the machine explains from one it does not
// (scripts/gpu_verdict.py).
//
// A run that silently trained on the CPU would match its references just as well, so every GPU
// run also shows that its tensors and kernels were on the GPU: each rank of each step reports the
// bytes the CUDA caching allocator held on its device as the step began (parameters, gradients,
// optimizer state) and the bytes allocated there during the step (kernels' outputs); both must
// be positive (metrics.jsonl, runtime/step_report.h). GpuDevice checks the probe itself in this
// process: tensors on cuda, the counters growing, and kernels of device type CUDA in a Kineto
// profile.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "cli_runner.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"
#include "runtime/device.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::run_cli;

#define BW_REQUIRE_GPU(n)                                                                        \
  do {                                                                                           \
    RecordProperty("gpus_needed", (n));                                                          \
    if (visible_gpus() < (n))                                                                    \
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
  // Per step, per rank: the device bytes as the step began and those allocated during it.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> device_bytes;
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
    const auto doc = nlohmann::json::parse(line);
    if (doc.contains("event")) continue;  // a node lost or joined, a recovery: not a step
    out.losses.push_back(doc.at("loss").get<double>());
    auto& ranks = out.device_bytes.emplace_back();
    for (const auto& r : doc.at("ranks"))
      ranks.emplace_back(r.value("device_bytes", int64_t{0}),
                         r.value("device_step_allocated_bytes", int64_t{0}));
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

// Every rank of every step held its tensors on a GPU and allocated its kernels' outputs there.
void expect_on_the_gpu(const TrainRun& run, const std::string& what) {
  ASSERT_EQ(run.status, 0) << what << "\n" << run.log;
  ASSERT_FALSE(run.device_bytes.empty()) << what << ": no steps in metrics.jsonl";
  for (size_t step = 0; step < run.device_bytes.size(); ++step) {
    ASSERT_FALSE(run.device_bytes[step].empty()) << what << ": step " << step << " has no ranks";
    for (size_t rank = 0; rank < run.device_bytes[step].size(); ++rank) {
      const auto [held, allocated] = run.device_bytes[step][rank];
      EXPECT_GT(held, 0) << what << ": step " << step << " rank " << rank
                         << " held no bytes on its GPU: its tensors were not on the device";
      EXPECT_GT(allocated, 0) << what << ": step " << step << " rank " << rank
                              << " allocated nothing on its GPU: its kernels did not run there";
    }
  }
}

const TrainRun& gpu_reference() {
  static const TrainRun run = train("reference", {"--devices=1", "--cluster.device=cuda"});
  return run;
}

// bf16 tolerances (the derivation of tests/elastic/recovery_test.cc): 2^-8 relative per loss,
// parameters within 1e-2 * steps / 256 + 2^-8 |p|.
constexpr double kBf16Loss = 1.0 / 256, kBf16Abs = 1e-2 * kSteps / 256, kBf16Rel = 1.0 / 256;

// The evidence the runs report, checked in this process: a tensor made on cuda:0 is there, the
// allocator's counters (device_memory, what workers report) grow by at least its bytes, a matmul
// on it runs as CUDA kernels (a Kineto profile holds events of device type CUDA) and gives the
// CPU's product; work on CPU tensors moves neither.
TEST(GpuDevice, TensorsAndKernelsAreOnTheGpuAndTheCountersSeeThem) {
  BW_REQUIRE_GPU(1);
  const torch::Device gpu(torch::kCUDA, 0);
  const auto cpu_a = torch::randn({512, 512});
  const auto before = device_memory(gpu);
  (void)torch::matmul(cpu_a, cpu_a);
  const auto after_cpu = device_memory(gpu);
  EXPECT_EQ(after_cpu.allocated_total_bytes, before.allocated_total_bytes);

  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const auto a = cpu_a.to(gpu);
  const auto c = torch::matmul(a, a);
  torch::cuda::synchronize();
  const auto result = prof::disableProfiler();
  EXPECT_TRUE(a.device().is_cuda());
  EXPECT_TRUE(c.device().is_cuda());
  const auto after = device_memory(gpu);
  const int64_t bytes = 2 * 512 * 512 * 4;  // a and c
  EXPECT_GE(after.allocated_total_bytes - before.allocated_total_bytes, bytes);
  EXPECT_GE(after.current_bytes - before.current_bytes, bytes);
  int cuda_events = 0;
  for (const auto& e : result->events()) cuda_events += e.deviceType() == c10::DeviceType::CUDA;
  EXPECT_GT(cuda_events, 0) << "no event of device type CUDA in the profile of a matmul on cuda:0";
  EXPECT_TRUE(torch::allclose(c.cpu(), torch::matmul(cpu_a, cpu_a), 1e-3, 1e-3));
  EXPECT_EQ(device_memory(torch::Device(torch::kCPU)).allocated_total_bytes, 0);
}

TEST(GpuTraining, Fp32OnTheGpuMatchesTheCpu) {
  BW_REQUIRE_GPU(1);
  const auto cpu = train("cpu_fp32", {"--devices=1", "--train.precision=fp32"});
  const auto gpu = train("gpu_fp32", {"--devices=1", "--cluster.device=cuda",
                                      "--train.precision=fp32"});
  expect_on_the_gpu(gpu, "fp32 on cuda");
  // Other kernels, other summation orders (and TF32 is off in LibTorch's defaults).
  expect_close(gpu, cpu, 1e-4, 1e-4, 1e-3, "fp32 cuda vs cpu");
  // The CPU run reports no device bytes: the evidence is the GPU's, not a constant.
  for (const auto& step : cpu.device_bytes)
    for (const auto& [held, allocated] : step) EXPECT_EQ(held + allocated, 0);
}

TEST(GpuTraining, HanayoOnOneGpuOverGlooMatchesOneProcess) {
  BW_REQUIRE_GPU(1);
  const auto& want = gpu_reference();
  const auto got = train("hanayo_shared", {"--devices=4", "--cluster.device=cuda",
                                           "--cluster.gpus=[0, 0, 0, 0]", "--pipeline.schedule=hanayo",
                                           "--pipeline.pipelines=[4]", "--pipeline.fault_tolerance=0"});
  expect_on_the_gpu(want, "one process on the GPU");
  expect_on_the_gpu(got, "hanayo, 4 workers on GPU 0");
  expect_close(got, want, kBf16Loss, kBf16Abs, kBf16Rel, "hanayo, 4 workers on GPU 0");
}

TEST(GpuTraining, NcclPipelinesMatchOneProcess) {
  // The only test of the NCCL transport: NCCL refuses two ranks of one communicator on one GPU
  // ("Duplicate GPU detected"; runtime/device.h refuses it first), so it needs two GPUs.
  RecordProperty("exercises", "NCCL transport");
  BW_REQUIRE_GPU(2);
  const auto& want = gpu_reference();
  const auto got = train("nccl", {"--devices=2", "--cluster.device=cuda", "--cluster.backend=nccl",
                                  "--pipeline.schedule=1f1b", "--pipeline.pipelines=[2]",
                                  "--pipeline.fault_tolerance=0"});
  expect_on_the_gpu(got, "1f1b over nccl on 2 GPUs");
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
  expect_on_the_gpu(want, "two pipelines on GPU 0");
  expect_on_the_gpu(got, "killed worker on a GPU");
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
  expect_on_the_gpu(first, "the first half on the GPU");
  const auto ckpt = (fs::path(work_dir()) / "resume_first" / "checkpoint-000004").string();
  const auto resumed = train("resume_second", {"--devices=1", "--cluster.device=cuda",
                                               "--train.resume=" + ckpt});
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  expect_on_the_gpu(resumed, "resumed on the GPU");
  TrainRun tail = resumed;
  TrainRun ref = want;
  ref.losses.erase(ref.losses.begin(), ref.losses.begin() + 4);
  expect_close(tail, ref, kBf16Loss, kBf16Abs, kBf16Rel, "resumed at step 4 on the GPU");
}

}  // namespace
}  // namespace bw::runtime
