// Checkpoints through the sink in real runs (docs/checkpoints.md): each worker writes its own
// shard in the background and the coordinator only commits the manifest. Oracle: the same run
// without interruption. A run checkpointing every step, resumed from each of its checkpoints
// under the same plan, ends bitwise where the uninterrupted run ends (Hanayo, 1F1B and a
// heterogeneous plan); a write slowed so that later steps run during it still holds its own
// step; a worker killed while its write is in flight leaves no checkpoint of that step, and the
// run recovers and ends where the failure-free run ends; retention keeps checkpoint.keep;
// `checkpoint merge` and an unwritable checkpoint.dir.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_runs.h"
#include "cli_runner.h"
#include "core/error.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::expect_bitwise_equal;
using bw::testing::run_cli;
using bw::testing::ScopedEnv;

constexpr double kDeadlineS = 90.0;

std::string work_dir() {
  static const std::string dir = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_async_ckpt_{}", getpid())).string());
  return dir;
}

std::string corpus() {
  static const std::string path = bw::testing::write_word_corpus(
      (fs::path(work_dir()) / "corpus.txt").string(),
      {"shard", "sink", "manifest", "step", "the", "a", "of", "wave"});
  return path;
}

struct TrainRun {
  int status = -1;
  std::string out_dir, log;
  std::vector<nlohmann::json> steps;  // metrics.jsonl step lines
};

TrainRun train(const std::string& name, int steps, std::vector<std::string> extra) {
  TrainRun run;
  run.out_dir = (fs::path(work_dir()) / name).string();
  auto args = bw::testing::tiny_train_args(corpus(), run.out_dir, steps, extra);
  args.insert(args.begin(), "train");
  auto r = run_cli(args, run.out_dir + ".log", kDeadlineS);
  run.status = r.timed_out ? -1 : r.status;
  run.log = r.output;
  std::ifstream metrics(fs::path(run.out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) run.steps.push_back(std::move(j));
  }
  return run;
}

// `args` and one more.
std::vector<std::string> with(std::vector<std::string> args, const std::string& more) {
  args.push_back(more);
  return args;
}

struct Plan {
  std::string name;
  std::vector<std::string> args;
};

void PrintTo(const Plan& p, std::ostream* os) { *os << p.name; }

class ResumeFromEvery : public ::testing::TestWithParam<Plan> {};

