// Our ids against Hugging Face `tokenizers` on the oracle's corpus (oracle.py): over 10 MB of
// seeded text of many kinds (scripts, whitespace runs, digit runs, contractions, emoji and ZWJ
// sequences, combining marks, added and special tokens, invalid UTF-8, every code point), with
// byte-level BPEs trained by `tokenizers` with GPT-2's and Llama 3's pre-tokenizers. Also the
// variants (add_prefix_space, ignore_merges off, ids past 65535, merges as "a b" strings), the
// post-processor's template and decoding; a Session whose word cache overflows (starts over)
// several times; and a single word of 4 MB, merged on the heap path. A mismatch prints the first
// differing documents.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "oracle_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace bw::tokenizer {
namespace {
namespace fs = std::filesystem;
using testing::compare_ids;
using testing::read_docs;
using testing::read_ids;

struct Oracle {
  std::string dir;
  std::string error;
  std::vector<std::string> docs;
};

const Oracle& oracle() {
  static const Oracle o = [] {
    Oracle o;
    o.dir = testing::oracle_dir(&o.error);
    if (!o.dir.empty()) o.docs = read_docs(o.dir + "/corpus.bin");
    return o;
  }();
  return o;
}

#define REQUIRE_ORACLE()                   \
  const Oracle& o = oracle();              \
  if (!o.error.empty()) FAIL() << o.error; \
  ASSERT_FALSE(o.docs.empty()) << "empty oracle corpus in " << o.dir

std::vector<std::string_view> views(const std::vector<std::string>& docs, size_t n) {
  std::vector<std::string_view> v(docs.begin(), docs.begin() + std::min(n, docs.size()));
  return v;
}

void expect_ids(const std::string& json, const std::string& ids, size_t n_docs,
                bool add_special_tokens = false) {
  const Oracle& o = oracle();
  const Tokenizer tok = Tokenizer::from_file(o.dir + "/" + json);
  const auto theirs = read_ids(o.dir + "/" + ids);
  ASSERT_FALSE(theirs.empty());
  const auto docs = views(o.docs, std::min(n_docs, theirs.size()));
  const auto ours = tok.encode_batch(docs, 0, {.add_special_tokens = add_special_tokens});
  const std::string diff = compare_ids(ours, theirs, o.docs, tok);
  EXPECT_TRUE(diff.empty()) << json << " on " << docs.size() << " documents:\n" << diff;
}

TEST(Oracle, CorpusIsOverTenMegabytesAndHasInvalidUtf8) {
  REQUIRE_ORACLE();
  size_t bytes = 0, invalid = 0;
  for (const auto& d : o.docs) {
    bytes += d.size();
    invalid += valid_utf8_prefix(d) != d.size();
  }
  EXPECT_GE(bytes, size_t{10'000'000});
  EXPECT_GT(invalid, 10u);
}

TEST(Oracle, Gpt2PreTokenizerIdsEqualHuggingFace) {
  REQUIRE_ORACLE();
  expect_ids("gpt2.json", "gpt2.ids", o.docs.size());
}

TEST(Oracle, Llama3PreTokenizerIdsEqualHuggingFace) {
  REQUIRE_ORACLE();
  expect_ids("llama3.json", "llama3.ids", o.docs.size());
}

TEST(Oracle, TemplateAddsTheSameSpecialTokens) {
  REQUIRE_ORACLE();
  expect_ids("gpt2.json", "gpt2.special.ids", 3000, true);
  expect_ids("llama3.json", "llama3.special.ids", 3000, true);
}

TEST(Oracle, VariantsEqualHuggingFace) {
  REQUIRE_ORACLE();
  expect_ids("gpt2_prefix.json", "gpt2_prefix.ids", 3000);      // add_prefix_space
  expect_ids("llama3_merges.json", "llama3_merges.ids", 3000);  // ignore_merges = false
  expect_ids("llama3_wide.json", "llama3_wide.ids", 3000);      // ids past 65535
  const Tokenizer wide = Tokenizer::from_file(o.dir + "/llama3_wide.json");
  EXPECT_GT(wide.vocab_size(), 65536u);
}

TEST(Oracle, MergesAsStringsGiveTheSameIds) {
  REQUIRE_ORACLE();
  std::ifstream in(o.dir + "/llama3.json");
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["model"]["merges"][0].is_array());  // `tokenizers` writes the list form
  nlohmann::json legacy = nlohmann::json::array({"#version: 0.2"});
  for (const auto& m : j["model"]["merges"])
    legacy.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = legacy;
  const std::string path = o.dir + fmt::format("/llama3_legacy.{}.json", getpid());
  std::ofstream(path) << j.dump();
  const Tokenizer tok = Tokenizer::from_file(path);
  fs::remove(path);
  const auto theirs = read_ids(o.dir + "/llama3.ids");
  const auto ours = tok.encode_batch(views(o.docs, 3000));
  std::vector<std::vector<uint32_t>> head(theirs.begin(), theirs.begin() + ours.size());
  const std::string diff = compare_ids(ours, head, o.docs, tok);
  EXPECT_TRUE(diff.empty()) << diff;
}

