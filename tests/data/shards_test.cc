// Sharded datasets: a directory or glob of llm.c .bin shards is one token stream in name order,
// equal token for token (and sample for sample) to the single file holding the concatenation;
// bad shards are one ConfigError naming the shard and the offset.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <torch/torch.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "../scratch.h"

namespace bw::data {
namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path dir =
      bw::testing::process_scratch("bw_shards_test") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << " / " << p;
}

std::vector<uint16_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> t(n);
  for (auto& x : t) x = static_cast<uint16_t>(rng() % kGpt2Vocab);
  return t;
}

// Shards of sizes 700, 1, 300 and 999 written under names that sort differently from the order
// of writing; `all` is their concatenation in name order.
struct Shards {
  fs::path dir;
  std::vector<uint16_t> all;
};

Shards write_shards(const std::string& name) {
  Shards s{fresh_dir(name), {}};
  const std::vector<std::pair<std::string, size_t>> files = {{"x_train_000002.bin", 300},
                                                             {"x_train_000000.bin", 700},
                                                             {"x_train_000003.bin", 999},
                                                             {"x_train_000001.bin", 1}};
  std::map<std::string, std::vector<uint16_t>> by_name;
  uint32_t seed = 1;
  for (const auto& [f, n] : files) {
    by_name[f] = random_tokens(n, seed++);
    write_token_bin((s.dir / f).string(), by_name[f]);
  }
  for (const auto& [f, t] : by_name) s.all.insert(s.all.end(), t.begin(), t.end());
  return s;
}

TEST(Shards, DirectoryIsOneStreamInNameOrder) {
  Shards s = write_shards("dir");
  std::ofstream((s.dir / "notes.txt").string()) << "not a shard";  // skipped: not *.bin
  TokenDataset d = TokenDataset::open(s.dir.string());
  ASSERT_EQ(d.num_tokens(), static_cast<int64_t>(s.all.size()));
  EXPECT_EQ(d.vocab_size(), kGpt2Vocab);
  EXPECT_EQ(d.files().size(), 4u);
  for (size_t i = 0; i < s.all.size(); ++i) ASSERT_EQ(d.token(i), s.all[i]) << i;
  // One copy across every shard boundary.
  std::vector<int64_t> out(s.all.size());
  d.copy_tokens(0, d.num_tokens(), out.data());
  for (size_t i = 0; i < s.all.size(); ++i) ASSERT_EQ(out[i], s.all[i]) << i;
  d.copy_tokens(699, 3, out.data());  // shard 0's last, shard 1's only, shard 2's first
  EXPECT_EQ(out[0], s.all[699]);
  EXPECT_EQ(out[1], s.all[700]);
  EXPECT_EQ(out[2], s.all[701]);
}

TEST(Shards, GlobEqualsTheConcatenatedFileSampleForSample) {
  Shards s = write_shards("glob");
  const fs::path single = fresh_dir("glob_single") / "all.bin";
  write_token_bin(single.string(), s.all);
  TokenDataset sharded = TokenDataset::open((s.dir / "x_train_*.bin").string());
  TokenDataset whole = TokenDataset::open(single.string());
  EXPECT_EQ(sharded.content_digest(), whole.content_digest());
  // The global sample order depends on the token stream only, not on how it is split in files.
  Sampler a(sharded, 64, 7), b(whole, 64, 7);
  ASSERT_EQ(a.num_samples(), b.num_samples());
  for (int64_t i = 0; i < 2 * a.num_samples(); i += 5) {
    auto [xa, ya] = a.batch(i, 5);
    auto [xb, yb] = b.batch(i, 5);
    ASSERT_TRUE(torch::equal(xa, xb)) << i;
    ASSERT_TRUE(torch::equal(ya, yb)) << i;
  }
  // A glob of one file is that file.
  EXPECT_EQ(TokenDataset::open((s.dir / "x_train_000001.b?n").string()).num_tokens(), 1);
}

TEST(Shards, BadShardsAreOneErrorNamingTheFileAndOffset) {
  Shards s = write_shards("bad");
  const std::string glob = (s.dir / "*.bin").string();
  // A header count that disagrees with the size.
  {
    const fs::path f = s.dir / "x_train_000002.bin";
    fs::resize_file(f, fs::file_size(f) - 3);
    expect_contains(error_of([&] { TokenDataset::open(glob); }),
                    {"x_train_000002.bin", "300 tokens", "offset 8", "597 bytes"});
    write_token_bin(f.string(), random_tokens(300, 3));
  }
  // A token >= the vocabulary in the third shard: its position in that shard and byte offset.
  {
    auto t = random_tokens(300, 3);
    t[17] = 60000;
    write_token_bin((s.dir / "x_train_000002.bin").string(), t);
    TokenDataset d = TokenDataset::open(glob);
    std::vector<int64_t> out(d.num_tokens());
    d.copy_tokens(0, 718, out.data());  // the prefix before it reads fine
    expect_contains(error_of([&] { d.copy_tokens(0, d.num_tokens(), out.data()); }),
                    {"x_train_000002.bin", "60000", "position 17", "byte offset 1058", "50257"});
  }
  // Mixed versions.
  {
    const fs::path f = s.dir / "x_train_000003.bin";
    std::string bytes(1024 + 8, '\0');
    const int32_t hdr[3] = {kTokenBinMagic, 2, 2};
    std::memcpy(bytes.data(), hdr, sizeof(hdr));
    std::ofstream(f.string(), std::ios::binary | std::ios::trunc) << bytes;
    expect_contains(error_of([&] { TokenDataset::open(glob); }),
                    {"x_train_000003.bin", "version 2", "version 1"});
  }
  // A text file among the shards of a glob.
  {
    std::ofstream((s.dir / "x_train_000003.bin").string(), std::ios::trunc) << "hello";
    expect_contains(error_of([&] { TokenDataset::open(glob); }),
                    {"x_train_000003.bin", "not an llm.c .bin token file"});
  }
  expect_contains(error_of([&] { TokenDataset::open((s.dir / "nothing_*.bin").string()); }),
                  {"nothing_*.bin", "matches no file"});
}

TEST(Shards, FolderWithBothSplitsIsRefusedWithTheGlobs) {
  Shards s = write_shards("splits");
  write_token_bin((s.dir / "x_val_000000.bin").string(), random_tokens(50, 9));
  expect_contains(error_of([&] { TokenDataset::open(s.dir.string()); }),
                  {"_train_*.bin", "_val_*.bin", "--data.path="});
  EXPECT_EQ(TokenDataset::open((s.dir / "x_val_*.bin").string()).num_tokens(), 50);
  EXPECT_EQ(TokenDataset::open((s.dir / "x_train_*.bin").string()).num_tokens(),
            static_cast<int64_t>(s.all.size()));
}

}  // namespace
}  // namespace bw::data
