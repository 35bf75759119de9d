#include "runtime/comm.h"

#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/error.h"

namespace bw::runtime {
namespace {

class GlooRequest final : public Request {
 public:
  GlooRequest(c10::intrusive_ptr<c10d::Work> work, torch::Tensor tensor, std::string what,
              std::chrono::milliseconds timeout)
      : work_(std::move(work)),
        tensor_(std::move(tensor)),
        what_(std::move(what)),
        timeout_(timeout) {}

  void wait() override {
    if (!work_) return;
    try {
      if (!work_->wait(timeout_)) {
        throw CommError(fmt::format("{}: not complete after {} ms", what_, timeout_.count()));
      }
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what_, first_line(e.what())));
    }
    work_.reset();
  }

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  torch::Tensor tensor_;  // keeps the buffer alive until the transfer completes
  std::string what_;
  std::chrono::milliseconds timeout_;
};

class GlooTransport final : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, std::string name,
                std::chrono::milliseconds timeout)
      : group_(std::move(group)), name_(std::move(name)), timeout_(timeout) {}

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }

  std::unique_ptr<Request> isend(const torch::Tensor& tensor, int dst, int tag) override {
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("send to rank {} of group {} (tag {})", dst, name_, tag);
    try {
      return std::make_unique<GlooRequest>(group_->send(ts, dst, tag), tensor, what, timeout_);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
  }

  std::unique_ptr<Request> irecv(const torch::Tensor& tensor, int src, int tag) override {
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("receive from rank {} of group {} (tag {})", src, name_, tag);
    try {
      return std::make_unique<GlooRequest>(group_->recv(ts, src, tag), tensor, what, timeout_);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
  }

  void allreduce_sum(const torch::Tensor& tensor) override {
    std::vector<at::Tensor> ts{tensor};
    auto what = fmt::format("all-reduce of {} values on group {}", tensor.numel(), name_);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = group_->allreduce(ts);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, GlooRequest::first_line(e.what())));
    }
    GlooRequest(std::move(work), tensor, what, timeout_).wait();
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::string name_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Transport> make_gloo_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               const std::string& hostname) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  options->threads = 1;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options);
    return std::make_unique<GlooTransport>(std::move(group), prefix, timeout);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {} could not join group {} of {} ranks within {} ms: {}",
                                rank, prefix, size, timeout.count(),
                                GlooRequest::first_line(e.what())));
  }
}

}  // namespace bw::runtime
