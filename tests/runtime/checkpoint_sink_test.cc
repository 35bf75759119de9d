// The checkpoint sink and the sharded checkpoint (runtime/checkpoint_sink.h, checkpointing.h
// commit_checkpoint): the snapshot holds the state at save() whatever happens to the tensors
// after it, at most one write is in flight, a failed write surfaces as one ConfigError, a
// manifest names only durable shards and loads back exactly what was saved, and a commit
// killed at any point leaves the old checkpoint or the new one, never a mix.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/checkpoint_sink.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/fault_points.h"
#include "../scratch.h"

namespace bw::runtime {
namespace {
namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string scratch(const std::string& name) {
  auto p = bw::testing::process_scratch("bw_ckpt_sink") / name;
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

// Layer `l`'s tensors, every element v (the step counter v too).
NamedTensors params(int l, float v) {
  return {{checkpoint_tensor_name(l, "w"), torch::full({32, 17}, v)},
          {checkpoint_tensor_name(l, "b"), torch::full({17}, v)}};
}
NamedTensors optim(int l, float v) {
  NamedTensors out;
  for (const char* p : {"w", "b"}) {
    const auto name = checkpoint_tensor_name(l, p);
    out.emplace_back(name + ".exp_avg", torch::full({4, 3}, v));
    out.emplace_back(name + ".exp_avg_sq", torch::full({4, 3}, v));
    out.emplace_back(name + ".step", torch::tensor(static_cast<int64_t>(v)));
  }
  return out;
}

CheckpointInfo info_at(int step) {
  RunConfig c;
  CheckpointInfo info;
  info.step = step;
  info.next_sample = int64_t{step} * global_batch(c.pipeline);
  info.config_toml = to_toml(c);
  return info;
}

// Two shards (layers {0} and {1, 2}) of value v saved through sinks, durable in
// staging_dir(dir); the manifest they make.
CheckpointInfo save_shards(const std::string& dir, float v, int step, bool async = true) {
  CheckpointInfo info = info_at(step);
  for (int shard = 0; shard < 2; ++shard) {
    auto sink = make_directory_sink({async, "host-" + std::to_string(shard), milliseconds(0)});
    const std::vector<int> layers = shard == 0 ? std::vector<int>{0} : std::vector<int>{1, 2};
    NamedTensors p, o;
    for (int l : layers) {
      for (auto& t : params(l, v)) p.push_back(t);
      for (auto& t : optim(l, v)) o.push_back(t);
    }
    sink->save(dir, step, shard, layers, p, o);
    auto durable = sink->drain(milliseconds(10000));
    EXPECT_EQ(durable.size(), 1u);
    for (const auto& d : durable) {
      info.shards.push_back(d.files);
      for (const auto& [name, digest] : d.digests) info.files[name] = digest;
    }
  }
  return info;
}

// The same, committed as `dir`.
std::string save_and_commit(const std::string& dir, float v, int step, bool async = true) {
  return commit_checkpoint(dir, save_shards(dir, v, step, async));
}

// The one value of every tensor of a loaded checkpoint (fails the test on a mix).
float loaded_value(const LoadedCheckpoint& c) {
  std::vector<float> values;
  for (const auto* m : {&c.weights, &c.optimizer}) {
    for (const auto& [name, t] : *m) {
      const auto f = t.to(torch::kFloat32);
      values.push_back(f.flatten()[0].item<float>());
      EXPECT_TRUE(torch::all(f == values.back()).item<bool>()) << name << " is not uniform";
    }
  }
  EXPECT_EQ(c.weights.size(), 6u);
  EXPECT_EQ(c.optimizer.size(), 18u);
  for (float v : values) EXPECT_EQ(v, values.front()) << "a mix of checkpoints";
  return values.empty() ? -1 : values.front();
}

TEST(CheckpointSink, SnapshotHoldsTheStateAtSaveWhileTheTensorsMoveOn) {
  const auto dir = scratch("snapshot") + "/checkpoint-000003";
  auto sink = make_directory_sink({true, "h", milliseconds(300)});  // a slow disk
  auto p = params(0, 3.0f);
  auto o = optim(0, 3.0f);
  const double blocked = sink->save(dir, 3, 0, {0}, p, o);
  // Training goes on: the live tensors change in place while the write is still sleeping.
  for (auto& [name, t] : p) t.fill_(4.0f);
  for (auto& [name, t] : o) t.fill_(4);
  EXPECT_TRUE(sink->take_durable().empty()) << "the write cannot be durable during its delay";
  const auto durable = sink->drain(milliseconds(10000));
  ASSERT_EQ(durable.size(), 1u);
  EXPECT_LT(blocked, 300.0) << "save() waited for the write instead of handing it over";
  const auto file = load_safetensors(
      (fs::path(staging_dir(dir)) / durable[0].files.model).string());
  for (const auto& [name, t] : file.tensors) {
    EXPECT_TRUE(torch::all(t == 3.0f).item<bool>()) << name << " holds a later step's values";
  }
  const auto opt = load_safetensors(
      (fs::path(staging_dir(dir)) / durable[0].files.optimizer).string());
  EXPECT_EQ(opt.tensors.at("layers.0.w.step").item<int64_t>(), 3);
  EXPECT_EQ(durable[0].digests.at(durable[0].files.model), file.digest);
  EXPECT_EQ(opt.metadata.at("step"), "3");
}

TEST(CheckpointSink, AtMostOneWriteInFlightTheNextSaveWaitsAndSaysSo) {
  const auto root = scratch("one_in_flight");
  auto sink = make_directory_sink({true, "h", milliseconds(400)});
  sink->save(checkpoint_dir(root, 1), 1, 0, {0}, params(0, 1), optim(0, 1));
  const double blocked = sink->save(checkpoint_dir(root, 2), 2, 0, {0}, params(0, 2), optim(0, 2));
  EXPECT_GE(blocked, 200.0) << "the second save did not wait for the first write";
  const auto first = sink->take_durable();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].steps_done, 1);
  const auto second = sink->drain(milliseconds(10000));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].steps_done, 2);
  const auto stats = sink->stats();
  EXPECT_EQ(stats.saves, 2);
  EXPECT_GE(stats.waited_ms, 200.0);
}