TEST_P(ResumeFromEvery, CheckpointEndsBitwiseWhereTheUninterruptedRunEnds) {
  const auto& plan = GetParam();
  constexpr int kSteps = 4;
  auto args = plan.args;
  args.push_back("--train.checkpoint_every=1");
  const auto full = train(plan.name + "_full", kSteps, args);
  ASSERT_EQ(full.status, 0) << full.log;
  const auto final_dir = checkpoint_dir(full.out_dir, kSteps);
  for (int k = 1; k < kSteps; ++k) {
    SCOPED_TRACE(fmt::format("resumed from step {}", k));
    const auto ckpt = checkpoint_dir(full.out_dir, k);
    const auto info = read_checkpoint_info(ckpt);
    EXPECT_FALSE(info.shards.empty()) << "not a sharded checkpoint";
    auto resumed_args = plan.args;
    resumed_args.push_back("--train.resume=" + ckpt);
    const auto resumed = train(fmt::format("{}_from_{}", plan.name, k), kSteps, resumed_args);
    ASSERT_EQ(resumed.status, 0) << resumed.log;
    expect_bitwise_equal(checkpoint_dir(resumed.out_dir, kSteps), final_dir);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ResumeFromEvery,
    ::testing::Values(Plan{"hanayo", {"--devices=2", "--pipeline.pipelines=[2]",
                                      "--pipeline.schedule=hanayo", "--pipeline.waves=1",
                                      "--pipeline.fault_tolerance=0"}},
                      Plan{"1f1b", {"--devices=2", "--pipeline.pipelines=[2]",
                                    "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0"}},
                      Plan{"heterogeneous", {"--devices=3", "--pipeline.pipelines=[1,2]",
                                             "--pipeline.schedule=1f1b",
                                             "--pipeline.fault_tolerance=1"}}),
    [](const auto& info) { return info.param.name; });

// The background write sleeps 2 s, so the steps after a save run while its shards are written;
// the checkpoint still holds the state after its own step: bitwise that of a run stopped there.
TEST(AsyncCheckpoint, ASlowWriteStillHoldsItsOwnStep) {
  const std::vector<std::string> plan = {"--devices=2", "--pipeline.pipelines=[2]",
                                         "--pipeline.schedule=1f1b",
                                         "--pipeline.fault_tolerance=0",
                                         "--train.checkpoint_every=2"};
  const auto reference = train("slow_reference", 2, plan);
  ASSERT_EQ(reference.status, 0) << reference.log;
  TrainRun slow;
  {
    ScopedEnv delay("BW_CHECKPOINT_WRITE_DELAY_MS", "2000");
    slow = train("slow_write", 6, plan);
  }
  ASSERT_EQ(slow.status, 0) << slow.log;
  expect_bitwise_equal(checkpoint_dir(slow.out_dir, 2), checkpoint_dir(reference.out_dir, 2));
  ASSERT_EQ(slow.steps.size(), 6u);
  // Handing checkpoint 2 over did not wait for its write (step 2's report), and it was still
  // being written when checkpoint 4 fell due two steps later (step 4's report waited for it).
  double handed = 0, waited = 0;
  for (const auto& r : slow.steps[2].at("ranks")) handed = std::max(handed, r.value("checkpoint_ms", -1.0));
  for (const auto& r : slow.steps[4].at("ranks")) waited = std::max(waited, r.value("checkpoint_ms", -1.0));
  EXPECT_LT(handed, 1000.0) << slow.log;
  EXPECT_GT(waited, 500.0) << "steps 2 and 3 did not run during the write of checkpoint 2";
}

// A worker killed while the shards of checkpoint 2 are being written: that checkpoint is never
// committed (no manifest names a shard that is not durable), the run recovers on the survivors,
// and its later checkpoints and its end are those of the failure-free run.
TEST(AsyncCheckpoint, AWorkerKilledDuringItsWriteLeavesNoCheckpointOfThatStep) {
  const std::vector<std::string> plan = {
      "--cluster.nodes=2", "--cluster.devices_per_node=1", "--pipeline.pipelines=[1,1]",
      "--pipeline.fault_tolerance=1", "--train.checkpoint_every=2",
      "--elastic.heartbeat_timeout_s=1", "--elastic.rejoin_after_s=0"};
  const auto reference = train("kill_reference", 6, plan);
  ASSERT_EQ(reference.status, 0) << reference.log;
  TrainRun killed;
  {
    ScopedEnv delay("BW_CHECKPOINT_WRITE_DELAY_MS", "3000");
    auto args = plan;
    args.push_back("--elastic.inject=kill:node=1:step=2:phase=forward");
    killed = train("kill_during_write", 6, args);
  }
  ASSERT_EQ(killed.status, 0) << killed.log;
  EXPECT_FALSE(fs::exists(checkpoint_dir(killed.out_dir, 2))) << killed.log;
  for (const auto& e : fs::directory_iterator(killed.out_dir)) {
    EXPECT_EQ(e.path().extension(), e.path().extension() == ".tmp" ? "" : e.path().extension())
        << "a partial checkpoint was left: " << e.path();
  }
  ASSERT_EQ(killed.steps.size(), reference.steps.size());
  for (size_t s = 0; s < reference.steps.size(); ++s) {
    EXPECT_EQ(killed.steps[s].at("samples"), reference.steps[s].at("samples")) << "step " << s;
    const double a = killed.steps[s].at("loss"), b = reference.steps[s].at("loss");
    EXPECT_NEAR(a, b, 1e-5 * std::abs(b)) << "step " << s;
  }
  EXPECT_TRUE(fs::exists(checkpoint_dir(killed.out_dir, 6)));
}

TEST(AsyncCheckpoint, KeepRetainsTheNewestAndMergeWritesOneFile) {
  const auto run = train("keep", 5,
                         {"--devices=2", "--pipeline.pipelines=[2]", "--pipeline.schedule=1f1b",
                          "--pipeline.fault_tolerance=0", "--train.checkpoint_every=1",
                          "--checkpoint.keep=2"});
  ASSERT_EQ(run.status, 0) << run.log;
  for (int k = 1; k <= 3; ++k) EXPECT_FALSE(fs::exists(checkpoint_dir(run.out_dir, k))) << k;
  ASSERT_TRUE(fs::exists(checkpoint_dir(run.out_dir, 4)));
  ASSERT_TRUE(fs::exists(checkpoint_dir(run.out_dir, 5)));
  const auto merged = (fs::path(work_dir()) / "merged").string();
  auto r = run_cli({"checkpoint", "merge", checkpoint_dir(run.out_dir, 5), merged},
                   merged + ".log", kDeadlineS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(merged) / "model.safetensors"));
  EXPECT_TRUE(read_checkpoint_info(merged).shards.empty());
  expect_bitwise_equal(merged, checkpoint_dir(run.out_dir, 5));
  // Bad input: one error line naming the key, exit 2.
  const auto blocker = (fs::path(work_dir()) / "a_file").string();
  std::ofstream(blocker) << "x";
  const auto bad = train("bad_dir", 2, {"--devices=1", "--checkpoint.dir=" + blocker + "/ckpt"});
  EXPECT_EQ(bad.status, 2) << bad.log;
  EXPECT_NE(bad.log.find("checkpoint.dir"), std::string::npos) << bad.log;
}