TEST(Oracle, DecodeEqualsHuggingFace) {
  REQUIRE_ORACLE();
  for (const std::string kind : {"gpt2", "llama3"}) {
    const Tokenizer tok = Tokenizer::from_file(o.dir + "/" + kind + ".json");
    const auto ids = read_ids(o.dir + "/" + kind + ".ids");
    for (const bool skip : {false, true}) {
      const auto theirs = read_docs(o.dir + "/" + kind + (skip ? ".decoded_skip" : ".decoded"));
      ASSERT_FALSE(theirs.empty());
      size_t bad = 0;
      for (size_t d = 0; d < theirs.size(); ++d) {
        const std::string ours = tok.decode(ids[d], skip);
        if (ours == theirs[d] || ++bad > 3) continue;
        size_t p = 0;
        while (p < ours.size() && p < theirs[d].size() && ours[p] == theirs[d][p]) ++p;
        ADD_FAILURE() << kind << " skip_special_tokens=" << skip << " document " << d
                      << " differs at byte " << p
                      << ":\n  ours:   " << testing::escape(ours.substr(p >= 10 ? p - 10 : 0), 60)
                      << "\n  theirs: "
                      << testing::escape(theirs[d].substr(p >= 10 ? p - 10 : 0), 60);
      }
      EXPECT_EQ(bad, 0u) << kind << ": documents whose decoding differs";
    }
  }
}

// `tokenizers`' ids of `docs` under the tokenizer.json `json` (oracle.py encode), through files
// named after `name` in the oracle's folder.
std::vector<std::vector<uint32_t>> their_ids(const std::string& json,
                                             const std::vector<std::string>& docs,
                                             const std::string& name) {
  const std::string base = oracle().dir + fmt::format("/{}.{}", name, getpid());
  testing::write_docs(base + ".docs", docs);
  const std::string err = testing::run_oracle({"encode", json, base + ".docs", base + ".ids"});
  EXPECT_EQ(err, "");
  auto ids = read_ids(base + ".ids");
  fs::remove(base + ".docs");
  fs::remove(base + ".ids");
  return ids;
}

