// The BPE merge loop: the array scan used for short words and the heap used for long ones give
// the same merges on random words and random merge tables (both are the lowest (rank, position)
// rule of `tokenizers`' word.rs); unknown bytes are dropped or become unk (fused or not); a
// repeated merge keeps its last rank; ignore_merges takes a whole-word entry. (A word of
// megabytes, on the heap path, is checked against `tokenizers` in oracle_test.cc.)
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <random>

namespace bw::tokenizer {
namespace {

// Bytes 'a'..'a'+k-1 have ids 0..k-1; merges of random pairs of existing ids make new ids.
struct Table {
  BytesToId vocab;
  std::vector<BpeMerge> merges;
};

Table random_table(std::mt19937& rng, int letters, int num_merges) {
  Table t;
  std::vector<std::string> strings;
  for (int i = 0; i < letters; ++i) {
    strings.push_back(std::string(1, static_cast<char>('a' + i)));
    t.vocab[strings.back()] = static_cast<TokenId>(i);
  }
  for (int m = 0; m < num_merges; ++m) {
    const auto a = static_cast<TokenId>(rng() % strings.size());
    const auto b = static_cast<TokenId>(rng() % strings.size());
    const std::string s = strings[a] + strings[b];
    TokenId id;
    if (auto it = t.vocab.find(s); it != t.vocab.end()) {
      id = it->second;
    } else {
      id = static_cast<TokenId>(strings.size());
      strings.push_back(s);
      t.vocab[s] = id;
    }
    t.merges.push_back({a, b, static_cast<uint32_t>(m), id});
  }
  return t;
}

TEST(Bpe, ArrayScanAndHeapGiveTheSameMerges) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int letters = 2 + static_cast<int>(rng() % 6);
    Table t = random_table(rng, letters, 1 + static_cast<int>(rng() % 60));
    const Bpe bpe(t.vocab, t.merges, {});
    WordScratch s;
    for (int w = 0; w < 20; ++w) {
      std::vector<TokenId> ids(1 + rng() % 200);
      for (auto& id : ids) id = static_cast<TokenId>(rng() % letters);
      std::vector<TokenId> a = ids, b = ids;
      bpe.merge_linear(a, s);
      bpe.merge_heap(b, s);
      ASSERT_EQ(a, b) << "trial " << trial << " word " << w;
    }
  }
}

TEST(Bpe, MergesByRankThenLeftmost) {
  BytesToId vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"ba", 3}, {"aba", 4}};
  // "ba" outranks "ab": "aba" -> a + ba; then no merge (a, ba).
  const Bpe ba_first(vocab, {{1, 0, 0, 3}, {0, 1, 1, 2}}, {});
  WordScratch s;
  std::vector<TokenId> out;
  ba_first.encode_word("aba", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{0, 3}));
  // Equal pairs: the leftmost merges first ("aaa" with a+a -> "aa" gives aa + a).
  BytesToId v2 = {{"a", 0}, {"aa", 1}};
  const Bpe aa(v2, {{0, 0, 0, 1}}, {});
  out.clear();
  aa.encode_word("aaa", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{1, 0}));
  // A repeated pair keeps its last rank: (a, b) at rank 2 now loses to (b, a) at rank 1.
  const Bpe repeated(vocab, {{0, 1, 0, 2}, {1, 0, 1, 3}, {0, 1, 2, 2}}, {});
  out.clear();
  repeated.encode_word("aba", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{0, 3}));
  EXPECT_EQ(repeated.num_merges(), 2u);
}

TEST(Bpe, UnknownBytesAreDroppedOrBecomeUnk) {
  BytesToId vocab = {{"a", 0}, {"<unk>", 1}};
  WordScratch s;
  std::vector<TokenId> out;
  Bpe(vocab, {}, {}).encode_word("xaxx", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{0}));
  out.clear();
  Bpe(vocab, {}, {.unk = 1}).encode_word("xaxx", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{1, 0, 1, 1}));
  out.clear();
  Bpe(vocab, {}, {.unk = 1, .fuse_unk = true}).encode_word("xaxx", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{1, 0, 1}));
}

TEST(Bpe, IgnoreMergesTakesAWholeWordEntry) {
  // "abc" is in the vocabulary but no merge builds it: only ignore_merges finds it.
  BytesToId vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}, {"ab", 4}};
  std::vector<BpeMerge> merges = {{0, 1, 0, 4}};
  WordScratch s;
  std::vector<TokenId> out;
  Bpe(vocab, merges, {}).encode_word("abc", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{4, 2}));
  out.clear();
  Bpe(vocab, merges, {.ignore_merges = true}).encode_word("abc", s, out);
  EXPECT_EQ(out, (std::vector<TokenId>{3}));
}

}  // namespace
}  // namespace bw::tokenizer
