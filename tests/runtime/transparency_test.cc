// Transparency (docs/design.md guarantee 4): pipeline training with any schedule and plan gives the
// same losses and final parameters as the single-process run (`--devices 1`) on the same global
// batches. Oracle: the single-process run of the same binary, model and data. One pipeline adds
// each gradient's microbatches in the single process's order: bitwise equal (the test binary runs
// with MKL_CBWR=COMPATIBLE, executor_grid_test.cc, which its CLI processes inherit). Otherwise the
// "same training" tolerances of tests/same_training.h, for 10 steps at lr 1e-2 (fp32: losses
// 1e-5, parameters 2^-12 x 10 x 1e-2 + 1e-4 |p|). The coordinator also checks that the replicas of
// every layer end bitwise identical (else it exits non-zero).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <set>

#include "../same_training.h"
#include "cli_runner.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::run_cli;

constexpr double kDeadlineS = 60.0;
constexpr int kSteps = 10;

std::string work_dir() {
  static const std::string dir = [] {
    return bw::testing::scratch_dir(
        (fs::path(::testing::TempDir()) / fmt::format("bw_transparency_{}", getpid())).string());
  }();
  return dir;
}

// A small text corpus with some structure, so losses move.
std::string corpus() {
  static const std::string path = [] {
    auto p = (fs::path(work_dir()) / "corpus.txt").string();
    std::ofstream out(p);
    std::mt19937 rng(7);
    const char* words[] = {"wave", "pipeline", "device", "layer", "chunk", "the", "a", "of"};
    for (int i = 0; i < 20000; ++i) out << words[rng() % 8] << (i % 13 == 12 ? "\n" : " ");
    return p;
  }();
  return path;
}

struct RunOutput {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;  // every parameter (tied copies filled in)
  std::set<std::string> stored;                 // the tensor names the checkpoint's files hold
  std::string log;
};