// checkpoint.replicas = 1 on a [1,2] plan: every layer is written twice, by workers of both
// pipelines (which never share a node), from the state each holds; training is unchanged. A
// checkpoint whose shard 0 is gone loads from the replicas (and says so), and a resume from it
// ends bitwise where the run ends; with a layer's every copy damaged, the resume is refused,
// naming both; more replicas than the other pipelines can write is refused at the start.
TEST(AsyncCheckpoint, ReplicasServeTheLayersOfALostShard) {
  const std::vector<std::string> plan = {"--devices=3", "--pipeline.pipelines=[1,2]",
                                         "--pipeline.schedule=1f1b",
                                         "--pipeline.fault_tolerance=1",
                                         "--train.checkpoint_every=2"};
  constexpr int kSteps = 4;
  const auto single = train("replicas_none", kSteps, plan);
  ASSERT_EQ(single.status, 0) << single.log;
  const auto run = train("replicas_one", kSteps, with(plan, "--checkpoint.replicas=1"));
  ASSERT_EQ(run.status, 0) << run.log;
  expect_bitwise_equal(checkpoint_dir(run.out_dir, kSteps), checkpoint_dir(single.out_dir, kSteps));

  // Ranks 0 (pipeline 0) and 1, 2 (pipeline 1): each layer in shard 0 and in shard 1 or 2.
  const auto ckpt = checkpoint_dir(run.out_dir, 2);
  const auto info = read_checkpoint_info(ckpt);
  std::map<int, std::vector<int>> copies;  // layer -> shards
  for (const auto& sh : info.shards) {
    for (int l : sh.layers) copies[l].push_back(sh.shard);
  }
  ASSERT_FALSE(copies.empty());
  for (const auto& [l, shards] : copies) {
    ASSERT_EQ(shards.size(), 2u) << "layer " << l;
    EXPECT_EQ(shards[0], 0) << "layer " << l;
    EXPECT_GE(shards[1], 1) << "layer " << l << " has both copies in one pipeline";
  }

  // Shard 0 lost: its layers come from pipeline 1's shards, bitwise.
  fs::remove(fs::path(ckpt) / shard_file(0, "model"));
  const auto resumed = train("replicas_resumed", kSteps, with(plan, "--train.resume=" + ckpt));
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  EXPECT_NE(resumed.log.find("shard 0"), std::string::npos) << resumed.log;
  EXPECT_NE(resumed.log.find("read from their replicas"), std::string::npos) << resumed.log;
  expect_bitwise_equal(checkpoint_dir(resumed.out_dir, kSteps), checkpoint_dir(run.out_dir, kSteps));

  // Every copy of some layer damaged: refused, exit 2, naming each copy tried.
  const auto second = info.shards.at(1);
  {
    std::fstream f(fs::path(ckpt) / second.model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  const auto refused = train("replicas_refused", kSteps, with(plan, "--train.resume=" + ckpt));
  EXPECT_EQ(refused.status, 2) << refused.log;
  EXPECT_NE(refused.log.find("no whole copy of layer"), std::string::npos) << refused.log;
  EXPECT_NE(refused.log.find("shard 0"), std::string::npos) << refused.log;
  EXPECT_NE(refused.log.find(fmt::format("shard {}", second.shard)), std::string::npos)
      << refused.log;

  // Two replicas need three pipelines.
  const auto bad = train("replicas_too_many", kSteps, with(plan, "--checkpoint.replicas=2"));
  EXPECT_EQ(bad.status, 2) << bad.log;
  EXPECT_NE(bad.log.find("checkpoint.replicas = 2 needs 3 pipelines"), std::string::npos) << bad.log;

  // A multi-host coordinator without checkpoint.dir merges one copy through its store: refused
  // before it waits for any agent.
  ScopedEnv token("BW_RUN_TOKEN", "replicas-test-token-0123456789");
  const auto out = (fs::path(work_dir()) / "replicas_store").string();
  auto r = run_cli({"coordinator", "--listen", "127.0.0.1:0", "--expect-nodes", "2",
                    "--model.name=tiny", "--data.path=" + corpus(), "--pipeline.pipelines=[1,1]",
                    "--checkpoint.replicas=1", "--train.out_dir=" + out},
                   out + ".log", kDeadlineS);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint.replicas needs checkpoint.dir"), std::string::npos)
      << r.output;
}

// Ctrl-C with checkpoint.replicas = 1 on a [1,2] plan: the stop save, too, writes each layer
// twice, from workers on different nodes, and the checkpoint it commits loads.
TEST(AsyncCheckpoint, TheStopSaveKeepsTheReplicas) {
  const auto out = (fs::path(work_dir()) / "replicas_stop").string();
  auto r = run_cli({"train", "--model.name=tiny", "--data.path=" + corpus(), "--train.steps=400",
                    "--train.warmup_steps=2", "--train.sample_tokens=0",
                    "--pipeline.microbatches=4", "--pipeline.microbatch_size=2", "--devices=3",
                    "--pipeline.pipelines=[1,2]", "--pipeline.schedule=1f1b",
                    "--pipeline.fault_tolerance=1", "--checkpoint.replicas=1",
                    "--train.out_dir=" + out, "--quiet"},
                   out + ".log", kDeadlineS, [&](pid_t pid) {
                     const auto metrics = fs::path(out) / "metrics.jsonl";
                     for (int i = 0; i < 6000; ++i) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(5));
                       if (fs::exists(metrics) && fs::file_size(metrics) > 2000) break;
                     }
                     ::kill(pid, SIGINT);
                   });
  ASSERT_FALSE(r.timed_out) << r.output;
  ASSERT_EQ(r.status, 130) << r.output;
  int steps = -1;
  const auto sidecar = latest_checkpoint(out, &steps);
  ASSERT_GT(steps, 0) << r.output;
  ASSERT_LT(steps, 400) << "the run ended before the signal";
  const auto info = read_checkpoint_info(sidecar);
  std::map<int, std::vector<int>> copies;  // layer -> shards
  for (const auto& sh : info.shards) {
    for (int l : sh.layers) copies[l].push_back(sh.shard);
  }
  ASSERT_FALSE(copies.empty());
  for (const auto& [l, shards] : copies) EXPECT_EQ(shards.size(), 2u) << "layer " << l;
  EXPECT_NO_THROW(load_checkpoint(sidecar));
}

