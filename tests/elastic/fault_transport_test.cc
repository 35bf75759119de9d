// A rank's transport fails at its i-th operation in the middle of a step, with ranks as threads
// over an in-memory store (after Gloo's tests). The generation's abort signal must release every
// other rank at once (long before Gloo's own timeout), no rank may have applied anything, and the
// step replayed in a new generation on the same model states must give bitwise the parameters
// of the failure-free run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../scratch.h"
#include "core/error.h"
#include "elastic/planning.h"
#include "runtime/comm.h"
#include "runtime/model_state.h"
#include "runtime/worker.h"

namespace bw::elastic {
namespace {

using runtime::Transport;

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, std::atomic<int>* ops, int fail_at,
                  std::shared_ptr<runtime::AbortSignal> abort)
      : inner_(std::move(inner)), ops_(ops), fail_at_(fail_at), abort_(std::move(abort)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<runtime::Request> isend(const torch::Tensor& t, int dst, int tag) override {
    tick();
    return inner_->isend(t, dst, tag);
  }
  std::unique_ptr<runtime::Request> irecv(const torch::Tensor& t, int src, int tag) override {
    tick();
    return inner_->irecv(t, src, tag);
  }
  void allreduce_sum(const torch::Tensor& t) override {
    tick();
    inner_->allreduce_sum(t);
  }

 private:
  void tick() {
    if (fail_at_ >= 0 && (*ops_)++ == fail_at_) {
      abort_->abort();  // what the coordinator's abort key does when it learns of the failure
      throw CommError("injected transport failure");
    }
  }
  std::unique_ptr<Transport> inner_;
  std::atomic<int>* ops_;
  int fail_at_;
  std::shared_ptr<runtime::AbortSignal> abort_;
};

struct Ranks {
  runtime::RunConfig config;
  runtime::RunLayout layout;
  std::vector<std::unique_ptr<runtime::ModelState>> states;
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();

  Ranks() {
    config.model.name = "tiny";
    config.cluster.nodes = 4;
    config.pipeline.schedule = "1f1b";
    config.pipeline.microbatches = 4;
    config.pipeline.microbatch_size = 2;
    config.data.path = corpus();
    config.train.steps = 4;
    const auto model = model::named_config("tiny", 256);
    auto [ctx, run] = initial_plan(config, model, 4);
    layout = run.layout;
    for (int r = 0; r < 4; ++r) {
      states.push_back(std::make_unique<runtime::ModelState>(config.train, model, 1234));
      states.back()->keep_only(layout.layers_of(r));
    }
  }

  // One file per test process: ctest runs these cases in parallel processes, and one that
  // rewrote a shared file while another read it left that one's ranks without data.
  static std::string corpus() {
    static const std::string path = [] {
      auto p = (bw::testing::process_scratch("bw_fault_transport") / "corpus.txt").string();
      {
        std::ofstream out(p + ".tmp");
        for (int i = 0; i < 20000; ++i) out << static_cast<char>('a' + (i * 7919) % 26);
      }
      std::filesystem::rename(p + ".tmp", p);
      return p;
    }();
    return path;
  }

  // One generation on every rank (threads): steps [first, last). Rank `faulty` fails at its
  // operation `fail_at` (-1: never). Returns per rank the error message ("" when none).
  std::vector<std::string> generation(int g, int first, int last, int faulty = -1,
                                      int fail_at = -1) {
    auto abort = std::make_shared<runtime::AbortSignal>();
    std::atomic<int> ops{0};
    std::vector<std::string> errors(4);
    std::vector<std::thread> threads;
    layout.generation = g;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::unique_ptr<Transport>> keep;
        try {
          runtime::TransportFactory factory = [&](const std::string& prefix, int rank, int size) {
            auto t = runtime::make_gloo_transport(store, prefix, rank, size,
                                                  std::chrono::seconds(60), "127.0.0.1", abort);
            return std::unique_ptr<Transport>(std::make_unique<FaultyTransport>(
                std::move(t), &ops, r == faulty ? fail_at : -1, abort));
          };
          runtime::Worker w(config, layout, r, *states[r], factory("g" + std::to_string(g) + "/world", r, 4),
                            factory);
          try {
            for (int s = first; s < last; ++s) {
              auto p = w.prepare(s);
              w.apply(s, p);
            }
          } catch (...) {
            keep = w.release_transports();
            throw;
          }
          keep = w.release_transports();
        } catch (const CommError& e) {
          errors[r] = e.what();
        } catch (const std::exception& e) {
          errors[r] = std::string("not a CommError: ") + e.what();
          abort->abort();  // the peers are not left waiting for this rank (the test fails)
        }
        runtime::discard_in_background(std::move(keep));
      });
    }
    for (auto& t : threads) t.join();
    return errors;
  }

  std::vector<std::map<int, uint64_t>> checksums() {
    std::vector<std::map<int, uint64_t>> out;
    for (auto& s : states) {
      auto p = s->parameter_checksums();
      for (auto& [l, h] : s->optimizer_checksums()) p[100 + l] = h;
      out.push_back(p);
    }
    return out;
  }
};

class FailAt : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(FailAt, OthersAreReleasedNothingIsAppliedAndTheReplayIsBitwiseExact) {
  const auto [faulty, fail_at] = GetParam();
  Ranks reference;
  ASSERT_EQ(reference.generation(0, 0, 2), std::vector<std::string>(4, ""));
  const auto want = reference.checksums();

  Ranks ranks;
  ASSERT_EQ(ranks.generation(0, 0, 1), std::vector<std::string>(4, ""));
  const auto before = ranks.checksums();
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = ranks.generation(1, 1, 2, faulty, fail_at);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(20)) << "ranks waited for Gloo's timeout, not the abort";
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(errors[r].empty()) << "rank " << r << " finished a step whose peer failed";
    EXPECT_EQ(errors[r].find("not a CommError"), std::string::npos) << errors[r];
    EXPECT_EQ(ranks.states[r]->steps_done, 1) << "rank " << r;
  }
  EXPECT_EQ(ranks.checksums(), before) << "a rank changed its state in the failed step";
  // Step 1 again, in a new generation on the same states: exactly the failure-free result.
  ASSERT_EQ(ranks.generation(2, 1, 2), std::vector<std::string>(4, ""));
  EXPECT_EQ(ranks.checksums(), want);
}

INSTANTIATE_TEST_SUITE_P(Transport, FailAt,
                         ::testing::Values(std::make_pair(0, 0), std::make_pair(0, 5),
                                           std::make_pair(1, 2), std::make_pair(3, 5),
                                           std::make_pair(2, 4), std::make_pair(3, 0)),
                         [](const auto& info) {
                           return "rank" + std::to_string(info.param.first) + "_op" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace bw::elastic
