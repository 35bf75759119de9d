#include "runtime/nccl_transport.h"

#include <cstdlib>

namespace bw::runtime {

std::vector<std::pair<std::string, std::string>> nccl_environment() {
  return {
      // The watchdog neither aborts communicators nor tears the process down on a timeout or an
      // NCCL error: breakwater's own deadlines notice, and the generation's abort aborts.
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"},
      // No heartbeat monitor that kills a process whose watchdog looks stuck (an aborted
      // communicator of a dead generation may keep it busy for a while).
      {"TORCH_NCCL_ENABLE_MONITORING", "0"},
      // wait() only orders the caller's stream after the operation; the host polls completion
      // against its own deadline.
      {"TORCH_NCCL_BLOCKING_WAIT", "0"},
      // Non-blocking communicators: init, abort and operations return to the host, so an abort
      // cannot hang behind a blocked kernel.
      {"TORCH_NCCL_USE_COMM_NONBLOCKING", "1"},
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"},
      // A lost peer is the coordinator's to report, not a store key every rank fails on.
      {"TORCH_NCCL_PROPAGATE_ERROR", "0"},
      // No flight recorder (gloo_backend.h disable_flight_recorder: its map of groups is written
      // outside its lock).
      {"TORCH_FR_BUFFER_SIZE", "0"},
  };
}

}  // namespace bw::runtime

#ifdef BW_CUDA

#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>
#include <sched.h>

#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "core/error.h"

