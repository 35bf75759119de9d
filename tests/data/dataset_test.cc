// Datasets: raw text, llm.c .bin files and directories read back exactly what was written, and
// every kind of bad input is one clear ConfigError naming the file and numbers.
#include "data/dataset.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "../scratch.h"

namespace bw::data {
namespace {
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (bw::testing::process_scratch("bw_dataset_test") / name).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le32(int32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i)
    s[i] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * i)) & 0xff);
  return s;
}

std::string header(int32_t magic, int32_t version, int32_t count) {
  std::string h = le32(magic) + le32(version) + le32(count);
  h.resize(1024, '\0');
  return h;
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

TEST(TokenDataset, RawTextBytesAreTokens) {
  for (int n : {1, 2, 17, 1000}) {
    std::string text;
    std::mt19937 rng(n);
    for (int i = 0; i < n; ++i) text.push_back(static_cast<char>(rng() & 0xff));
    std::string path = temp_path(fmt::format("text_{}.txt", n));
    write_bytes(path, text);
    TokenDataset d = TokenDataset::open(path);
    EXPECT_EQ(d.format(), TokenDataset::Format::kText);
    EXPECT_EQ(d.vocab_size(), 256);
    ASSERT_EQ(d.num_tokens(), n);
    std::vector<int64_t> out(n);
    d.copy_tokens(0, n, out.data());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], static_cast<unsigned char>(text[i])) << "token " << i << " of " << n;
    }
  }
}

TEST(TokenDataset, TokenBinVersion1RoundTrips) {
  for (int n : {1, 5, 4097}) {
    std::vector<uint16_t> tokens(n);
    std::mt19937 rng(n);
    for (auto& t : tokens) t = static_cast<uint16_t>(rng() % kGpt2Vocab);
    tokens[0] = kGpt2Vocab - 1;  // the largest legal token
    std::string path = temp_path(fmt::format("tok_{}.bin", n));
    write_token_bin(path, tokens);
    EXPECT_EQ(fs::file_size(path), 1024u + 2u * n);
    TokenDataset d = TokenDataset::open(path);
    EXPECT_EQ(d.format(), TokenDataset::Format::kTokenBin);
    EXPECT_EQ(d.vocab_size(), kGpt2Vocab);
    ASSERT_EQ(d.num_tokens(), n);
    std::vector<int64_t> out(n);
    d.copy_tokens(0, n, out.data());
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], tokens[i]) << "token " << i;
  }
}

TEST(TokenDataset, TokenBinVersion2HoldsUint32) {
  std::vector<uint32_t> tokens = {0, 70000, 128255, 5};
  std::string bytes = header(kTokenBinMagic, 2, 4);
  for (uint32_t t : tokens) bytes += le32(static_cast<int32_t>(t));
  std::string path = temp_path("v2.bin");
  write_bytes(path, bytes);
  TokenDataset d = TokenDataset::open(path);
  EXPECT_EQ(d.vocab_size(), kLlama3Vocab);
  ASSERT_EQ(d.num_tokens(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.token(i), tokens[i]);
}

TEST(TokenDataset, MagicIsDetectedWhateverTheName) {
  std::string path = temp_path("tokens.dat16");
  write_token_bin(path, {1, 2, 3});
  EXPECT_EQ(TokenDataset::open(path).format(), TokenDataset::Format::kTokenBin);
}

TEST(TokenDataset, BadInputsAreConfigErrors) {
  expect_contains(error_of([] { TokenDataset::open(temp_path("does_not_exist.txt")); }),
                  {"does_not_exist.txt", "cannot open"});
  std::string empty = temp_path("empty.txt");
  write_bytes(empty, "");
  expect_contains(error_of([&] { TokenDataset::open(empty); }), {"empty.txt", "empty"});

  std::string wrong = temp_path("wrong_magic.bin");
  write_bytes(wrong, header(20240521, 1, 2) + std::string(4, 'x'));
  expect_contains(error_of([&] { TokenDataset::open(wrong); }),
                  {"wrong_magic.bin", "20240521", "20240520"});

  std::string version = temp_path("version.bin");
  write_bytes(version, header(kTokenBinMagic, 7, 2) + std::string(4, 'x'));
  expect_contains(error_of([&] { TokenDataset::open(version); }), {"version.bin", "version 7"});

  std::string truncated = temp_path("truncated.bin");
  write_bytes(truncated, header(kTokenBinMagic, 1, 10) + std::string(6, 'x'));
  expect_contains(error_of([&] { TokenDataset::open(truncated); }),
                  {"truncated.bin", "10 tokens", "6 bytes"});

  std::string short_header = temp_path("short.bin");
  write_bytes(short_header, le32(kTokenBinMagic) + le32(1));
  expect_contains(error_of([&] { TokenDataset::open(short_header); }), {"short.bin", "8 bytes"});
}

TEST(TokenDataset, TokenOutsideVocabularyIsConfigError) {
  std::string path = temp_path("big_token.bin");
  write_token_bin(path, {1, 2, 60000, 3});
  TokenDataset d = TokenDataset::open(path);
  std::vector<int64_t> out(4);
  d.copy_tokens(0, 2, out.data());  // the legal prefix reads fine
  expect_contains(error_of([&] { d.copy_tokens(0, 4, out.data()); }),
                  {"big_token.bin", "60000", "position 2", "50257"});
}

TEST(TokenDataset, DirectoryIsConcatenationInNameOrderOfPlainFiles) {
  fs::path dir = temp_path("corpus");
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_bytes((dir / "b").string(), "second\n");
  write_bytes((dir / "a").string(), "first\n");
  write_bytes((dir / "a.dat").string(), "INDEX");
  write_bytes((dir / ".hidden").string(), "HIDDEN");
  fs::create_symlink(dir / "a", dir / "a.u8");
  TokenDataset d = TokenDataset::open(dir.string());
  std::string expected = "first\nsecond\n";
  ASSERT_EQ(d.num_tokens(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(d.token(i), expected[i]) << i;

  fs::path none = temp_path("empty_corpus");
  fs::remove_all(none);
  fs::create_directories(none);
  write_bytes((none / "x.dat").string(), "INDEX");
  expect_contains(error_of([&] { TokenDataset::open(none.string()); }), {"empty_corpus"});
}

TEST(TokenDataset, DefaultCorpusOpensWhenInstalled) {
  std::string path;
  try {
    path = default_corpus_path();
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"fortunes", "--data.path"});
    GTEST_SKIP() << "default corpus not installed: " << e.what();
  }
  TokenDataset d = TokenDataset::open(path);
  EXPECT_GT(d.num_tokens(), 100000);
  EXPECT_EQ(d.vocab_size(), 256);
}

}  // namespace
}  // namespace bw::data