// The losses, parameters and stored names of the finished run in `out_dir`.
RunOutput read_run(const std::string& out_dir, int steps) {
  RunOutput out;
  std::ifstream metrics(fs::path(out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    out.losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  }
  const auto dir = (fs::path(out_dir) / fmt::format("checkpoint-{:06d}", steps)).string();
  out.params = load_checkpoint(dir).weights;
  const auto info = read_checkpoint_info(dir);
  std::vector<std::string> files;
  for (const auto& sh : info.shards) files.push_back(sh.model);
  if (files.empty()) files.push_back(info.weights);
  for (const auto& f : files) {
    for (const auto& [name, t] : load_safetensors((fs::path(dir) / f).string()).tensors) {
      out.stored.insert(name);
    }
  }
  return out;
}

// `devices` 0: the cluster comes from `extra` (cluster.nodes x cluster.devices_per_node). The run
// goes to `base`/`name` (default: this process's work folder).
RunOutput train(const std::string& name, std::vector<std::string> extra, int devices,
                const std::string& model, int steps = kSteps, bool quiet = true,
                const std::string& base = work_dir()) {
  const auto out_dir = (fs::path(base) / name).string();
  std::vector<std::string> args = {"train", "--model.name=" + model, "--data.path=" + corpus(),
                                   fmt::format("--train.steps={}", steps), "--train.warmup_steps=3",
                                   "--train.lr=1e-2", "--train.sample_tokens=0",
                                   "--pipeline.microbatches=6", "--pipeline.microbatch_size=2",
                                   // Single-pipeline cases ([2]) survive no failure.
                                   "--pipeline.fault_tolerance=0", "--train.out_dir=" + out_dir};
  if (devices > 0) args.push_back(fmt::format("--devices={}", devices));
  if (quiet) args.push_back("--quiet");
  args.insert(args.end(), extra.begin(), extra.end());
  // A deadline against hangs, not a speed limit: long runs (200 steps of emulated bf16 on a
  // loaded 2-core machine) get time in proportion to their steps.
  const double deadline_s = std::max(kDeadlineS, 1.2 * steps);
  auto r = run_cli(args, out_dir + ".log", deadline_s);
  EXPECT_FALSE(r.timed_out) << name << " did not finish within " << deadline_s << " s\n"
                            << r.output;
  EXPECT_EQ(r.status, 0) << name << " failed:\n" << r.output;
  if (r.status != 0) return RunOutput{.log = r.output};
  RunOutput out = read_run(out_dir, steps);
  out.log = r.output;
  return out;
}

// A single-process reference run of kSteps, made once per build for every process of this test
// binary (bw::testing::shared_run): about 20 cases compare with the same few references.
RunOutput shared_reference(const std::string& name, const std::vector<std::string>& extra,
                           const std::string& model) {
  RunOutput out;
  bool made = false;
  const auto dir = bw::testing::shared_run("bw_transparency_refs", BW_BINARY, name,
                                           [&](const std::string& folder) {
                                             made = true;
                                             out = train(name, extra, 1, model, kSteps, true,
                                                         fs::path(folder).parent_path().string());
                                             return !out.losses.empty();
                                           });
  if (dir.empty() || made) return out;
  out = read_run(dir, kSteps);
  out.log = bw::testing::read_text(dir + ".log");
  return out;
}

const RunOutput& reference(const std::string& model) {
  static std::map<std::string, RunOutput> cache;
  auto it = cache.find(model);
  if (it == cache.end()) {
    it = cache.emplace(model, shared_reference("reference_" + model, {}, model)).first;
  }
  return it->second;
}

using Tolerance = bw::testing::SameTraining;
const Tolerance kFp32 = bw::testing::fp32_same_training(kSteps, 1e-2);

void expect_same_training(const RunOutput& got, const RunOutput& want, const std::string& what,
                          const Tolerance& tol = kFp32) {
  EXPECT_EQ(bw::testing::compare_losses(got.losses, want.losses, tol.loss_rel), "") << what;
  const auto cmp = bw::testing::compare_state(got.params, want.params, tol);
  EXPECT_TRUE(cmp.ok()) << what << (tol.bitwise() ? " (bitwise)" : "") << ":\n" << cmp.first;
  ::testing::Test::RecordProperty("max_abs_param_diff", std::to_string(cmp.max_abs_diff));
  std::printf("%s: max |param diff| %.3g\n", what.c_str(), cmp.max_abs_diff);
}

struct Case {
  std::string name;
  std::string schedule;
  std::string pipelines;  // TOML array
  std::string model;
  int waves = 1;
  int chunks_per_device = 2;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Transparency : public ::testing::TestWithParam<Case> {};

TEST_P(Transparency, MatchesSingleProcess) {
  const auto& c = GetParam();
  int devices = 0;
  for (char ch : c.pipelines) {
    if (ch >= '0' && ch <= '9') devices += ch - '0';
  }
  auto got = train(c.name,
                   {"--pipeline.schedule=" + c.schedule, "--pipeline.pipelines=" + c.pipelines,
                    fmt::format("--pipeline.waves={}", c.waves),
                    fmt::format("--pipeline.chunks_per_device={}", c.chunks_per_device)},
                   devices, c.model);
  // One pipeline sums in the single process's order: the same bits.
  expect_same_training(got, reference(c.model), c.name,
                       c.pipelines == "[2]" ? bw::testing::kBitwise : kFp32);
}

INSTANTIATE_TEST_SUITE_P(Schedules, Transparency,
                         ::testing::Values(Case{"gpipe", "gpipe", "[2]", "tiny"},
                                           Case{"onefoneb", "1f1b", "[2]", "tiny"},
                                           Case{"interleaved", "interleaved", "[2]", "tiny", 1, 2},
                                           Case{"hanayo_w1", "hanayo", "[2]", "tiny", 1},
                                           Case{"hanayo_w2", "hanayo", "[2]", "tiny:6", 2},
                                           Case{"zbh1", "zb-h1", "[2]", "tiny"},
                                           Case{"hetero_2_3", "1f1b", "[2, 3]", "tiny"}),
                         [](const auto& info) { return info.param.name; });

// bf16 mixed precision (train.precision = "bf16", model/placement.h). A pipeline runs the same
// casts at the same layer boundaries as the single process, so every microbatch's forward and
// backward compute the same values; what differs, as in fp32, is the order in which the fp32
// parameter gradients of the microbatches and pipelines are summed (about 1e-7 relative). In the
// next forward that difference can flip the bf16 rounding of a weight's copy, which moves that
// weight's contribution by one bf16 ulp (2^-8 relative) and the loss, a mean over every token,
// by far less. Tolerances derived from that (tests/same_training.h): losses relative 2^-8 per
// step; parameters |a - b| <= 2^-8 * lr * steps + 1e-4 |b|. The reference is the single-process
// bf16 run; the fp32 tolerances above would fail (measured: see docs/runtime.md "Precision").
Tolerance bf16_tolerance() { return bw::testing::bf16_same_training(kSteps, 1e-2); }

const RunOutput& bf16_reference(const std::string& model) {
  static std::map<std::string, RunOutput> cache;
  auto it = cache.find(model);
  if (it == cache.end()) {
    it = cache.emplace(model, shared_reference("bf16_reference_" + model,
                                               {"--train.precision=bf16"}, model))
             .first;
  }
  return it->second;
}

class Bf16Transparency : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Transparency, MatchesSingleProcessInBf16) {
  const auto& c = GetParam();
  int devices = 0;
  for (char ch : c.pipelines) {
    if (ch >= '0' && ch <= '9') devices += ch - '0';
  }
  auto got = train("bf16_" + c.name,
                   {"--train.precision=bf16", "--pipeline.schedule=" + c.schedule,
                    "--pipeline.pipelines=" + c.pipelines,
                    fmt::format("--pipeline.waves={}", c.waves),
                    fmt::format("--pipeline.chunks_per_device={}", c.chunks_per_device)},
                   devices, c.model);
  const auto& want = bf16_reference(c.model);
  expect_same_training(got, want, "bf16 " + c.name, bf16_tolerance());
  // And bf16 really ran: its losses are not the fp32 run's.
  const auto& fp32 = reference(c.model);
  ASSERT_EQ(fp32.losses.size(), want.losses.size());
  EXPECT_NE(fp32.losses.back(), want.losses.back());
}

INSTANTIATE_TEST_SUITE_P(Schedules, Bf16Transparency,
                         ::testing::Values(Case{"onefoneb", "1f1b", "[2]", "tiny"},
                                           Case{"hanayo_w2", "hanayo", "[2]", "tiny:6", 2},
                                           Case{"hetero_2_3", "1f1b", "[2, 3]", "tiny"}),
                         [](const auto& info) { return info.param.name; });

// bf16 against fp32 on the demo model: 200 steps of `small` in one process end within a few
// percent of each other (bf16 trains the same model, it does not diverge or stall).
TEST(Bf16, TwoHundredStepsOfSmallEndWithinAFewPercentOfFp32) {
  const int steps = 200;
  // 2 microbatches of 2 a step (a third of the other cases' batch): bf16 is emulated on CPUs
  // without bf16 instructions, and 200 steps of 12 samples took over 150 s on a loaded 2-core
  // machine.
  std::vector<std::string> common = {"--train.warmup_steps=10", "--train.lr=3e-3",
                                     "--pipeline.microbatches=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  auto fp32 = train("small_fp32", with({}), 1, "small", steps);
  auto bf16 = train("small_bf16", with({"--train.precision=bf16"}), 1, "small", steps);
  ASSERT_EQ(fp32.losses.size(), static_cast<size_t>(steps));
  ASSERT_EQ(bf16.losses.size(), static_cast<size_t>(steps));
  // Mean of the last 10 steps' losses (one step's loss is noisy at this batch size).
  auto tail = [](const std::vector<double>& l) {
    double s = 0;
    for (size_t i = l.size() - 10; i < l.size(); ++i) s += l[i];
    return s / 10;
  };
  const double a = tail(fp32.losses), b = tail(bf16.losses);
  std::printf("small, 200 steps: fp32 %.4f, bf16 %.4f (first %.4f)\n", a, b, fp32.losses[0]);
  EXPECT_LT(std::abs(a - b) / a, 0.03) << "fp32 " << a << " vs bf16 " << b;
  EXPECT_LT(b, 0.8 * bf16.losses[0]) << "bf16 did not train";
}

// Sharded stages (docs/runtime.md "Sharded stages"): a stage on 2 or 3 devices of one node keeps
// 1/w of every layer's parameters and AdamW state, computes 1/w of every microbatch's samples and
// gathers parameters per layer; pipelines may cut a layer differently ([2, 1] next to [1, 1, 1]).
// The oracle is the single-process run on the same global batches: 6 microbatches of 2 samples,
// or 4 of 3 where a stage has 3 devices (the same 12 samples per step either way).
struct ShardCase {
  std::string name;
  std::vector<std::string> flags;
  std::string model = "tiny";
  int microbatch_size = 2;
};

void PrintTo(const ShardCase& c, std::ostream* os) { *os << c.name; }

class Sharded : public ::testing::TestWithParam<ShardCase> {};

TEST_P(Sharded, MatchesSingleProcess) {
  const auto& c = GetParam();
  std::vector<std::string> batch = {
      fmt::format("--pipeline.microbatch_size={}", c.microbatch_size),
      fmt::format("--pipeline.microbatches={}", 12 / c.microbatch_size)};
  auto flags = c.flags;
  flags.insert(flags.end(), batch.begin(), batch.end());
  auto got = train("sharded_" + c.name, flags, 0, c.model, kSteps, /*quiet=*/false);
  const std::string key = fmt::format("{}_mbs{}", c.model, c.microbatch_size);
  static std::map<std::string, RunOutput> refs;
  if (!refs.count(key)) refs[key] = shared_reference("reference_" + key, batch, c.model);
  expect_same_training(got, refs[key], c.name);
  // The run really sharded: its printed plan has stages of several ranks.
  EXPECT_NE(got.log.find("(sharded)"), std::string::npos) << got.log;
}

INSTANTIATE_TEST_SUITE_P(
    Stages, Sharded,
    ::testing::Values(
        ShardCase{"two_stages_of_2_1f1b",
                  {"--cluster.nodes=1", "--cluster.devices_per_node=4", "--pipeline.pipelines=[4]",
                   "--pipeline.devices_per_stage=2", "--pipeline.schedule=1f1b"}},
        ShardCase{
            "two_stages_of_2_hanayo_w2",
            {"--cluster.nodes=1", "--cluster.devices_per_node=4", "--pipeline.pipelines=[4]",
             "--pipeline.devices_per_stage=2", "--pipeline.schedule=hanayo", "--pipeline.waves=2"},
            "tiny:6"},
        ShardCase{"cut_2_1_and_1_1_1",
                  {"--cluster.nodes=2", "--cluster.devices_per_node=3",
                   "--pipeline.pipelines=[3,3]", "--pipeline.stage_devices=[2,1,1,1,1]",
                   "--pipeline.fault_tolerance=1", "--pipeline.schedule=1f1b"}},
        ShardCase{"cut_3_and_1_1_1",
                  {"--cluster.nodes=2", "--cluster.devices_per_node=3",
                   "--pipeline.pipelines=[3,3]", "--pipeline.stage_devices=[3,1,1,1]",
                   "--pipeline.fault_tolerance=1", "--pipeline.schedule=1f1b"},
                  "tiny",
                  3}),
    [](const auto& info) { return info.param.name; });

// Activation recomputation (pipeline.recompute = "full"): a microbatch in flight keeps only each
// layer's input and the layer runs again before its backward. The same values are computed in
// the same order, so the run is bitwise equal to the one that keeps every activation: losses and
// final parameters, on heterogeneous Hanayo pipelines and on sharded stages; and it matches the
// single-process run.
struct RecomputeCase {
  std::string name;
  std::vector<std::string> flags;
  int devices = 0;
  std::string model = "tiny";
};

void PrintTo(const RecomputeCase& c, std::ostream* os) { *os << c.name; }

class Recompute : public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(Recompute, BitwiseEqualToKeepingActivations) {
  const auto& c = GetParam();
  auto flags = c.flags;
  flags.push_back("--pipeline.recompute=full");
  auto got = train("recompute_" + c.name, flags, c.devices, c.model);
  auto kept = train("keep_" + c.name, c.flags, c.devices, c.model);
  ASSERT_EQ(got.losses.size(), kept.losses.size());
  for (size_t s = 0; s < kept.losses.size(); ++s)
    EXPECT_EQ(got.losses[s], kept.losses[s]) << c.name << " step " << s;
  ASSERT_EQ(got.params.size(), kept.params.size());
  for (const auto& [name, want] : kept.params) {
    auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << name;
    EXPECT_TRUE(torch::equal(it->second, want)) << c.name << ": " << name << " differs by "
                                                << (it->second - want).abs().max().item<double>();
  }
  expect_same_training(got, reference(c.model), c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Runs, Recompute,
    ::testing::Values(RecomputeCase{"hanayo_w2_2_3",
                                    {"--pipeline.schedule=hanayo", "--pipeline.waves=1",
                                     "--pipeline.pipelines=[2, 3]"},
                                    5,
                                    "tiny:6"},
                      RecomputeCase{"sharded_two_stages_of_2",
                                    {"--cluster.nodes=1", "--cluster.devices_per_node=4",
                                     "--pipeline.pipelines=[4]", "--pipeline.devices_per_stage=2",
                                     "--pipeline.schedule=1f1b"}}),
    [](const auto& info) { return info.param.name; });

// The planner's choice (pipelines, schedule kind, uneven chunks, microbatch split) from a profile
// measured on this machine trains like the single-process run too.
TEST(Planned, PlannerLayoutFromMeasuredProfileMatchesSingleProcess) {
  const auto profile = (fs::path(work_dir()) / "tiny_profile.json").string();
  auto m = run_cli({"profile", "measure", "--model", "tiny", "--microbatch-size", "2", "--repeats",
                    "2", "--warmup", "1", "-o", profile},
                   profile + ".log", kDeadlineS);
  ASSERT_EQ(m.status, 0) << m.output;
  auto got =
      train("planned", {"--pipeline.profile=" + profile, "--cluster.memory_gb=0.0006"}, 4, "tiny");
  expect_same_training(got, reference("tiny"), "planned");
}

// A checkpoint written under one plan (1F1B on 2 devices) resumes under another (Hanayo on 2
// pipelines of 1 and 2 devices) and ends where the uninterrupted single-process run ends.
TEST(Resume, CheckpointFromOnePlanContinuesUnderAnother) {
  auto first =
      train("resume_first",
            {"--pipeline.schedule=1f1b", "--pipeline.pipelines=[2]", "--train.checkpoint_every=5"},
            2, "tiny");
  ASSERT_FALSE(first.losses.empty());
  const auto ckpt = (fs::path(work_dir()) / "resume_first" / "checkpoint-000005").string();
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "checkpoint.json")) << first.log;
  auto second = train("resume_second",
                      {"--pipeline.schedule=hanayo", "--pipeline.waves=1",
                       "--pipeline.pipelines=[1, 2]", "--train.resume=" + ckpt},
                      3, "tiny");
  const auto& ref = reference("tiny");
  ASSERT_EQ(second.losses.size(), 5u) << second.log;
  RunOutput tail = ref;
  tail.losses.assign(ref.losses.begin() + 5, ref.losses.end());
  expect_same_training(second, tail, "resumed run");
}

// Checkpoints stay plan-independent with sharded stages: one written by stages of 2 devices
// resumes on unsharded pipelines, and one written unsharded resumes on sharded stages cut
// [2, 1] and [1, 1, 1]; both end where the uninterrupted single-process run ends.
TEST(ShardedResume, CheckpointsMoveBetweenShardedAndUnshardedPlans) {
  const auto& ref = reference("tiny");
  RunOutput tail = ref;
  tail.losses.assign(ref.losses.begin() + 5, ref.losses.end());
  const std::vector<std::string> sharded = {
      "--cluster.nodes=1", "--cluster.devices_per_node=4", "--pipeline.pipelines=[4]",
      "--pipeline.devices_per_stage=2", "--pipeline.schedule=1f1b"};
  auto args = sharded;
  args.push_back("--train.checkpoint_every=5");
  auto first = train("sharded_ckpt_first", args, 0, "tiny");
  const auto ckpt = (fs::path(work_dir()) / "sharded_ckpt_first" / "checkpoint-000005").string();
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "checkpoint.json")) << first.log;
  auto unsharded = train("sharded_ckpt_to_unsharded",
                         {"--pipeline.schedule=1f1b", "--pipeline.pipelines=[1, 2]",
                          "--pipeline.fault_tolerance=1", "--train.resume=" + ckpt},
                         3, "tiny");
  ASSERT_EQ(unsharded.losses.size(), 5u) << unsharded.log;
  expect_same_training(unsharded, tail, "sharded checkpoint resumed unsharded");

  auto plain = train("unsharded_ckpt_first",
                     {"--pipeline.schedule=1f1b", "--pipeline.pipelines=[2]",
                      "--train.checkpoint_every=5"},
                     2, "tiny");
  const auto ckpt2 = (fs::path(work_dir()) / "unsharded_ckpt_first" / "checkpoint-000005").string();
  ASSERT_TRUE(fs::exists(fs::path(ckpt2) / "checkpoint.json")) << plain.log;
  auto resharded = train("unsharded_ckpt_to_sharded",
                         {"--cluster.nodes=2", "--cluster.devices_per_node=3",
                          "--pipeline.pipelines=[3,3]", "--pipeline.stage_devices=[2,1,1,1,1]",
                          "--pipeline.fault_tolerance=1", "--pipeline.schedule=1f1b",
                          "--train.resume=" + ckpt2},
                         0, "tiny");
  ASSERT_EQ(resharded.losses.size(), 5u) << resharded.log;
  expect_same_training(resharded, tail, "unsharded checkpoint resumed sharded");
}

