#include "runtime/comm.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "core/check.h"
#include "core/error.h"
#include "runtime/gloo_backend.h"
#include "runtime/nccl_transport.h"

namespace bw::runtime {

namespace {
std::atomic<int64_t> g_spin_us{0};  // set_collective_spin()
}  // namespace

void set_collective_spin(std::chrono::microseconds spin) {
  g_spin_us.store(std::max<int64_t>(0, spin.count()));
}

int64_t resolve_collective_spin_us(int64_t configured, int workers_per_host, int threads_per_worker,
                                   int cores) {
  if (configured >= 0) return configured;
  return static_cast<int64_t>(workers_per_host) * threads_per_worker <= cores ? kAutoSpinUs : 0;
}

void Transport::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  const int64_t k = input.numel();
  BW_CHECK(output.numel() == k * size(), "all-gather of {} values into {} for {} ranks", k,
           output.numel(), size());
  output.zero_();
  output.narrow(0, rank() * k, k).copy_(input.reshape({-1}));
  allreduce_sum(output);
}
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSlice = std::chrono::milliseconds(10);

[[noreturn]] void throw_aborted(const std::string& what) {
  throw CommError(fmt::format("{}: aborted (the generation is being reconfigured)", what));
}

class GlooRequest final : public Request {
 public:
  // `p2p`: a send or receive, which c10d can abort; else a collective, waited in slices.
  // `deliver`: where a receive staged through host memory goes once it completes (a CUDA
  // tensor; Gloo moves host bytes only), or undefined.
  GlooRequest(c10::intrusive_ptr<c10d::Work> work, torch::Tensor tensor, std::string what,
              std::chrono::milliseconds timeout, std::shared_ptr<AbortSignal> abort, bool p2p,
              torch::Tensor deliver = {})
      : work_(std::move(work)),
        tensor_(std::move(tensor)),
        deliver_(std::move(deliver)),
        what_(std::move(what)),
        timeout_(timeout),
        abort_(std::move(abort)),
        p2p_(p2p) {
    if (abort_ && p2p_) abort_->add(work_);
  }
  ~GlooRequest() override {
    if (abort_ && p2p_ && work_) abort_->remove(work_);
  }

  void wait() override {
    if (!work_) return;
    try {
      if (p2p_) {
        const bool done = work_->wait(timeout_);
        if (abort_ && abort_->aborted()) throw_aborted(what_);
        if (!done) {
          throw CommError(fmt::format("{}: not complete after {} ms", what_, timeout_.count()));
        }
      } else {
        wait_in_slices();
      }
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      if (abort_ && abort_->aborted()) throw_aborted(what_);
      throw CommError(fmt::format("{} failed: {}", what_, first_line(e.what())));
    }
    if (abort_ && p2p_) abort_->remove(work_);
    work_.reset();
    if (deliver_.defined()) deliver_.copy_(tensor_);
  }

  bool completed() override {
    try {
      return !work_ || work_->isCompleted();
    } catch (const std::exception&) {
      return false;  // a failed transfer: wait() reports it
    }
  }

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

 private:
  void wait_in_slices() {
    const auto deadline = Clock::now() + timeout_;
    // Poll first (set_collective_spin): a peer that is in step completes the collective within
    // the spin, and this thread never sleeps, so no wake-up latency is paid on its way back.
    if (const int64_t spin = g_spin_us.load(std::memory_order_relaxed); spin > 0) {
      const auto until = Clock::now() + std::chrono::microseconds(spin);
      while (!work_->isCompleted() && Clock::now() < until) {
        if (abort_ && abort_->aborted()) throw_aborted(what_);
        sched_yield();
      }
    }
    while (true) {
      if (abort_ && abort_->aborted()) throw_aborted(what_);
      try {
        work_->wait(abort_ ? kSlice : timeout_);
        return;
      } catch (const std::exception& e) {
        if (work_->isCompleted()) {
          // It may have completed just after the slice ran out: wait again, which returns at
          // once or rethrows the operation's own error.
          work_->wait(kSlice);
          return;
        }
        if (Clock::now() > deadline) {
          throw CommError(fmt::format("{}: not complete after {} ms", what_, timeout_.count()));
        }
      }
    }
  }

  c10::intrusive_ptr<c10d::Work> work_;
  torch::Tensor tensor_;  // keeps the buffer alive until the transfer completes
  torch::Tensor deliver_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<AbortSignal> abort_;
  bool p2p_;
};

