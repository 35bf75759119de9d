// Bad input and failures end with one clear message and a non-zero exit, never a hang: a chunk
// that does not fit memory, a corpus shorter than one global batch, an unknown config key, a
// `.bin` with a wrong magic, and a worker killed in the middle of training.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <sstream>
#include <thread>

#include "cli_runner.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::run_cli;

constexpr double kDeadlineS = 60.0;

std::string dir() {
  static const std::string d = [] {
    return bw::testing::scratch_dir(
        (fs::path(::testing::TempDir()) / fmt::format("bw_bad_input_{}", getpid())).string());
  }();
  return d;
}

std::string write_corpus(const std::string& name, int bytes) {
  auto p = (fs::path(dir()) / name).string();
  std::ofstream out(p);
  std::mt19937 rng(3);
  for (int i = 0; i < bytes; ++i) out << static_cast<char>('a' + rng() % 26);
  return p;
}

struct BadCase {
  std::string name;
  std::vector<std::string> args;  // appended to a valid tiny run
  std::string expect;             // must appear in the output
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, OneClearMessageAndNonZeroExit) {
  const auto& c = GetParam();
  std::vector<std::string> args = {"train",
                                   "--quiet",
                                   "--model.name=tiny",
                                   "--data.path=" + write_corpus("good.txt", 20000),
                                   "--train.steps=2",
                                   "--pipeline.microbatches=4",
                                   "--pipeline.microbatch_size=2",
                                   "--train.out_dir=" + (fs::path(dir()) / c.name).string()};
  args.insert(args.end(), c.args.begin(), c.args.end());
  auto r = run_cli(args, (fs::path(dir()) / (c.name + ".log")).string(), kDeadlineS);
  EXPECT_FALSE(r.timed_out) << c.name << " hung";
  EXPECT_EQ(r.status, 2) << c.name << ":\n" << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(c.expect), std::string::npos)
      << c.name << ": expected '" << c.expect << "' in:\n"
      << r.output;
  // One message: a single error line, no stack of internal frames.
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

std::string wrong_magic_bin() {
  auto p = (fs::path(dir()) / "wrong_magic.bin").string();
  std::ofstream out(p, std::ios::binary);
  std::vector<int32_t> header(256, 0);
  header[0] = 12345;  // llm.c uses 20240520
  header[1] = 1;
  header[2] = 4096;
  out.write(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  std::vector<uint16_t> tokens(4096, 7);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadInput,
    ::testing::Values(
        BadCase{"chunk_over_memory", {"--devices=2", "--cluster.memory_gb=0.0001"}, "memory_gb"},
        BadCase{"single_over_memory", {"--devices=1", "--cluster.memory_gb=0.0001"}, "memory_gb"},
        BadCase{"short_corpus",
                {"--devices=2", "--data.path=" + write_corpus("short.txt", 100)},
                "short.txt"},
        BadCase{"unknown_key", {"--devices=2", "--train.no_such_key=1"}, "no_such_key"},
        BadCase{"wrong_magic", {"--devices=2", "--data.path=" + wrong_magic_bin()}, "magic"},
        BadCase{"too_many_chunks",
                {"--devices=5", "--pipeline.schedule=1f1b", "--pipeline.pipelines=[5]",
                 "--pipeline.fault_tolerance=0"},
                "only 4 layers"},
        // A diverging run stops at the first non-finite loss, before that step is applied, in
        // worker processes and in one process alike.
        BadCase{"diverged_workers",
                {"--devices=4", "--train.steps=30", "--train.lr=1e4", "--train.min_lr=1",
                 "--train.warmup_steps=1", "--train.grad_clip=0"},
                "training diverged at step"},
        BadCase{"diverged_one_process",
                {"--devices=1", "--train.steps=30", "--train.lr=1e4", "--train.min_lr=1",
                 "--train.warmup_steps=1", "--train.grad_clip=0"},
                "training diverged at step"}),
    [](const auto& info) { return info.param.name; });

// Resuming a checkpoint written for another model is one clear error before any worker starts.
TEST(BadResume, CheckpointOfAnotherModelIsAConfigError) {
  const auto corpus = write_corpus("resume.txt", 20000);
  const auto first = (fs::path(dir()) / "resume_tiny3").string();
  auto a =
      run_cli({"train", "--quiet", "--devices=1", "--model.name=tiny:3", "--data.path=" + corpus,
               "--train.steps=2", "--train.sample_tokens=0", "--pipeline.microbatches=4",
               "--pipeline.microbatch_size=2", "--train.out_dir=" + first},
              first + ".log", kDeadlineS);
  ASSERT_EQ(a.status, 0) << a.output;
  const auto second = (fs::path(dir()) / "resume_tiny").string();
  auto b = run_cli({"train", "--quiet", "--devices=2", "--model.name=tiny", "--data.path=" + corpus,
                    "--train.steps=4", "--pipeline.microbatches=4", "--pipeline.microbatch_size=2",
                    "--train.resume=" + first + "/checkpoint-000002", "--train.out_dir=" + second},
                   second + ".log", kDeadlineS);
  EXPECT_FALSE(b.timed_out);
  EXPECT_EQ(b.status, 2) << b.output;
  EXPECT_NE(b.output.find("error: checkpoint"), std::string::npos) << b.output;
}

// A ConfigError only a worker sees (here: its executor refuses to recompute activations under a
// schedule that splits backward into I and W; nothing before the workers checks that) reaches the
// user as one `error:` line with exit status 2, the status of bad input, not 3 (a failed peer).
TEST(WorkerConfigError, ReachesTheUserAsBadInput) {
  const auto out = (fs::path(dir()) / "worker_config_error").string();
  auto r = run_cli({"train", "--quiet", "--devices=2", "--model.name=tiny",
                    "--data.path=" + write_corpus("worker_error.txt", 20000), "--train.steps=5",
                    "--pipeline.schedule=zb-h1", "--pipeline.recompute=full",
                    "--pipeline.microbatches=4", "--pipeline.microbatch_size=2",
                    "--train.out_dir=" + out},
                   out + ".log", kDeadlineS);
  EXPECT_FALSE(r.timed_out) << "hung";
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: schedule zb-h1 splits backward into I and W, which recomputed "
                          "activations (pipeline.recompute) do not run"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("exited with status"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bw::runtime
