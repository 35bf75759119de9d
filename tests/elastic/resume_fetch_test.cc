// plan_shard_fetches (resume_fetch.h) against its contract, checked independently over random
// manifests: every layer a rank loads is in a shard its host holds or one it fetches; a fetch
// comes from a rank that holds the shard; a rank fetches only for a layer its host lacks, and no
// shard twice; and a layer no rank has is one error naming every copy.
#include "elastic/resume_fetch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "../runtime/cli_runner.h"
#include "core/error.h"

namespace bw::elastic {
namespace {

runtime::CheckpointInfo manifest(const std::vector<std::vector<int>>& shards) {
  runtime::CheckpointInfo info;
  for (int s = 0; s < static_cast<int>(shards.size()); ++s) {
    runtime::ShardFiles f;
    f.shard = s;
    f.layers = shards[s];
    f.host = "h" + std::to_string(s);
    f.model = runtime::shard_file(s, "model");
    f.optimizer = runtime::shard_file(s, "optimizer");
    info.shards.push_back(f);
  }
  return info;
}

bool holds(const runtime::CheckpointInfo& info, int shard, int layer) {
  const auto& l = info.shards[shard].layers;
  return std::find(l.begin(), l.end(), layer) != l.end();
}

TEST(PlanShardFetches, CoversEveryLayerFromHoldersOnlyWhereNeeded) {
  std::mt19937 rng(11);
  int fetches_seen = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 6);
    const int nshards = 1 + static_cast<int>(rng() % 5);
    const int ranks = 1 + static_cast<int>(rng() % 4);
    std::vector<std::vector<int>> shards(nshards);
    for (int l = 0; l < layers; ++l) {
      // Every layer in one to three shards (the replicas).
      const int copies = 1 + static_cast<int>(rng() % 3);
      for (int c = 0; c < copies; ++c) {
        auto& sh = shards[rng() % nshards];
        if (std::find(sh.begin(), sh.end(), l) == sh.end()) sh.push_back(l);
      }
    }
    const auto info = manifest(shards);
    std::vector<std::set<int>> have(ranks), needed(ranks);
    std::vector<std::string> hosts(ranks);
    for (int r = 0; r < ranks; ++r) {
      hosts[r] = "rank" + std::to_string(r);
      for (int s = 0; s < nshards; ++s) {
        if (rng() % 3 == 0) have[r].insert(s);
      }
      for (int l = 0; l < layers; ++l) {
        if (rng() % 2 == 0) needed[r].insert(l);
      }
    }
    // Whether some rank holds a copy of each layer: the plan exists exactly then.
    bool possible = true;
    for (int r = 0; r < ranks; ++r) {
      for (int l : needed[r]) {
        bool any = false;
        for (int q = 0; q < ranks; ++q) {
          for (int s : have[q]) any = any || holds(info, s, l);
        }
        possible = possible && any;
      }
    }
    if (!possible) {
      EXPECT_THROW(plan_shard_fetches(info, have, needed, hosts, "ckpt"), ConfigError);
      continue;
    }
    const auto plan = plan_shard_fetches(info, have, needed, hosts, "ckpt");
    std::set<std::pair<int, int>> pairs;
    for (const auto& f : plan) {
      ASSERT_GE(f.from, 0);
      ASSERT_LT(f.from, ranks);
      EXPECT_TRUE(have[f.from].count(f.shard)) << "trial " << trial;
      EXPECT_FALSE(have[f.to].count(f.shard)) << "trial " << trial;
      EXPECT_TRUE(pairs.insert({f.shard, f.to}).second) << "a shard fetched twice, trial " << trial;
      // Fetched for a layer the rank needs and its host lacks.
      bool useful = false;
      for (int l : needed[f.to]) {
        bool local = false;
        for (int s : have[f.to]) local = local || holds(info, s, l);
        useful = useful || (!local && holds(info, f.shard, l));
      }
      EXPECT_TRUE(useful) << "trial " << trial;
    }
    for (int r = 0; r < ranks; ++r) {
      for (int l : needed[r]) {
        bool covered = false;
        for (int s : have[r]) covered = covered || holds(info, s, l);
        for (const auto& f : plan) covered = covered || (f.to == r && holds(info, f.shard, l));
        EXPECT_TRUE(covered) << "rank " << r << " layer " << l << " trial " << trial;
      }
    }
    fetches_seen += static_cast<int>(plan.size());
  }
  EXPECT_GT(fetches_seen, 50);  // the trials exercise fetching, not only local loads
}

TEST(PlanShardFetches, ALayerNoHostHoldsIsOneErrorNamingEveryCopy) {
  const auto info = manifest({{0, 1}, {1}, {0}});
  try {
    plan_shard_fetches(info, {{1}, {}}, {{0}, {1}}, {"a", "b"}, "ckpt-7");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 0"), std::string::npos) << what;
    EXPECT_NE(what.find("shard 0 on host h0, shard 2 on host h2"), std::string::npos) << what;
    EXPECT_NE(what.find("a, b"), std::string::npos) << what;
  }
}

// find_shard_file: a file of the manifest in the published directory or its staging directory,
// only with the recorded size.
TEST(FindShardFile, LooksInThePublishedAndTheStagingDirectoryBySize) {
  namespace fs = std::filesystem;
  const auto root = testing::scratch_dir(
      (fs::temp_directory_path() / ("bw_find_shard_" + std::to_string(getpid()))).string());
  auto info = manifest({{0}});
  info.files["shard-0.model.safetensors"] = {5, 0};
  info.files["shard-0.optimizer.safetensors"] = {3, 0};
  const auto dir = runtime::checkpoint_dir(root, 4);
  fs::create_directories(dir);
  fs::create_directories(runtime::staging_dir(dir));
  std::ofstream(fs::path(dir) / "shard-0.model.safetensors") << "12345";
  std::ofstream(fs::path(runtime::staging_dir(dir)) / "shard-0.optimizer.safetensors") << "123";
  EXPECT_EQ(find_shard_file(info, dir, "shard-0.model.safetensors"),
            (fs::path(dir) / "shard-0.model.safetensors").string());
  EXPECT_EQ(find_shard_file(info, dir, "shard-0.optimizer.safetensors"),
            (fs::path(runtime::staging_dir(dir)) / "shard-0.optimizer.safetensors").string());
  std::ofstream(fs::path(dir) / "shard-0.model.safetensors") << "1234567";  // another size
  EXPECT_EQ(find_shard_file(info, dir, "shard-0.model.safetensors"), "");
  EXPECT_EQ(find_shard_file(info, dir, "not-in-the-manifest"), "");
}

}  // namespace
}  // namespace bw::elastic