class GlooTransport final : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::Backend> group, std::string name,
                std::chrono::milliseconds timeout, std::shared_ptr<AbortSignal> abort)
      : group_(std::move(group)),
        name_(std::move(name)),
        timeout_(timeout),
        abort_(std::move(abort)) {}

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }

  // Gloo reads and writes host memory: a CUDA tensor travels through a host copy (sends copy
  // first; receives land in host memory and are copied to the device when waited).
  std::unique_ptr<Request> isend(const torch::Tensor& device_tensor, int dst, int tag) override {
    const torch::Tensor tensor = host(device_tensor);
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("send to rank {} of group {} (tag {})", dst, name_, tag);
    try {
      if (abort_ && abort_->aborted()) throw_aborted(what);
      return std::make_unique<GlooRequest>(group_->send(ts, dst, tag), tensor, what, timeout_,
                                           abort_, true);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
  }

  std::unique_ptr<Request> irecv(const torch::Tensor& device_tensor, int src, int tag) override {
    const bool staged = !device_tensor.device().is_cpu();
    const torch::Tensor tensor =
        staged ? torch::empty_like(device_tensor, device_tensor.options().device(torch::kCPU))
               : device_tensor;
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("receive from rank {} of group {} (tag {})", src, name_, tag);
    try {
      if (abort_ && abort_->aborted()) throw_aborted(what);
      return std::make_unique<GlooRequest>(group_->recv(ts, src, tag), tensor, what, timeout_,
                                           abort_, true, staged ? device_tensor : torch::Tensor());
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
  }

  void allreduce_sum(const torch::Tensor& device_tensor) override {
    const torch::Tensor tensor = host(device_tensor);
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("all-reduce of {} values on group {}", tensor.numel(), name_);
    c10::intrusive_ptr<c10d::Work> work;
    if (abort_ && abort_->aborted()) throw_aborted(what);
    try {
      work = group_->allreduce(ts);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
    GlooRequest(std::move(work), tensor, what, timeout_, abort_, false).wait();
    if (!device_tensor.is_same(tensor)) device_tensor.copy_(tensor);
  }

  void allgather(const torch::Tensor& device_input, const torch::Tensor& device_output) override {
    const torch::Tensor input = host(device_input);
    const torch::Tensor output = host(device_output);
    const int64_t k = input.numel();
    BW_CHECK(output.numel() == k * size(), "all-gather of {} values into {} for {} ranks", k,
             output.numel(), size());
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size(); ++r) outs[0].push_back(output.narrow(0, r * k, k));
    std::vector<at::Tensor> ins{input};
    auto what = fmt::format("all-gather of {} values on group {}", k, name_);
    c10::intrusive_ptr<c10d::Work> work;
    if (abort_ && abort_->aborted()) throw_aborted(what);
    try {
      work = group_->allgather(outs, ins);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
    GlooRequest(std::move(work), input, what, timeout_, abort_, false).wait();
    if (!device_output.is_same(output)) device_output.copy_(output);
  }

 private:
  static torch::Tensor host(const torch::Tensor& t) {
    return t.device().is_cpu() ? t : t.to(torch::kCPU);
  }

  c10::intrusive_ptr<c10d::Backend> group_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<AbortSignal> abort_;
};

// The rendezvous of a new group, in a helper thread so an abort can leave it behind.
struct Join {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  c10::intrusive_ptr<c10d::Backend> group;
  std::exception_ptr error;
};

}  // namespace

AbortSignal::AbortSignal() = default;
AbortSignal::~AbortSignal() = default;

void AbortSignal::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  for (auto& w : pending_) {
    try {
      w->abort();
    } catch (...) {
      // Work kinds without abort are waited in slices instead.
    }
  }
  pending_.clear();
  for (auto& fn : hooks_) {
    try {
      fn();
    } catch (...) {
      // A group that cannot abort is left to its waits' deadlines.
    }
  }
}

void AbortSignal::on_abort(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    try {
      fn();
    } catch (...) {
    }
    return;
  }
  hooks_.push_back(std::move(fn));
}

void AbortSignal::add(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    try {
      work->abort();
    } catch (...) {
    }
    return;
  }
  pending_.push_back(work);
}

void AbortSignal::remove(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(std::remove(pending_.begin(), pending_.end(), work), pending_.end());
}

void discard_in_background(std::vector<std::unique_ptr<Transport>> transports) {
  if (transports.empty()) return;
  std::thread([ts = std::move(transports)]() mutable { ts.clear(); }).detach();
}

BackendKind parse_backend(const std::string& name) {
  if (name == "gloo") return BackendKind::kGloo;
  if (name == "nccl") return BackendKind::kNccl;
  throw ConfigError(
      fmt::format("cluster.backend = \"{}\" is not a backend; choose \"gloo\" or \"nccl\"", name));
}

std::unique_ptr<Transport> make_transport(const TransportOptions& options,
                                          const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::string& prefix, int rank, int size) {
  switch (options.backend) {
    case BackendKind::kGloo:
      return make_gloo_transport(store, prefix, rank, size, options.timeout, options.hostname,
                                 options.abort);
    case BackendKind::kNccl:
#ifdef BW_CUDA
      return make_nccl_transport(store, prefix, rank, size, options);
#else
      break;
#endif
  }
  throw ConfigError(
      "cluster.backend = \"nccl\" needs the CUDA variant of breakwater (BW_CUDA=1 "
      "scripts/setup.sh, docs/build.md); use cluster.backend = \"gloo\"");
}

std::unique_ptr<Transport> make_gloo_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               const std::string& hostname,
                                               std::shared_ptr<AbortSignal> abort) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  try {
    if (!abort) {
      auto group = make_gloo_backend(prefixed, rank, size, timeout, hostname);
      return std::make_unique<GlooTransport>(std::move(group), prefix, timeout, nullptr);
    }
    auto join = std::make_shared<Join>();
    std::thread thread([join, prefixed, rank, size, timeout, hostname] {
      c10::intrusive_ptr<c10d::Backend> group;
      std::exception_ptr error;
      try {
        group = make_gloo_backend(prefixed, rank, size, timeout, hostname);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(join->mu);
      join->group = std::move(group);
      join->error = error;
      join->done = true;
      join->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(join->mu);
    while (!join->cv.wait_for(lock, kSlice, [&] { return join->done; })) {
      if (abort->aborted()) {
        lock.unlock();
        thread.detach();  // it ends when the rendezvous times out
        throw_aborted(fmt::format("rank {} joining group {}", rank, prefix));
      }
    }
    lock.unlock();
    thread.join();
    if (join->error) std::rethrow_exception(join->error);
    return std::make_unique<GlooTransport>(std::move(join->group), prefix, timeout, abort);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {} could not join group {} of {} ranks within {} ms: {}",
                                rank, prefix, size, timeout.count(),
                                GlooRequest::first_line(e.what())));
  }
}

}  // namespace bw::runtime
