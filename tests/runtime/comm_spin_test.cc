// How a worker waits for a collective (runtime/comm.h set_collective_spin): polling first must
// change nothing but the waiting. The ranks are threads over an in-memory store.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "core/error.h"
#include "runtime/comm.h"

namespace bw::runtime {
namespace {

using namespace std::chrono_literals;

// Restores sleeping waits however a test ends (the setting is process-wide).
struct SpinFor {
  explicit SpinFor(std::chrono::microseconds us) { set_collective_spin(us); }
  ~SpinFor() { set_collective_spin(0us); }
};

// Rank r of 2 contributes r + 1 + i / 7 at index i; both ranks return what they got. Rank 1
// enters each collective `late` after rank 0.
std::vector<std::pair<torch::Tensor, torch::Tensor>> two_ranks(
    const std::string& prefix, std::chrono::milliseconds late = 0ms) {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto t = make_gloo_transport(store, prefix, r, 2, 30s);
      auto mine = torch::arange(1000, torch::kFloat32) / 7 + (r + 1);
      auto gathered = torch::empty({2000});
      if (r == 1) std::this_thread::sleep_for(late);
      t->allgather(mine, gathered);
      auto gathered_then = gathered.clone();  // what the caller had when the call returned
      auto summed = mine.clone();
      if (r == 1) std::this_thread::sleep_for(late);
      t->allreduce_sum(summed);
      out[r] = {gathered_then, summed.clone()};
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

TEST(CollectiveSpin, PollingWaitsGiveTheSameResultsAsSleepingWaits) {
  const auto sleeping = two_ranks("sleep");
  std::vector<std::pair<torch::Tensor, torch::Tensor>> polling, outlasted;
  {
    SpinFor spin(50000us);
    polling = two_ranks("poll");
    // A peer later than the poll: the waiter must go on to wait, not return what it has.
    outlasted = two_ranks("outlast", 300ms);
  }
  // The reference written out: the gather is both ranks' values in rank order, the sum theirs.
  const auto base = torch::arange(1000, torch::kFloat32) / 7;
  const auto gathered = torch::cat({base + 1, base + 2});
  const auto summed = (base + 1) + (base + 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::equal(sleeping[r].first, gathered));
    EXPECT_TRUE(torch::equal(polling[r].first, gathered));
    EXPECT_TRUE(torch::equal(outlasted[r].first, gathered));
    EXPECT_TRUE(torch::equal(outlasted[r].second, summed));
    EXPECT_TRUE(torch::equal(sleeping[r].second, summed));
    EXPECT_TRUE(torch::equal(polling[r].second, summed));
  }
}

TEST(CollectiveSpin, AbortReleasesAWaiterThatIsStillPolling) {
  // Rank 1 joins the group but never enters the collective; rank 0 polls for a minute. The
  // generation's abort must end the wait at once, not after the poll.
  SpinFor spin(60s);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  auto abort = std::make_shared<AbortSignal>();
  std::atomic<bool> joined1{false}, done{false};
  std::string error;
  std::chrono::steady_clock::duration took{};
  std::thread rank1([&] {
    auto t = make_gloo_transport(store, "abort", 1, 2, 120s, "127.0.0.1", abort);
    joined1 = true;
    while (!done) std::this_thread::sleep_for(10ms);
    // Rank 1 never entered the collective that rank 0 left pending.
    std::vector<std::unique_ptr<Transport>> keep;
    keep.push_back(std::move(t));
    discard_in_background(std::move(keep));
  });
  std::thread rank0([&] {
    auto t = make_gloo_transport(store, "abort", 0, 2, 120s, "127.0.0.1", abort);
    while (!joined1) std::this_thread::sleep_for(1ms);
    auto x = torch::ones({1000});
    const auto t0 = std::chrono::steady_clock::now();
    try {
      t->allreduce_sum(x);
    } catch (const CommError& e) {
      error = e.what();
    }
    took = std::chrono::steady_clock::now() - t0;
    done = true;
    std::vector<std::unique_ptr<Transport>> keep;
    keep.push_back(std::move(t));
    discard_in_background(std::move(keep));
  });
  std::this_thread::sleep_for(200ms);
  abort->abort();
  rank0.join();
  rank1.join();
  EXPECT_NE(error.find("aborted"), std::string::npos) << error;
  EXPECT_LT(took, 20s) << "the abort waited for the poll to run out";
}

TEST(CollectiveSpin, AutoPollsOnlyWhereTheHostsCoresSuffice) {
  EXPECT_EQ(resolve_collective_spin_us(-1, 2, 1, 2), kAutoSpinUs);  // a core per worker
  EXPECT_EQ(resolve_collective_spin_us(-1, 4, 1, 2), 0);            // four workers on two cores
  EXPECT_EQ(resolve_collective_spin_us(-1, 2, 2, 2), 0);            // their threads do not fit
  EXPECT_EQ(resolve_collective_spin_us(-1, 2, 4, 8), kAutoSpinUs);
  EXPECT_EQ(resolve_collective_spin_us(0, 1, 1, 64), 0);      // told never to poll
  EXPECT_EQ(resolve_collective_spin_us(750, 16, 1, 2), 750);  // told how long
}

}  // namespace
}  // namespace bw::runtime