namespace bw::runtime {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_aborted(const std::string& what) {
  throw CommError(fmt::format("{}: aborted (the generation is being reconfigured)", what));
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Waits for `work` by polling its completion (a CUDA event query) until `timeout` or the abort.
// On completion wait() orders the current stream after the operation (non-blocking mode) and
// rethrows the operation's error, if any.
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what,
               std::chrono::milliseconds timeout, const std::shared_ptr<AbortSignal>& abort) {
  const auto deadline = Clock::now() + timeout;
  try {
    int spins = 0;
    while (!work->isCompleted()) {
      if (abort && abort->aborted()) throw_aborted(what);
      if (Clock::now() > deadline) {
        throw CommError(fmt::format("{}: not complete after {} ms", what, timeout.count()));
      }
      if (++spins < 1000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    work->wait();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    if (abort && abort->aborted()) throw_aborted(what);
    throw CommError(fmt::format("{} failed: {}", what, first_line(e.what())));
  }
}

class NcclRequest final : public Request {
 public:
  NcclRequest(c10::intrusive_ptr<c10d::Work> work, torch::Tensor wire, torch::Tensor deliver,
              std::string what, std::chrono::milliseconds timeout,
              std::shared_ptr<AbortSignal> abort)
      : work_(std::move(work)),
        wire_(std::move(wire)),
        deliver_(std::move(deliver)),
        what_(std::move(what)),
        timeout_(timeout),
        abort_(std::move(abort)) {}

  void wait() override {
    if (!work_) return;
    wait_work(work_, what_, timeout_, abort_);
    work_.reset();
    if (deliver_.defined()) deliver_.copy_(wire_);
  }

  bool completed() override {
    try {
      return !work_ || work_->isCompleted();
    } catch (const std::exception&) {
      return false;  // a failed transfer: wait() reports it
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  torch::Tensor wire_;     // the tensor NCCL reads or writes, alive until waited
  torch::Tensor deliver_;  // a host tensor a staged receive is copied into
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<AbortSignal> abort_;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(c10::intrusive_ptr<c10d::ProcessGroupNCCL> group, std::string name,
                torch::Device device, std::chrono::milliseconds timeout,
                std::shared_ptr<AbortSignal> abort)
      : group_(std::move(group)),
        name_(std::move(name)),
        device_(device),
        timeout_(timeout),
        abort_(std::move(abort)) {
    if (abort_) {
      abort_->on_abort([g = group_] { g->abort(); });
    }
  }

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }

  std::unique_ptr<Request> isend(const torch::Tensor& tensor, int dst, int tag) override {
    auto what = fmt::format("send to rank {} of group {} (tag {})", dst, name_, tag);
    c10::cuda::CUDAGuard guard(device_);
    auto wire = on_device(tensor);
    std::vector<at::Tensor> ts{wire};
    return std::make_unique<NcclRequest>(start(what, [&] { return group_->send(ts, dst, tag); }),
                                         wire, torch::Tensor(), what, timeout_, abort_);
  }

  std::unique_ptr<Request> irecv(const torch::Tensor& tensor, int src, int tag) override {
    auto what = fmt::format("receive from rank {} of group {} (tag {})", src, name_, tag);
    c10::cuda::CUDAGuard guard(device_);
    const bool staged = tensor.device() != device_;
    auto wire = staged ? torch::empty_like(tensor, tensor.options().device(device_)) : tensor;
    std::vector<at::Tensor> ts{wire};
    return std::make_unique<NcclRequest>(start(what, [&] { return group_->recv(ts, src, tag); }),
                                         wire, staged ? tensor : torch::Tensor(), what, timeout_,
                                         abort_);
  }

  void allreduce_sum(const torch::Tensor& tensor) override {
    auto what = fmt::format("all-reduce of {} values on group {}", tensor.numel(), name_);
    c10::cuda::CUDAGuard guard(device_);
    auto wire = on_device(tensor);
    std::vector<at::Tensor> ts{wire};
    wait_work(start(what, [&] { return group_->allreduce(ts); }), what, timeout_, abort_);
    if (!wire.is_same(tensor)) tensor.copy_(wire);
  }

  void allgather(const torch::Tensor& input, const torch::Tensor& output) override {
    const int64_t k = input.numel();
    auto what = fmt::format("all-gather of {} values on group {}", k, name_);
    if (output.numel() != k * size()) {
      throw InternalError(
          fmt::format("{}: output of {} values for {} ranks", what, output.numel(), size()));
    }
    c10::cuda::CUDAGuard guard(device_);
    auto in = on_device(input).reshape({-1}).contiguous();
    auto out = output.device() == device_ && output.is_contiguous()
                   ? output
                   : torch::empty({output.numel()}, output.options().device(device_));
    auto out_flat = out.reshape({-1});
    wait_work(start(what, [&] { return group_->_allgather_base(out_flat, in); }), what, timeout_,
              abort_);
    if (!out.is_same(output)) output.copy_(out.view_as(output));
  }

 private:
  torch::Tensor on_device(const torch::Tensor& t) const {
    return t.device() == device_ ? t : t.to(device_);
  }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> start(const std::string& what, F&& f) {
    if (abort_ && abort_->aborted()) throw_aborted(what);
    try {
      return f();
    } catch (const std::exception& e) {
      if (abort_ && abort_->aborted()) throw_aborted(what);
      throw CommError(fmt::format("{} failed: {}", what, first_line(e.what())));
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  std::string name_;
  torch::Device device_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<AbortSignal> abort_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               const TransportOptions& options) {
  if (options.gpu < 0) {
    throw ConfigError(
        "cluster.backend = \"nccl\" needs cluster.device = \"cuda\"; use cluster.backend = "
        "\"gloo\" on the CPU");
  }
  static const bool env_set = [] {
    for (const auto& [name, value] : nccl_environment()) setenv(name.c_str(), value.c_str(), 1);
    return true;
  }();
  (void)env_set;
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.gpu));
  c10::cuda::CUDAGuard guard(device);
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  // The watchdog's own timeout is past breakwater's deadline: breakwater reports first.
  nccl_options->timeout = options.timeout * 2;
#ifdef NCCL_HAS_CONFIG
  nccl_options->config.blocking = 0;
#endif
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, nccl_options);
    // The world communicator now, not at the first collective, so a rank that cannot join fails
    // here, within the deadline of the join.
    group->eagerConnectSingleDevice(device);
    return std::make_unique<NcclTransport>(std::move(group), prefix, device, options.timeout,
                                           options.abort);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {} could not join NCCL group {} of {} ranks on {}: {}", rank,
                                prefix, size, device.str(), first_line(e.what())));
  }
}

}  // namespace bw::runtime

#endif  // BW_CUDA