// A full disk: checkpoint.dir is a tmpfs of 800 KiB (in a private mount namespace) and each
// checkpoint of this run takes about 530 KB, so the second one cannot be written. The run ends
// with one error naming the directory, exit 2; the first checkpoint stays the newest committed
// one and loads whole, and nothing of the second was published.
TEST(AsyncCheckpoint, AFullDiskEndsTheRunWithTheLastCheckpointWhole) {
  if (std::system("unshare -m true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "skipped: `unshare -m` (a private mount namespace) is not permitted here";
  }
  const auto base = fs::path(work_dir()) / "full_disk";
  fs::create_directories(base);
  const auto disk = (base / "disk").string(), kept = (base / "kept").string();
  fs::create_directories(disk);
  std::vector<std::string> args = {
      BW_BINARY, "train", "--model.name=tiny", "--data.path=" + corpus(), "--train.steps=4",
      "--train.warmup_steps=2", "--train.sample_tokens=0", "--pipeline.microbatches=4",
      "--pipeline.microbatch_size=2", "--devices=2", "--pipeline.pipelines=[2]",
      "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0", "--train.checkpoint_every=1",
      "--train.out_dir=" + (base / "out").string(), "--checkpoint.dir=" + disk, "--quiet"};
  std::string train_cmd;
  for (const auto& a : args) train_cmd += " '" + a + "'";
  // The tmpfs vanishes with the namespace: its content is copied out before the shell exits.
  const auto log = (base / "run.log").string(), script = (base / "run.sh").string();
  std::ofstream(script) << fmt::format(
      "mount -t tmpfs -o size=800k tmpfs '{}' || exit 99\n{} > '{}' 2>&1\nrc=$?\n"
      "cp -a '{}' '{}'\nexit $rc\n",
      disk, train_cmd, log, disk, kept);
  const int rc =
      std::system(fmt::format("timeout {} unshare -m sh '{}'", static_cast<int>(kDeadlineS), script)
                      .c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(rc)) << output;
  ASSERT_NE(WEXITSTATUS(rc), 99) << "the tmpfs could not be mounted";
  EXPECT_EQ(WEXITSTATUS(rc), 2) << output;
  EXPECT_NE(output.find(disk), std::string::npos) << "the error does not name the directory: "
                                                 << output;
  int newest = -1;
  const auto sidecar = latest_checkpoint(kept, &newest);
  ASSERT_EQ(newest, 1) << output;
  EXPECT_NO_THROW(load_checkpoint(sidecar));
  EXPECT_FALSE(fs::exists(checkpoint_dir(kept, 2))) << "a checkpoint that did not fit was published";
}

}  // namespace
}  // namespace bw::runtime

