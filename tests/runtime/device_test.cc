// Device placement (runtime/device.h): every case of docs/runtime.md "Device and backend" with the
// GPU count given, so each is checked on machines without a GPU; and the CLI's refusal of cuda
// where this machine has none.
#include "runtime/device.h"

#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"
#include "core/error.h"

namespace bw::runtime {
namespace {

ClusterConfig cuda(int devices_per_node, std::vector<int> gpus = {}, std::string backend = "gloo") {
  ClusterConfig c;
  c.device = "cuda";
  c.devices_per_node = devices_per_node;
  c.gpus = std::move(gpus);
  c.backend = std::move(backend);
  return c;
}

// The ConfigError's message, or "" when none is thrown.
// `c`'s devices_per_node stands for the host's worker count.
std::string error_of(const ClusterConfig& c, int visible, bool cuda_build = true) {
  try {
    check_devices(c, c.devices_per_node, visible, cuda_build);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(Devices, EveryMistakeIsOneErrorNamingTheCaseAndTheFix) {
  expect_contains(error_of(cuda(1), 1, false), "built without CUDA");
  expect_contains(error_of(cuda(1), 0), "no GPU is visible");
  // More workers than GPUs, without a list: the fix names the sharing list and gloo.
  const auto more = error_of(cuda(4), 2);
  expect_contains(more, "4 workers on this host need 4 GPUs but 2 are visible");
  expect_contains(more, "cluster.gpus");
  expect_contains(error_of(cuda(2, {0, 2}), 2), "cluster.gpus[1] = 2 is out of range");
  expect_contains(error_of(cuda(3, {0, 1}), 2), "lists 2 GPU(s) for the 3 workers on this host");
  const auto shared = error_of(cuda(2, {1, 1}, "nccl"), 2);
  expect_contains(shared, "local workers 0 and 1 on GPU 1");
  expect_contains(shared, "NCCL refuses");
  ClusterConfig cpu_nccl;
  cpu_nccl.backend = "nccl";
  expect_contains(error_of(cpu_nccl, 8), "needs cluster.device = \"cuda\"");
  ClusterConfig cpu_list;
  cpu_list.gpus = {0};
  expect_contains(error_of(cpu_list, 8), "cluster.gpus = [0] is given but cluster.device");
}

TEST(Devices, ValidPlacementsPassAndMapLocalRanks) {
  EXPECT_EQ(error_of(ClusterConfig{}, 0, false), "");  // the CPU needs nothing
  EXPECT_EQ(error_of(cuda(2), 2), "");
  EXPECT_EQ(error_of(cuda(2, {}, "nccl"), 4), "");
  EXPECT_EQ(error_of(cuda(4, {0, 0, 0, 0}), 1), "");  // sharing over gloo
  EXPECT_EQ(error_of(cuda(2, {1, 0}, "nccl"), 2), "");
  EXPECT_EQ(gpu_of(cuda(2), 1), 1);
  EXPECT_EQ(gpu_of(cuda(2, {3, 2}), 0), 3);
  EXPECT_EQ(gpu_of(ClusterConfig{}, 0), -1);
}

TEST(Devices, AutoPrecisionIsBf16OnGpusAndFp32OnCpus) {
  TrainConfig t;
  ASSERT_EQ(t.precision, "auto");
  EXPECT_EQ(run_precision(t, cuda(1)), model::Precision::kBf16);
  EXPECT_EQ(run_precision(t, ClusterConfig{}), model::Precision::kFp32);
  t.precision = "fp32";
  EXPECT_EQ(run_precision(t, cuda(1)), model::Precision::kFp32);
  t.precision = "bf16";
  EXPECT_EQ(run_precision(t, ClusterConfig{}), model::Precision::kBf16);
  const auto p = worker_placement(TrainConfig{}, ClusterConfig{}, 0);
  EXPECT_TRUE(p.device.is_cpu());
  EXPECT_EQ(p.compute_dtype, torch::kFloat);
}

// Where this machine sees no GPU (CI), cuda is refused before any worker starts, in one line
// with exit status 2; which line depends on the build.
TEST(Devices, CudaWithoutAGpuIsRefusedByTheCli) {
  if (visible_gpus() > 0) GTEST_SKIP() << "this machine has a GPU: the gpu tests cover cuda";
  const auto dir = bw::testing::scratch_dir(::testing::TempDir() + "/bw_devices_cli");
  const auto r = bw::testing::run_cli({"train", "--quiet", "--devices=2", "--model.name=tiny",
                                       "--train.steps=1", "--cluster.device=cuda",
                                       "--train.out_dir=" + dir + "/out"},
                                      dir + "/log", 60, [](pid_t) {});
  EXPECT_EQ(r.status, 2) << r.output;
  expect_contains(r.output, built_with_cuda() ? "no GPU is visible" : "built without CUDA");
  const auto nccl = bw::testing::run_cli(
      {"train", "--quiet", "--devices=2", "--model.name=tiny", "--train.steps=1",
       "--cluster.backend=nccl", "--train.out_dir=" + dir + "/out2"},
      dir + "/log2", 60, [](pid_t) {});
  EXPECT_EQ(nccl.status, 2) << nccl.output;
  expect_contains(nccl.output, "needs cluster.device = \"cuda\"");
}

}  // namespace
}  // namespace bw::runtime
