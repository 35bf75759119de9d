// What the end-to-end checkpoint tests (async_checkpoint_test.cc, checkpoint_commit_fault_test.cc)
// share: a small text corpus, the arguments of a short run of the tiny model, an environment
// variable set for one test, and the bitwise comparison of two checkpoints (every parameter and
// AdamW tensor).
//
// Thread-safety: for one test thread.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/checkpointing.h"

namespace bw::testing {

// Writes 20000 words (lines of 11) drawn from `words` with a fixed seed to `path`; returns it.
inline std::string write_word_corpus(const std::string& path, const std::vector<std::string>& words) {
  std::ofstream out(path);
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) out << words[rng() % words.size()] << (i % 11 == 10 ? "\n" : " ");
  return path;
}

// `breakwater train` arguments (without the command) of a tiny run of `steps` steps into
// `out_dir`, then `extra`.
inline std::vector<std::string> tiny_train_args(const std::string& corpus, const std::string& out_dir,
                                                int steps, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--model.name=tiny",          "--data.path=" + corpus,
                                   fmt::format("--train.steps={}", steps),
                                   "--train.warmup_steps=2",      "--train.sample_tokens=0",
                                   "--pipeline.microbatches=4",   "--pipeline.microbatch_size=2",
                                   "--train.out_dir=" + out_dir,  "--quiet",
                                   // Checkpoints only where a test asks (not by the clock).
                                   "--checkpoint.every_s=0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Sets an environment variable for the runs of one test (each test is its own process).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

// Every parameter and AdamW tensor of two checkpoints bitwise equal.
inline void expect_bitwise_equal(const std::string& got_dir, const std::string& want_dir) {
  const auto got = runtime::load_checkpoint(got_dir);
  const auto want = runtime::load_checkpoint(want_dir);
  int bad = 0;
  for (const auto* m : {&want.weights, &want.optimizer}) {
    const auto& other = m == &want.weights ? got.weights : got.optimizer;
    ASSERT_EQ(other.size(), m->size()) << got_dir;
    for (const auto& [name, t] : *m) {
      auto it = other.find(name);
      ASSERT_NE(it, other.end()) << got_dir << ": missing " << name;
      if (!torch::equal(it->second, t) && bad++ < 5) {
        ADD_FAILURE()
            << got_dir << ": " << name << " differs from " << want_dir << " by up to "
            << (it->second.to(torch::kDouble) - t.to(torch::kDouble)).abs().max().item<double>();
      }
    }
  }
}

}  // namespace bw::testing
