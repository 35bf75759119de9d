// Which device a worker runs on (docs/runtime.md "Device and backend"): cluster.device,
// cluster.gpus, cluster.backend and the GPUs this process sees.
//
// The workers of one host are numbered 0, 1, ... (their slot: the local device of a node on a
// host of its own, the worker id where one host runs every node, as `train --devices N` does),
// and slot i takes GPU cluster.gpus[i] when the list is given, else GPU i. The indices are those the CUDA runtime shows this process, so CUDA_VISIBLE_DEVICES
// (applied by the driver before the process sees any GPU) renumbers them: with
// CUDA_VISIBLE_DEVICES=2,3, GPU 0 is the machine's third. Several workers may share one GPU only
// when the list says so (cluster.gpus = [0, 0, 0, 0]) and only over Gloo: NCCL refuses two ranks
// of one communicator on one device.
//
// check_devices runs once before any worker starts (the coordinator, the agent) and again in each
// worker, so every mistake is one ConfigError (exit 2) naming the case and the fix, never a crash
// inside CUDA or NCCL.
//
// Thread-safety: the functions are pure, except visible_gpus(), which asks the CUDA runtime
// (thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/placement.h"
#include "runtime/config.h"

namespace bw::runtime {

// GPUs this process sees: torch::cuda::device_count() in the CUDA build, 0 in the CPU build or
// where no driver is loaded.
int visible_gpus();
// Whether this binary was built with CUDA (-DBW_CUDA=ON).
bool built_with_cuda();
// The name CUDA reports for GPU `index` ("NVIDIA H200"); "" in the CPU build or out of range.
std::string gpu_name(int index);

// The CUDA caching allocator's byte counters of `device`: what its tensors hold now, and what was
// ever allocated there (grows with every tensor a kernel or a copy writes on the device). Zero for
// the CPU and in the CPU build. Evidence, in the step reports, that a rank's tensors and kernels
// were on its GPU (docs/gpu.md).
struct DeviceMemory {
  int64_t current_bytes = 0;
  int64_t allocated_total_bytes = 0;
};
DeviceMemory device_memory(const torch::Device& device);

// Makes `device` (cuda:i) this thread's current CUDA device, where CUDA work without an explicit
// device goes (NCCL's streams, the caching allocator's default). InternalError in the CPU build.
void use_device(const torch::Device& device);

// Throws ConfigError for: cuda with no GPU visible (naming the build when it has no CUDA), a
// cluster.gpus entry out of range, more workers on the host than GPUs without an explicit list,
// a list whose length is not the host's worker count, two NCCL ranks on one GPU, nccl on the CPU.
// `workers_on_host`: the host's worker count; `visible`: visible_gpus() (parameters, so that
// every case is tested without a GPU).
void check_devices(const ClusterConfig& cluster, int workers_on_host, int visible,
                   bool cuda_build);

// The GPU index of the host's worker `slot` (after check_devices); -1 for cluster.device = "cpu".
int gpu_of(const ClusterConfig& cluster, int slot);

// The precision a run trains in: train.precision, where "auto" is bf16 on GPUs and fp32 on CPUs.
model::Precision run_precision(const TrainConfig& train, const ClusterConfig& cluster);

// Where the host's worker `slot` keeps its tensors: cpu, or cuda:gpu_of(...), in run_precision.
model::Placement worker_placement(const TrainConfig& train, const ClusterConfig& cluster,
                                  int slot);

}  // namespace bw::runtime