namespace bw::runtime {
namespace {

// What a host whose own disk holds only some shards does with them (checkpoint.dir not shared):
// load_checkpoint_layers reads just the layers it runs (a tied copy's primary with them) from the
// shards its locator finds, each tensor equal to the whole checkpoint's; publish_on_host publishes
// that host's shards with the manifest and nothing else; remove_partials_before_oldest keeps the
// staging directories of later steps.
TEST(AsyncCheckpoint, AHostLoadsItsLayersFromTheShardsItHoldsAndPublishesThem) {
  const std::vector<std::string> plan = {"--devices=3", "--pipeline.pipelines=[1,2]",
                                         "--pipeline.schedule=1f1b", "--model.tie_embeddings=true",
                                         "--train.checkpoint_every=2", "--checkpoint.replicas=1"};
  const auto run = train("own_disk_layers", 4, plan);
  ASSERT_EQ(run.status, 0) << run.log;
  const auto ckpt = checkpoint_dir(run.out_dir, 2);
  const auto info = read_checkpoint_info(ckpt);
  const auto whole = load_checkpoint(ckpt);
  ASSERT_TRUE(info.extra.contains("tied")) << "the model must tie a matrix for this test";
  int num_layers = 0;
  for (const auto& sh : info.shards) {
    for (int l : sh.layers) num_layers = std::max(num_layers, l + 1);
  }
  // Shard 0 (the whole model, pipeline 0) is not on this host.
  const ShardFileLocator without_shard0 = [&](const ShardFiles& sh, const std::string& file) {
    return sh.shard == 0 ? std::string() : (fs::path(ckpt) / file).string();
  };
  for (const std::vector<int>& layers : std::vector<std::vector<int>>{{num_layers - 1}, {0, 1}}) {
    const auto part = load_checkpoint_layers(info, ckpt, without_shard0, layers);
    const auto loads = layers_to_load(info, layers);
    int compared = 0;
    for (const auto& [name, t] : whole.weights) {
      const int l = std::stoi(name.substr(7));
      const bool wanted = std::find(layers.begin(), layers.end(), l) != layers.end();
      if (!wanted) continue;
      ASSERT_TRUE(part.weights.count(name)) << name;
      EXPECT_TRUE(torch::equal(part.weights.at(name), t)) << name;
      ++compared;
    }
    EXPECT_GT(compared, 0);
    std::set<std::string> copies;  // tied copies, filled in from their primary wherever it is
    for (const auto& group : info.extra.at("tied")) {
      for (size_t i = 1; i < group.size(); ++i) copies.insert(group[i].get<std::string>());
    }
    for (const auto& [name, t] : part.weights) {
      const int l = std::stoi(name.substr(7));
      EXPECT_TRUE(loads.count(l) || copies.count(name)) << name << " was read but not asked for";
    }
  }
  // The last layer's tied copy needs its primary's layer.
  EXPECT_TRUE(layers_to_load(info, {num_layers - 1}).count(0));
  // A host with no copy of a layer: one error naming the copies tried.
  const ShardFileLocator nothing = [](const ShardFiles&, const std::string&) { return ""; };
  try {
    load_checkpoint_layers(info, ckpt, nothing, {1});
    ADD_FAILURE() << "loaded from no files";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no whole copy of layer 1"), std::string::npos) << e.what();
  }

  // publish_on_host: this host ("b") wrote shard 1; a stray file of an earlier run goes.
  auto hosts_info = info;
  for (auto& sh : hosts_info.shards) sh.host = sh.shard == 1 ? "b" : "a";
  const auto root = (fs::path(work_dir()) / "own_disk_host_b").string();
  fs::remove_all(root);
  const auto staging = staging_dir(checkpoint_dir(root, 2));
  fs::create_directories(staging);
  for (const auto& f : {hosts_info.shards[1].model, hosts_info.shards[1].optimizer}) {
    fs::copy_file(fs::path(ckpt) / f, fs::path(staging) / f);
  }
  std::ofstream(fs::path(staging) / shard_file(9, "model")) << "stray";
  fs::create_directories(staging_dir(checkpoint_dir(root, 1)));  // a dropped earlier checkpoint
  fs::create_directories(staging_dir(checkpoint_dir(root, 4)));  // the next one, being written
  publish_on_host(root, hosts_info, "b");
  publish_on_host(root, hosts_info, "b");  // again: nothing to do
  const auto published = checkpoint_dir(root, 2);
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(published)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"checkpoint.json", hosts_info.shards[1].model,
                                          hosts_info.shards[1].optimizer}));
  EXPECT_EQ(read_checkpoint_info(published), hosts_info);
  EXPECT_EQ(remove_partials_before_oldest(root), 1);
  EXPECT_FALSE(fs::exists(staging_dir(checkpoint_dir(root, 1))));
  EXPECT_TRUE(fs::exists(staging_dir(checkpoint_dir(root, 4))));
  // A host that wrote none of the shards gets the manifest alone.
  const auto root_c = (fs::path(work_dir()) / "own_disk_host_c").string();
  fs::remove_all(root_c);
  publish_on_host(root_c, hosts_info, "c");
  EXPECT_TRUE(fs::exists(fs::path(checkpoint_dir(root_c, 2)) / "checkpoint.json"));
  EXPECT_EQ(std::distance(fs::directory_iterator(checkpoint_dir(root_c, 2)), fs::directory_iterator{}),
            1);
}

}  // namespace
}  // namespace bw::runtime