// Tied embeddings across stages (model.tie_embeddings, docs/runtime.md "Tied embeddings across
// stages"): Hanayo puts the head on the embedding's device (the copies' gradients are summed on
// one rank), 1F1B on another (summed across ranks), and the heterogeneous plans mix both. Oracle:
// the tied single-process run, within the same tolerances. The coordinator checks every step that
// every copy ran with the same bits and at the end that the copies are bitwise equal (else the run
// fails). The checkpoint stores the matrix once, and tying really changes training.
const RunOutput& tied_reference(const std::string& model) {
  static std::map<std::string, RunOutput> cache;
  auto it = cache.find(model);
  if (it == cache.end()) {
    it = cache.emplace(model, shared_reference("tied_reference_" + model,
                                               {"--model.tie_embeddings=true"}, model))
             .first;
  }
  return it->second;
}

class TiedTransparency : public ::testing::TestWithParam<Case> {};

TEST_P(TiedTransparency, MatchesSingleProcess) {
  const auto& c = GetParam();
  int devices = 0;
  for (char ch : c.pipelines) {
    if (ch >= '0' && ch <= '9') devices += ch - '0';
  }
  auto got = train("tied_" + c.name,
                   {"--model.tie_embeddings=true", "--pipeline.schedule=" + c.schedule,
                    "--pipeline.pipelines=" + c.pipelines,
                    fmt::format("--pipeline.waves={}", c.waves),
                    fmt::format("--pipeline.chunks_per_device={}", c.chunks_per_device)},
                   devices, c.model);
  const auto& want = tied_reference(c.model);
  expect_same_training(got, want, "tied " + c.name);
  int head = 0;
  for (const auto& [name, t] : want.params) {
    if (name.rfind("layers.", 0) == 0) head = std::max(head, std::stoi(name.substr(7)));
  }
  // The checkpoint stores the tied matrix once (loading fills the head's copy in).
  EXPECT_EQ(got.stored.count(fmt::format("layers.{}.lm_head.weight", head)), 0u);
  EXPECT_EQ(got.stored.count(fmt::format("layers.{}.ln_f.weight", head)), 1u);
  const auto& untied = reference(c.model);
  ASSERT_EQ(untied.losses.size(), want.losses.size());
  EXPECT_NE(untied.losses.back(), want.losses.back());
}

INSTANTIATE_TEST_SUITE_P(Schedules, TiedTransparency,
                         ::testing::Values(Case{"onefoneb", "1f1b", "[2]", "tiny"},
                                           Case{"hanayo_w2", "hanayo", "[2]", "tiny:6", 2},
                                           Case{"hetero_2_3", "1f1b", "[2, 3]", "tiny"},
                                           Case{"hetero_hanayo_1_2", "hanayo", "[1, 2]", "tiny"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace bw::runtime