TEST(CheckpointSink, AFailedWriteIsOneConfigErrorNamingTheDirectoryAndHost) {
  const auto root = scratch("unwritable");
  std::ofstream(root + "/file") << "x";  // a directory cannot be made under a file
  auto sink = make_directory_sink({true, "host-7", milliseconds(0)});
  sink->save(root + "/file/checkpoint-000001", 1, 0, {0}, params(0, 1), optim(0, 1));
  const auto e = error_of([&] { sink->drain(milliseconds(10000)); });
  EXPECT_NE(e.find("host-7"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint.dir"), std::string::npos) << e;
}

// A shard that became durable before a later write failed is handed over first, then the
// failure: a full disk at checkpoint k must not cost checkpoint k-1.
TEST(CheckpointSink, ADurableShardIsHandedOverBeforeALaterFailure) {
  const auto root = scratch("durable_then_failed");
  std::ofstream(root + "/file") << "x";
  auto sink = make_directory_sink({true, "host-3", milliseconds(0)});
  sink->save(checkpoint_dir(root, 1), 1, 0, {0}, params(0, 1), optim(0, 1));
  // The second save waits for the first (one in flight), whose record stays for take_durable.
  sink->save(root + "/file/checkpoint-000002", 2, 0, {0}, params(0, 2), optim(0, 2));
  std::vector<int64_t> handed;
  const auto e = error_of([&] {
    drain_all(*sink, milliseconds(10000), [&](std::vector<DurableShard> d) {
      for (const auto& s : d) handed.push_back(s.steps_done);
    });
  });
  EXPECT_EQ(handed, std::vector<int64_t>{1});
  EXPECT_NE(e.find("host-3"), std::string::npos) << e;
}

TEST(ShardedCheckpoint, ManifestLoadsBackEveryShardAndMergesToOneFile) {
  const auto root = scratch("manifest");
  const auto sidecar = save_and_commit(checkpoint_dir(root, 5), 5.0f, 5);
  const auto info = read_checkpoint_info(sidecar);
  ASSERT_EQ(info.shards.size(), 2u);
  EXPECT_EQ(info.shards[1].layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(info.shards[1].host, "host-1");
  EXPECT_TRUE(info.weights.empty());
  EXPECT_EQ(loaded_value(load_checkpoint(sidecar)), 5.0f);
  EXPECT_EQ(latest_checkpoint(root), sidecar);
  EXPECT_FALSE(fs::exists(staging_dir(checkpoint_dir(root, 5))));
  // The single-file form holds the same tensors, verified again on load.
  const auto merged = merge_checkpoint(sidecar, root + "/merged");
  const auto m = load_checkpoint(merged);
  EXPECT_TRUE(read_checkpoint_info(merged).shards.empty());
  EXPECT_TRUE(fs::exists(root + "/merged/model.safetensors"));
  EXPECT_EQ(loaded_value(m), 5.0f);
  const auto s = load_checkpoint(sidecar);
  for (const auto& [name, t] : s.weights) EXPECT_TRUE(torch::equal(m.weights.at(name), t)) << name;
}

TEST(ShardedCheckpoint, DamagedMissingOrForeignShardsAreRefused) {
  const auto root = scratch("damaged");
  const auto sidecar = save_and_commit(checkpoint_dir(root, 2), 2.0f, 2);
  const auto dir = checkpoint_dir(root, 2);
  const auto info = read_checkpoint_info(sidecar);
  const auto shard1 = (fs::path(dir) / info.shards[1].model).string();
  {  // one flipped byte of a shard's data
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  auto e = error_of([&] { load_checkpoint(sidecar); });
  EXPECT_NE(e.find(info.shards[1].model), std::string::npos) << e;
  EXPECT_NE(e.find("host-1"), std::string::npos) << e;  // where to look for it
  fs::remove(shard1);
  e = error_of([&] { load_checkpoint(sidecar); });
  EXPECT_NE(e.find(info.shards[1].model), std::string::npos) << e;
  EXPECT_NE(e.find("host-1"), std::string::npos) << e;

  // A commit never publishes a manifest naming a shard that is not there.
  CheckpointInfo bad = info_at(3);
  bad.shards = info.shards;
  bad.files = info.files;
  fs::create_directories(staging_dir(checkpoint_dir(root, 3)));
  e = error_of([&] { commit_checkpoint(checkpoint_dir(root, 3), bad); });
  EXPECT_NE(e.find("not committed"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(checkpoint_dir(root, 3)));

  // Manifests that cannot be right.
  auto doc = nlohmann::json::parse(std::ifstream(sidecar));
  auto twice = doc;
  twice["shards"][1]["shard"] = 0;
  EXPECT_NE(error_of([&] { parse_sidecar(twice, "m"); }).find("listed twice"), std::string::npos);
  auto escape = doc;
  escape["shards"][0]["model"] = "../x.safetensors";
  EXPECT_NE(error_of([&] { parse_sidecar(escape, "m"); }).find("plain name"), std::string::npos);
  auto undigested = doc;
  undigested["files"].erase(info.shards[0].optimizer);
  EXPECT_NE(error_of([&] { parse_sidecar(undigested, "m"); }).find("no digest"),
            std::string::npos);
}

TEST(ShardedCheckpoint, RetentionKeepsTheNewestCommittedOnes) {
  const auto root = scratch("keep");
  for (int step = 1; step <= 4; ++step) save_and_commit(checkpoint_dir(root, step), step, step);
  EXPECT_EQ(retain_checkpoints(root, 2), 2);
  EXPECT_FALSE(fs::exists(checkpoint_dir(root, 1)));
  EXPECT_FALSE(fs::exists(checkpoint_dir(root, 2)));
  EXPECT_EQ(loaded_value(load_checkpoint(checkpoint_dir(root, 3))), 3.0f);
  EXPECT_EQ(loaded_value(load_checkpoint(checkpoint_dir(root, 4))), 4.0f);
  EXPECT_EQ(retain_checkpoints(root, 0), 0);
}

// A child commits checkpoint value 2 over value 1 and dies at its n-th fault point (the shard
// writes, the manifest, the publication): what a SIGKILL of the coordinator there leaves.
TEST(ShardedCheckpoint, KilledAtAnyPointOfTheCommitLeavesTheOldOrTheNewWhole) {
  const auto count_root = scratch("commit_points");
  save_and_commit(checkpoint_dir(count_root, 4), 1.0f, 4, /*async=*/false);
  std::vector<std::string> points;
  set_fault_hook([&](const char* p) { points.push_back(p); });
  save_and_commit(checkpoint_dir(count_root, 4), 2.0f, 4, /*async=*/false);
  set_fault_hook({});
  ASSERT_GE(points.size(), 8u);
  int old_seen = 0, new_seen = 0;
  for (size_t n = 0; n < points.size(); ++n) {
    SCOPED_TRACE(fmt::format("killed at point {} ({})", n, points[n]));
    const auto root = scratch(fmt::format("commit_kill_{}", n));
    const auto dir = checkpoint_dir(root, 4);
    save_and_commit(dir, 1.0f, 4, /*async=*/false);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      size_t seen = 0;
      set_fault_hook([&](const char*) {
        if (seen++ == n) _exit(0);
      });
      try {
        save_and_commit(dir, 2.0f, 4, /*async=*/false);
      } catch (...) {
        _exit(2);
      }
      _exit(1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "the child did not stop at the point";
    const float v = loaded_value(load_checkpoint(dir));
    (v == 1.0f ? old_seen : new_seen) += 1;
    EXPECT_TRUE(v == 1.0f || v == 2.0f) << v;
    // The next run clears the leftovers and commits again.
    remove_partial_checkpoints(root);
    save_and_commit(dir, 3.0f, 4, /*async=*/false);
    EXPECT_EQ(loaded_value(load_checkpoint(dir)), 3.0f);
  }
  EXPECT_GT(old_seen, 0);
  EXPECT_GT(new_seen, 0);
}

// A full disk at a commit: checkpoint 1's shards are durable and its commit comes next, but the
// next checkpoint's shards (each worker's one write in flight) filled the disk, so its manifest
// has no room. The commit removes that later staging directory and commits checkpoint 1, which
// loads whole. Where the commit does not see the shard files (files_here = false) nothing is
// removed. A child in its own mount namespace runs it on a 256 KiB tmpfs; its exit status says
// which check failed.
TEST(ShardedCheckpoint, ACommitOnADiskFilledByTheNextCheckpointCommitsAndDropsThatOne) {
  if (std::system("unshare -m true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "skipped: `unshare -m` (a private mount namespace) is not permitted here";
  }
  const auto root = scratch("disk_full");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(90);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(91);
    if (::mount("tmpfs", root.c_str(), "tmpfs", 0, "size=256k") != 0) ::_exit(92);
    int code = 0;
    try {
      // A shard of the checkpoint of `steps` in its staging directory, written until the disk
      // is full (status 93 if it never fills); its path.
      auto fill_with_a_shard = [&](int steps) {
        const auto staging = fs::path(staging_dir(checkpoint_dir(root, steps)));
        fs::create_directories(staging);
        std::ofstream out(staging / "shard-0.model.safetensors", std::ios::binary);
        const std::string block(4096, 'x');
        for (int i = 0; i < 1024 && out.write(block.data(), block.size()) && out.flush(); ++i) {
        }
        if (out.good()) code = 93;
        return staging / "shard-0.model.safetensors";
      };
      const auto dir = checkpoint_dir(root, 1);
      const auto info = save_shards(dir, 1.0f, 1, /*async=*/false);
      const auto next = fs::path(fill_with_a_shard(2)).parent_path();  // the next checkpoint's
      if (code == 0) {
        const auto sidecar = commit_checkpoint(dir, info);
        if (fs::exists(next)) code = 94;
        const float v = loaded_value(load_checkpoint(sidecar));
        if (v != 1.0f) code = 95;
      }
      // Where the commit does not see the files (each host's own disk, files_here = false), a
      // later staging directory may hold shards already acknowledged: it stays, and the full disk
      // is the commit's error.
      const auto later = code == 0 ? fill_with_a_shard(3) : fs::path();
      if (code == 0) {
        CheckpointInfo on_hosts = info_at(2);
        on_hosts.shards = info.shards;
        on_hosts.files = info.files;
        bool refused = false;
        try {
          commit_checkpoint(checkpoint_dir(root, 2), on_hosts, /*files_here=*/false);
        } catch (const ConfigError&) {
          refused = true;
        }
        if (!refused) code = 97;
        if (!fs::exists(later)) code = 98;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 96;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "90-92: no private tmpfs; 93: the disk never filled; 94: the later staging directory "
         "stayed; 95: checkpoint 1 does not load as saved; 96: the commit failed (its error "
         "above); 97: a commit on a full disk with the files elsewhere did not fail; 98: it "
         "removed a later staging directory";
}

}  // namespace
}  // namespace bw::runtime