namespace bw::runtime {
namespace {

// The published checkpoint-NNNNNN steps under `root`.
std::set<int> checkpoint_steps(const std::string& root) {
  std::set<int> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const auto name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0 && name.find('.') == std::string::npos) {
      out.insert(std::stoi(name.substr(11)));
    }
  }
  return out;
}

// checkpoint.every_s: the coordinator (or the one process) checkpoints a step once that long has
// passed since the last checkpoint (timed from the first step's end), and every rank saves that
// same step. A tiny interval is a checkpoint after every later step; 0 leaves train.checkpoint_every alone (here: the end only). The
// training is the same either way, bitwise.
TEST(AsyncCheckpoint, CheckpointEverySecondsDecidesTheStepsForEveryRank) {
  constexpr int kSteps = 4;
  for (const std::vector<std::string>& plan :
       {std::vector<std::string>{"--devices=3", "--pipeline.pipelines=[1,2]",
                                 "--pipeline.schedule=1f1b"},
        std::vector<std::string>{"--devices=1"}}) {
    const auto name = plan.front() == "--devices=1" ? std::string("one") : std::string("three");
    const auto timed = train("every_s_tiny_" + name, kSteps, with(plan, "--checkpoint.every_s=1e-9"));
    ASSERT_EQ(timed.status, 0) << timed.log;
    const auto none = train("every_s_off_" + name, kSteps, with(plan, "--checkpoint.every_s=0"));
    ASSERT_EQ(none.status, 0) << none.log;
    // The interval starts at the first step's commit: then every step is due.
    EXPECT_EQ(checkpoint_steps(timed.out_dir), (std::set<int>{2, 3, 4})) << name;
    EXPECT_EQ(checkpoint_steps(none.out_dir), (std::set<int>{kSteps})) << name;
    for (int s = 2; s <= kSteps; ++s) {
      EXPECT_NO_THROW(load_checkpoint(checkpoint_dir(timed.out_dir, s))) << name << " step " << s;
    }
    expect_bitwise_equal(checkpoint_dir(timed.out_dir, kSteps),
                         checkpoint_dir(none.out_dir, kSteps));
  }
}

}  // namespace
}  // namespace bw::runtime