// A Session keeps its word cache across calls; at WordCache::kMaxEntries words it starts over.
// Documents of random words, each word one pre-token, with far more distinct words than that
// (the cache starts over at least 3 times) and words repeated across documents (found in the
// cache before and after a restart): every document's ids are `tokenizers`' ids.
TEST(Oracle, SessionWhoseWordCacheOverflowsGivesTheSameIds) {
  REQUIRE_ORACLE();
  std::mt19937 rng(2);
  const auto word = [&] {
    std::string w = " ";
    for (int k = 0; k < 7; ++k) w += static_cast<char>('a' + rng() % 26);
    return w;
  };
  std::vector<std::string> docs(8), seen;
  std::set<std::string> distinct;
  for (auto& d : docs) {
    for (size_t w = 0; w < WordCache::kMaxEntries / 2; ++w) {
      std::string x = !seen.empty() && rng() % 8 == 0 ? seen[rng() % seen.size()] : word();
      if (seen.size() < 100'000) seen.push_back(x);
      distinct.insert(x);
      d += x;
    }
  }
  ASSERT_GT(distinct.size(), 3 * WordCache::kMaxEntries) << "the cache would not overflow";
  for (const std::string kind : {"gpt2", "llama3"}) {
    const std::string json = o.dir + "/" + kind + ".json";
    const Tokenizer tok = Tokenizer::from_file(json);
    Session session(tok);
    std::vector<std::vector<uint32_t>> ours;
    for (const auto& d : docs) {
      ours.emplace_back();
      session.encode(d, ours.back());
    }
    const std::string diff = compare_ids(ours, their_ids(json, docs, kind + "_cache"), docs, tok);
    EXPECT_TRUE(diff.empty()) << kind << ":\n" << diff;
  }
}

// A random BPE over the letters a-d (merges of random pairs of existing tokens, some repeated)
// and one word of 4 MB, which Bpe merges on its heap path: the ids are `tokenizers`' ids for the
// same model with no pre-tokenizer (the whole input is one word there too).
TEST(Oracle, AWordOfMegabytesMergesAsHuggingFaceDoes) {
  REQUIRE_ORACLE();
  std::mt19937 rng(3);
  BytesToId vocab;
  std::vector<BpeMerge> merges;
  std::vector<std::string> strings;
  nlohmann::json json_vocab = nlohmann::json::object(), json_merges = nlohmann::json::array();
  for (int i = 0; i < 4; ++i) {
    strings.push_back(std::string(1, static_cast<char>('a' + i)));
    vocab[strings.back()] = static_cast<TokenId>(i);
  }
  for (int m = 0; m < 300; ++m) {
    const auto a = static_cast<TokenId>(rng() % strings.size());
    const auto b = static_cast<TokenId>(rng() % strings.size());
    const std::string s = strings[a] + strings[b];
    auto it = vocab.find(s);
    if (it == vocab.end()) {
      strings.push_back(s);
      it = vocab.emplace(s, static_cast<TokenId>(strings.size() - 1)).first;
    }
    merges.push_back({a, b, static_cast<uint32_t>(m), it->second});
    json_merges.push_back({strings[a], strings[b]});
  }
  for (size_t i = 0; i < strings.size(); ++i) json_vocab[strings[i]] = i;
  nlohmann::json j = {{"version", "1.0"},      {"truncation", nullptr}, {"padding", nullptr},
                      {"added_tokens", nlohmann::json::array()},       {"normalizer", nullptr},
                      {"pre_tokenizer", nullptr}, {"post_processor", nullptr},
                      {"decoder", nullptr}};
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},     {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false},   {"ignore_merges", false},
                {"vocab", json_vocab},      {"merges", json_merges}};
  const std::string json = o.dir + fmt::format("/random_bpe.{}.json", getpid());
  std::ofstream(json) << j.dump();
  std::string word(4'000'000, 'a');
  for (char& c : word) c = static_cast<char>('a' + rng() % 4);
  const Bpe bpe(vocab, merges, {});
  WordScratch scratch;
  std::vector<std::vector<uint32_t>> ours(1);
  bpe.encode_word(word, scratch, ours[0]);
  ASSERT_GT(word.size(), Bpe::kLinearMaxSymbols);
  const auto theirs = their_ids(json, {word}, "random_bpe");
  fs::remove(json);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_LT(theirs[0].size(), word.size()) << "merges were applied";
  if (ours[0] != theirs[0]) {
    size_t p = 0;
    while (p < ours[0].size() && p < theirs[0].size() && ours[0][p] == theirs[0][p]) ++p;
    ADD_FAILURE() << ours[0].size() << " ids here, " << theirs[0].size()
                  << " from tokenizers; first difference at id " << p;
  }
}

}  // namespace
}  // namespace bw::tokenizer
