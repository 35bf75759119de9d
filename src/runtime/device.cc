#include "runtime/device.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#ifdef BW_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cstdlib>
#include <map>

#include "core/check.h"
#include "core/error.h"

namespace bw::runtime {

int visible_gpus() { return static_cast<int>(torch::cuda::device_count()); }

bool built_with_cuda() {
#ifdef BW_CUDA
  return true;
#else
  return false;
#endif
}

std::string gpu_name(int index) {
#ifdef BW_CUDA
  if (index < 0 || index >= visible_gpus()) return "";
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->name;
#else
  (void)index;
  return "";
#endif
}

DeviceMemory device_memory(const torch::Device& device) {
#ifdef BW_CUDA
  if (!device.is_cuda()) return {};
  const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  const auto& bytes =
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return {bytes.current, bytes.allocated};
#else
  (void)device;
  return {};
#endif
}

void use_device(const torch::Device& device) {
#ifdef BW_CUDA
  c10::cuda::set_device(device.index());
#else
  BW_CHECK(false, "use_device({}) in a build without CUDA", device.str());
#endif
}

namespace {

std::string visible_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? std::string("unset") : fmt::format("\"{}\"", v);
}

}  // namespace

void check_devices(const ClusterConfig& c, int workers_on_host, int visible, bool cuda_build) {
  if (c.backend == "nccl" && c.device != "cuda") {
    throw ConfigError(fmt::format(
        "cluster.backend = \"nccl\" needs cluster.device = \"cuda\" (got \"{}\"); use "
        "cluster.backend = \"gloo\" on the CPU",
        c.device));
  }
  if (c.device != "cuda") {
    if (!c.gpus.empty()) {
      throw ConfigError(fmt::format(
          "cluster.gpus = [{}] is given but cluster.device = \"{}\"; set cluster.device = "
          "\"cuda\" or remove cluster.gpus",
          fmt::join(c.gpus, ", "), c.device));
    }
    return;
  }
  if (!cuda_build) {
    throw ConfigError(
        "cluster.device = \"cuda\" but this breakwater was built without CUDA; build the CUDA "
        "variant (BW_CUDA=1 scripts/setup.sh, docs/build.md) or use cluster.device = \"cpu\"");
  }
  if (visible == 0) {
    throw ConfigError(fmt::format(
        "cluster.device = \"cuda\" but no GPU is visible to this process (CUDA_VISIBLE_DEVICES "
        "{}; is the NVIDIA driver loaded?); run where GPUs are visible or use cluster.device = "
        "\"cpu\"",
        visible_env()));
  }
  if (c.gpus.empty()) {
    if (workers_on_host > visible) {
      throw ConfigError(fmt::format(
          "{} workers on this host need {} GPUs but {} {} visible (CUDA_VISIBLE_DEVICES {}); "
          "run at most {} workers per host, or let workers share GPUs with an explicit "
          "cluster.gpus list (e.g. [{}]) and cluster.backend = \"gloo\"",
          workers_on_host, workers_on_host, visible, visible == 1 ? "is" : "are", visible_env(),
          visible, fmt::join(std::vector<int>(static_cast<size_t>(workers_on_host), 0), ", ")));
    }
    return;
  }
  if (static_cast<int>(c.gpus.size()) != workers_on_host) {
    throw ConfigError(fmt::format(
        "cluster.gpus lists {} GPU(s) for the {} workers on this host; give one GPU index per "
        "worker of a host",
        c.gpus.size(), workers_on_host));
  }
  std::map<int, int> first;  // GPU -> the first local rank on it
  for (size_t i = 0; i < c.gpus.size(); ++i) {
    const int g = c.gpus[i];
    if (g < 0 || g >= visible) {
      throw ConfigError(fmt::format(
          "cluster.gpus[{}] = {} is out of range: this process sees {} GPU(s), indices 0..{} "
          "(CUDA_VISIBLE_DEVICES {}); give indices below {}",
          i, g, visible, visible - 1, visible_env(), visible));
    }
    auto [it, fresh] = first.emplace(g, static_cast<int>(i));
    if (!fresh && c.backend == "nccl") {
      throw ConfigError(fmt::format(
          "cluster.gpus puts local workers {} and {} on GPU {} with cluster.backend = \"nccl\", "
          "and NCCL refuses two ranks on one GPU; give each worker its own GPU, or use "
          "cluster.backend = \"gloo\" to share one",
          it->second, i, g));
    }
  }
}

int gpu_of(const ClusterConfig& c, int slot) {
  if (c.device != "cuda") return -1;
  if (c.gpus.empty()) return slot;
  BW_CHECK(slot >= 0 && slot < static_cast<int>(c.gpus.size()), "worker slot {} of {} listed GPUs",
           slot, c.gpus.size());
  return c.gpus[static_cast<size_t>(slot)];
}

model::Precision run_precision(const TrainConfig& train, const ClusterConfig& cluster) {
  if (train.precision == "auto") {
    return cluster.device == "cuda" ? model::Precision::kBf16 : model::Precision::kFp32;
  }
  return model::parse_precision(train.precision);
}

model::Placement worker_placement(const TrainConfig& train, const ClusterConfig& cluster,
                                  int slot) {
  const auto precision = run_precision(train, cluster);
  const int gpu = gpu_of(cluster, slot);
  if (gpu < 0) return model::Placement::cpu(precision);
  return model::Placement::on(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu)),
                              precision);
}

}  // namespace bw::runtime
