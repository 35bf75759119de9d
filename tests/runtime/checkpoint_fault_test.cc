// Crash safety and integrity of the checkpoint path (runtime/checkpointing.h). A child process is
// forked for every fault point of a checkpoint write (shards, merged files, sidecar, publication)
// and ends there with _exit, leaving on disk exactly what a SIGKILL at that point leaves; the
// checkpoint directory must then load, verified, as entirely the old checkpoint or entirely the
// new one, never a mix, and a later write must succeed and leave no staging directory. Then:
// damaged, mixed and edited checkpoints are refused with a clear error, and a resume must match
// the global batch and data seed the checkpoint was written with.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/fault_points.h"
#include "runtime/resume_check.h"
#include "../scratch.h"

namespace bw::runtime {
namespace {
namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  auto p = bw::testing::process_scratch("bw_ckpt_fault") / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

constexpr int kRanks = 2;
constexpr int kStep = 4;

RunConfig run_config() {
  RunConfig c;
  c.pipeline.microbatches = 8;
  c.pipeline.microbatch_size = 4;
  c.data.seed = 42;
  return c;
}

// Rank r holds layer r; every tensor of checkpoint "version" v is filled with v.
NamedTensors params(int rank, float v) {
  return {{checkpoint_tensor_name(rank, "w"), torch::full({64, 33}, v)},
          {checkpoint_tensor_name(rank, "b"), torch::full({33}, v)}};
}
NamedTensors optim(int rank, float v) {
  NamedTensors out;
  for (const char* p : {"w", "b"}) {
    const auto name = checkpoint_tensor_name(rank, p);
    out.emplace_back(name + ".exp_avg", torch::full({3, 5}, v));
    out.emplace_back(name + ".exp_avg_sq", torch::full({3, 5}, v));
    out.emplace_back(name + ".step", torch::tensor(static_cast<int64_t>(v)));
  }
  return out;
}

CheckpointInfo info_at(int step) {
  CheckpointInfo info;
  info.step = step;
  info.next_sample = int64_t{step} * global_batch(run_config().pipeline);
  info.config_toml = to_toml(run_config());
  return info;
}

std::string write_checkpoint(const std::string& dir, float v, int step = kStep) {
  for (int r = 0; r < kRanks; ++r) write_shard(dir, r, params(r, v), optim(r, v));
  return merge_shards(dir, kRanks, info_at(step));
}

// The single value every tensor of the loaded checkpoint holds; fails the test on a mix.
float loaded_value(const LoadedCheckpoint& c) {
  std::vector<float> values;
  for (const auto* m : {&c.weights, &c.optimizer}) {
    for (const auto& [name, t] : *m) {
      const auto f = t.to(torch::kFloat32);
      values.push_back(f.flatten()[0].item<float>());
      EXPECT_TRUE(torch::all(f == values.back()).item<bool>()) << name << " is not uniform";
    }
  }
  EXPECT_EQ(c.weights.size(), 2u * kRanks);
  EXPECT_EQ(c.optimizer.size(), 6u * kRanks);
  for (float v : values) EXPECT_EQ(v, values.front()) << "a mix of checkpoints";
  return values.empty() ? -1 : values.front();
}

std::vector<std::string> fault_points_of_a_write(const std::string& dir) {
  std::vector<std::string> points;
  set_fault_hook([&](const char* p) { points.push_back(p); });
  write_checkpoint(dir, 1);  // first write: publish by rename
  const size_t first = points.size();
  write_checkpoint(dir, 2);  // rewrite: publish by exchange
  set_fault_hook({});
  points.erase(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(first));
  return points;
}

// Forks a child that writes checkpoint value 2 over `dir` and dies at the n-th fault point.
void die_at(const std::string& dir, size_t n) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    size_t seen = 0;
    set_fault_hook([&](const char*) {
      if (seen++ == n) _exit(0);
    });
    try {
      write_checkpoint(dir, 2);
    } catch (...) {
      _exit(2);
    }
    _exit(1);  // the point was never reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child did not stop at point " << n;
}

TEST(CheckpointFaults, KilledAtAnyPointLeavesTheOldOrTheNewCheckpointWhole) {
  const auto points = fault_points_of_a_write(scratch("count") + "/checkpoint-000004");
  ASSERT_GE(points.size(), 10u) << "too few fault points to mean anything";
  int old_seen = 0, new_seen = 0;
  for (size_t n = 0; n < points.size(); ++n) {
    SCOPED_TRACE(fmt::format("killed at point {} ({})", n, points[n]));
    const std::string out = scratch(fmt::format("kill{}", n));
    const std::string dir = out + "/checkpoint-000004";
    write_checkpoint(dir, 1);
    die_at(dir, n);
    const float v = loaded_value(load_checkpoint(dir));
    EXPECT_TRUE(v == 1 || v == 2) << v;
    (v == 1 ? old_seen : new_seen)++;
    EXPECT_NE(error_of([&] { load_checkpoint(staging_dir(dir)); }).find("partial checkpoint"),
              std::string::npos);
    // The next write recovers whatever the crash left and leaves no staging directory.
    write_checkpoint(dir, 3);
    EXPECT_EQ(loaded_value(load_checkpoint(dir)), 3);
    EXPECT_FALSE(fs::exists(staging_dir(dir)));
    EXPECT_FALSE(fs::exists(dir + ".old"));
  }
  EXPECT_GT(old_seen, 0);
  EXPECT_GT(new_seen, 0);
}

TEST(CheckpointFaults, AFirstWriteKilledLeavesNothingLoadable) {
  const std::string dir = scratch("first") + "/checkpoint-000004";
  std::vector<std::string> points;
  set_fault_hook([&](const char* p) { points.push_back(p); });
  write_checkpoint(scratch("first-count") + "/checkpoint-000004", 2);
  set_fault_hook({});
  for (size_t n = 0; n + 2 < points.size(); ++n) {  // every point before the publication
    if (std::string(points[n]).rfind("publish", 0) == 0) break;
    fs::remove_all(dir);
    die_at(dir, n);
    EXPECT_NE(error_of([&] { load_checkpoint(dir); }).find("no checkpoint"), std::string::npos)
        << "point " << n << " (" << points[n] << ")";
  }
}

TEST(CheckpointFaults, AFailedMergeLeavesTheOldCheckpointAndNoStaging) {
  const std::string dir = scratch("failed-merge") + "/checkpoint-000004";
  write_checkpoint(dir, 1);
  write_shard(dir, 0, params(0, 2), optim(0, 2));  // rank 1's shard never comes
  EXPECT_NE(error_of([&] { merge_shards(dir, kRanks, info_at(kStep)); }).find("missing"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(staging_dir(dir)));
  EXPECT_EQ(loaded_value(load_checkpoint(dir)), 1);
}

TEST(CheckpointFaults, PartialsOfEarlierStepsAreRemovedAndNeverLoaded) {
  const std::string out = scratch("partials");
  fs::create_directories(out + "/checkpoint-000002.tmp");
  std::ofstream(out + "/checkpoint-000002.tmp/shard-0.model.safetensors") << "junk";
  fs::create_directories(out + "/checkpoint-000009.tmp");  // a later step: maybe in progress
  write_checkpoint(out + "/checkpoint-000004", 1);
  EXPECT_FALSE(fs::exists(out + "/checkpoint-000002.tmp"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint-000009.tmp"));
  // A staging directory with a sidecar (killed after writing it) is not a checkpoint.
  std::ofstream(out + "/checkpoint-000009.tmp/checkpoint.json") << "{}";
  int steps = 0;
  EXPECT_EQ(latest_checkpoint(out, &steps), out + "/checkpoint-000004/checkpoint.json");
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(remove_partial_checkpoints(out), 1);
  EXPECT_EQ(latest_checkpoint(out + "/no-such-dir", &steps), "");
  EXPECT_EQ(steps, -1);
  EXPECT_FALSE(fs::exists(out + "/checkpoint-000009.tmp"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint-000004/checkpoint.json"));
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(c ^ 0x01));
}

TEST(CheckpointIntegrity, DamagedMixedAndEditedCheckpointsAreRefused) {
  const std::string out = scratch("integrity");
  const std::string a = out + "/checkpoint-000004", b = out + "/checkpoint-000008";
  write_checkpoint(a, 1);
  write_checkpoint(b, 2, 8);
  // A flipped bit in the data.
  fs::copy(a, out + "/damaged");
  flip_last_byte(out + "/damaged/model.safetensors");
  std::string m = error_of([&] { load_checkpoint(out + "/damaged"); });
  EXPECT_NE(m.find("CRC-32C"), std::string::npos) << m;
  // An optimizer file from another checkpoint (a torn rewrite as the issue saw it).
  fs::copy(a, out + "/mixed");
  fs::copy_file(b + "/optimizer.safetensors", out + "/mixed/optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  m = error_of([&] { load_checkpoint(out + "/mixed"); });
  EXPECT_NE(m.find("does not belong to this checkpoint"), std::string::npos) << m;
  // A sidecar whose step was edited: the data position no longer fits.
  auto info = read_sidecar(a + "/checkpoint.json");
  fs::copy(a, out + "/edited");
  info.step = 3;
  write_sidecar(out + "/edited/checkpoint.json", info);
  m = error_of([&] { load_checkpoint(out + "/edited"); });
  EXPECT_NE(m.find("inconsistent"), std::string::npos) << m;
  // Edited consistently (step and next_sample): the files say which step they hold.
  info.next_sample = 3 * global_batch(run_config().pipeline);
  write_sidecar(out + "/edited/checkpoint.json", info);
  m = error_of([&] { load_checkpoint(out + "/edited"); });
  EXPECT_NE(m.find("written at step 4"), std::string::npos) << m;
  // The untouched ones still load.
  EXPECT_EQ(loaded_value(load_checkpoint(a)), 1);
  EXPECT_EQ(loaded_value(load_checkpoint(b + "/checkpoint.json")), 2);
}

TEST(CheckpointIntegrity, ResumeNeedsTheSameGlobalBatchAndDataSeed) {
  const std::string a = scratch("resume") + "/checkpoint-000004";
  write_checkpoint(a, 1);
  const auto info = read_checkpoint_info(a);
  RunConfig c = run_config();
  c.train.steps = 10;
  check_resume(c, info, a);  // the same run: fine
  c.pipeline.microbatch_size = 2;
  std::string m = error_of([&] { check_resume(c, info, a); });
  EXPECT_NE(m.find("global batch of 32"), std::string::npos) << m;
  EXPECT_NE(m.find("--pipeline.microbatches=8 --pipeline.microbatch_size=4"), std::string::npos)
      << m;
  c = run_config();
  c.train.steps = 10;
  c.data.seed = 7;
  m = error_of([&] { check_resume(c, info, a); });
  EXPECT_NE(m.find("--data.seed=42"), std::string::npos) << m;
  c = run_config();
  c.train.steps = 4;
  m = error_of([&] { check_resume(c, info, a); });
  EXPECT_NE(m.find("raise train.steps"), std::string::npos) << m;
}

}  // namespace
}  // namespace bw::runtime
