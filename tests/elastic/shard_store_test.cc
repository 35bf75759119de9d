// Checkpoint state over the store (shard_store.h), on an in-memory store: blobs round-trip across
// chunk boundaries and are complete only once their record is written; a damaged chunk is found
// by the CRC; an interrupted upload is erased whole; shards received by the coordinator merge into
// the same checkpoint as shards written locally; resume state reaches each worker per layer.
#include "elastic/shard_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../scratch.h"
#include "core/error.h"
#include "runtime/checkpointing.h"

namespace bw::elastic {
namespace {
namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const auto d = bw::testing::process_scratch("bw_shard_store_test") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string pattern(int64_t n) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>((i * 131) % 251);
  return s;
}

TEST(ShardStore, BlobsRoundTripAcrossChunkBoundaries) {
  c10d::HashStore store;
  for (int64_t n : {int64_t{0}, int64_t{1}, kBlobChunkBytes - 1, kBlobChunkBytes,
                    kBlobChunkBytes + 1, 3 * kBlobChunkBytes + 17}) {
    const auto key = fmt::format("b/{}", n);
    const auto bytes = pattern(n);
    EXPECT_FALSE(has_blob(store, key));
    put_blob(store, key, bytes);
    EXPECT_TRUE(has_blob(store, key));
    EXPECT_EQ(get_blob(store, key, /*erase=*/false), bytes) << n;
    EXPECT_EQ(get_blob(store, key, /*erase=*/true), bytes) << n;
    EXPECT_FALSE(has_blob(store, key));
    EXPECT_FALSE(store.check({key + "/0"})) << "a chunk outlived its blob";
  }
}

TEST(ShardStore, ADamagedChunkIsFoundAndAnInterruptedUploadErased) {
  c10d::HashStore store;
  const auto bytes = pattern(2 * kBlobChunkBytes + 5);
  put_blob(store, "b", bytes);
  auto chunk = store.get("b/1");
  chunk[100] ^= 1;
  store.set("b/1", chunk);
  try {
    get_blob(store, "b", false);
    FAIL() << "a damaged chunk was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("damaged on the way"), std::string::npos) << e.what();
  }
  // An upload cut off after two chunks: no record, so not a blob; erasing removes the chunks.
  store.set("c/0", std::vector<uint8_t>(10, 1));
  store.set("c/1", std::vector<uint8_t>(10, 2));
  EXPECT_FALSE(has_blob(store, "c"));
  erase_blob(store, "c");
  EXPECT_FALSE(store.check({"c/0"}));
  EXPECT_FALSE(store.check({"c/1"}));
}

runtime::NamedTensors layer_tensors(int layer, int seed) {
  torch::manual_seed(seed);
  return {{fmt::format("layers.{}.w", layer), torch::randn({64, 300})},
          {fmt::format("layers.{}.b", layer), torch::randn({300})}};
}
runtime::NamedTensors moments(const runtime::NamedTensors& params) {
  runtime::NamedTensors out;
  for (const auto& [name, t] : params) {
    out.emplace_back(name + ".exp_avg", t * 0.1);
    out.emplace_back(name + ".exp_avg_sq", t * t);
    out.emplace_back(name + ".step", torch::tensor(int64_t{3}));
  }
  return out;
}

runtime::CheckpointInfo info_at(int step) {
  runtime::CheckpointInfo info;
  info.step = step;
  info.next_sample = 0;
  return info;
}

TEST(ShardStore, ReceivedShardsMergeIntoTheLocalCheckpoint) {
  c10d::HashStore store;
  const auto local = temp_dir("local"), remote = temp_dir("remote");
  const int shards = 3;
  for (int s = 0; s < shards; ++s) {
    const auto params = layer_tensors(s, 10 + s);
    runtime::write_shard(runtime::checkpoint_dir(local, 0), s, params, moments(params));
    EXPECT_FALSE(shards_complete(store, "g0/ckpt/0", shards));
    put_shard(store, "g0/ckpt/0", s, params, moments(params));
  }
  EXPECT_TRUE(shards_complete(store, "g0/ckpt/0", shards));
  const auto want = runtime::load_checkpoint(
      runtime::merge_shards(runtime::checkpoint_dir(local, 0), shards, info_at(0)));
  receive_shards(store, "g0/ckpt/0", shards, runtime::checkpoint_dir(remote, 0));
  EXPECT_FALSE(shards_complete(store, "g0/ckpt/0", 1)) << "received shards stay in the store";
  const auto got = runtime::load_checkpoint(
      runtime::merge_shards(runtime::checkpoint_dir(remote, 0), shards, info_at(0)));
  EXPECT_EQ(got.info.files, want.info.files) << "the merged files differ from local shards'";
  // A shard that never arrived (every writer counts its shard first, so a bug): an InternalError
  // naming it, and nothing published.
  put_shard(store, "g0/ckpt/5", 0, layer_tensors(0, 1), moments(layer_tensors(0, 1)));
  try {
    receive_shards(store, "g0/ckpt/5", 2, runtime::checkpoint_dir(remote, 5));
    FAIL() << "a missing shard was not noticed";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 1"), std::string::npos) << e.what();
  }
  erase_shards(store, "g0/ckpt/5", 2);
  EXPECT_FALSE(store.check({"g0/ckpt/5/0/model"}));
  EXPECT_FALSE(store.check({"g0/ckpt/5/0/model/0"}));
}

TEST(ShardStore, ResumeStateReachesEachWorkerByLayer) {
  c10d::HashStore store;
  runtime::LoadedCheckpoint ckpt;
  for (int l = 0; l < 3; ++l) {
    const auto params = layer_tensors(l, 20 + l);
    for (const auto& [n, t] : params) ckpt.weights[n] = t;
    for (const auto& [n, t] : moments(params)) ckpt.optimizer[n] = t;
  }
  EXPECT_GT(put_resume(store, ckpt, 3), 0);
  std::map<std::string, torch::Tensor> weights, optimizer;
  get_resume(store, {0, 2}, weights, optimizer);
  EXPECT_EQ(weights.size(), 4u);
  EXPECT_EQ(optimizer.size(), 12u);
  for (const auto& [n, t] : weights) EXPECT_TRUE(torch::equal(t, ckpt.weights.at(n))) << n;
  for (const auto& [n, t] : optimizer) EXPECT_TRUE(torch::equal(t, ckpt.optimizer.at(n))) << n;
  EXPECT_EQ(weights.count("layers.1.w"), 0u) << "a layer the worker does not run was fetched";
  erase_resume(store, 3);
  EXPECT_FALSE(store.check({"resume/0/model"}));
}

}  // namespace
}  // namespace bw::elastic
