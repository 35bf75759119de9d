// The tokenizer end to end on small tokenizers built here (test_util.h): decoding inverts
// encoding on any bytes (after the U+FFFD repair), special tokens are single ids that
// skip_special_tokens drops, the template adds BOS, batch encoding gives the same ids whatever
// the thread count, the word cache starts over when full and returns what was inserted, and the
// document token is found from the template or the added tokens.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace bw::tokenizer {
namespace {
using testing::Style;

Tokenizer tiny(Style style, int merges = 300) {
  return Tokenizer::from_json(testing::tiny_tokenizer(style, testing::sample_text(), merges).dump(),
                              "tiny.json");
}

std::vector<std::string> random_docs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::string pieces[] = {"the",
                                " quick",
                                "'s",
                                " 123456",
                                "\n\n",
                                "  ",
                                "日本",
                                " é",
                                "👩🏿‍🔬",
                                "<|endoftext|>",
                                "<|begin_of_text|>",
                                "\t",
                                "\r\n",
                                "!!"};
  std::vector<std::string> docs(n);
  for (auto& d : docs) {
    const int len = static_cast<int>(rng() % 200);
    for (int i = 0; i < len; ++i) {
      if (rng() % 10 == 0) {
        d += static_cast<char>(rng() % 256);  // often invalid UTF-8
      } else {
        d += pieces[rng() % std::size(pieces)];
      }
    }
  }
  return docs;
}

TEST(Tokenizer, DecodingInvertsEncodingOnAnyBytes) {
  for (Style style : {Style::kGpt2, Style::kLlama3}) {
    const Tokenizer tok = tiny(style);
    for (const std::string& d : random_docs(300, 5)) {
      const auto ids = tok.encode(d);
      EXPECT_EQ(tok.decode_bytes(ids), repair_utf8(d));
      EXPECT_EQ(tok.decode(ids), repair_utf8(d));
    }
    const std::string text = testing::sample_text();
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    EXPECT_LT(tok.encode(text).size(), text.size() / 2) << "merges were applied";
  }
}

TEST(Tokenizer, SpecialTokensAreSingleIdsThatDecodingCanSkip) {
  const Tokenizer tok = tiny(Style::kGpt2);
  const TokenId eot = *tok.token_to_id("<|endoftext|>");
  EXPECT_TRUE(tok.is_special(eot));
  EXPECT_EQ(tok.vocab_size(), eot + 1);
  const auto ids = tok.encode("a<|endoftext|>b<|endoftext|><|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 3);
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|>b<|endoftext|><|endoftext|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "ab");
  const auto partial = tok.encode("<|endoftext");  // not the token: ordinary text
  EXPECT_EQ(std::count(partial.begin(), partial.end(), eot), 0);
  EXPECT_EQ(tok.decode(partial), "<|endoftext");
  EXPECT_EQ(tok.id_to_token(eot), "<|endoftext|>");
  EXPECT_EQ(tok.id_to_token(tok.vocab_size()), std::nullopt);
  const std::vector<TokenId> unknown = {tok.vocab_size() + 5, eot};
  EXPECT_EQ(tok.decode(unknown), "<|endoftext|>");  // unknown ids are skipped
}

TEST(Tokenizer, TemplateAddsBosOnlyWhenAsked) {
  const Tokenizer tok = tiny(Style::kLlama3);
  const TokenId bos = *tok.token_to_id("<|begin_of_text|>");
  const auto plain = tok.encode("hello");
  const auto with = tok.encode("hello", {.add_special_tokens = true});
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], bos);
  EXPECT_EQ(std::vector<TokenId>(with.begin() + 1, with.end()), plain);
  EXPECT_EQ(tok.encode("", {.add_special_tokens = true}), std::vector<TokenId>{bos});
}

TEST(Tokenizer, DocumentTokenComesFromTheTemplateOrTheAddedTokens) {
  EXPECT_EQ(tiny(Style::kGpt2).document_token(), tiny(Style::kGpt2).token_to_id("<|endoftext|>"));
  const Tokenizer llama = tiny(Style::kLlama3);
  EXPECT_EQ(llama.document_token(), llama.token_to_id("<|begin_of_text|>"));
  auto j = testing::tiny_tokenizer(Style::kGpt2, "ab", 1);
  j["added_tokens"] = nlohmann::json::array();
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").document_token(), std::nullopt);
  j["added_tokens"].push_back({{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}});
  const Tokenizer bos_only = Tokenizer::from_json(j.dump(), "t");
  EXPECT_EQ(bos_only.document_token(), bos_only.token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(bos_only.token_to_id("<|begin_of_text|>"), 256u + 1u);  // next id after the model's
}

TEST(Tokenizer, BatchIdsDoNotDependOnTheThreadCount) {
  const Tokenizer tok = tiny(Style::kLlama3);
  const auto docs = random_docs(500, 11);
  std::vector<std::string_view> views(docs.begin(), docs.end());
  std::vector<std::vector<TokenId>> serial;
  for (const auto& d : docs) serial.push_back(tok.encode(d));
  for (int threads : {1, 2, 3, 7, 16})
    EXPECT_EQ(tok.encode_batch(views, threads), serial) << threads;
  EXPECT_TRUE(tok.encode_batch({}, 4).empty());
}

// The cache itself: full at kMaxEntries words, it starts over with the next one, and what it
// returns is always what was inserted for that word. (A Session whose cache overflows gives
// `tokenizers`' ids: oracle_test.cc.)
TEST(WordCache, StartsOverWhenFullAndReturnsWhatWasInserted) {
  WordCache cache;
  const auto key = [](size_t i) { return "w" + std::to_string(i); };
  const auto ids = [](size_t i) {
    return std::vector<TokenId>{static_cast<TokenId>(i), static_cast<TokenId>(i % 7)};
  };
  for (size_t i = 0; i < WordCache::kMaxEntries; ++i) {
    const std::string k = key(i);
    cache.insert(k, WordCache::hash(k), ids(i));
  }
  ASSERT_EQ(cache.size(), WordCache::kMaxEntries);
  size_t wrong = 0;
  for (size_t i = 0; i < WordCache::kMaxEntries; i += 97) {
    const std::string k = key(i);
    const auto got = cache.find(k, WordCache::hash(k));
    wrong += std::vector<TokenId>(got.begin(), got.end()) != ids(i);
  }
  EXPECT_EQ(wrong, 0u);
  const std::string next = key(WordCache::kMaxEntries);
  cache.insert(next, WordCache::hash(next), ids(WordCache::kMaxEntries));
  EXPECT_EQ(cache.size(), 1u) << "a full cache starts over";
  EXPECT_TRUE(cache.find(key(0), WordCache::hash(key(0))).empty());
  const auto got = cache.find(next, WordCache::hash(next));
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.end()), ids(WordCache::kMaxEntries));
  // Words of kMaxWordBytes or more are not kept.
  const std::string long_word(WordCache::kMaxWordBytes, 'x');
  cache.insert(long_word, WordCache::hash(long_word), ids(3));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(Tokenizer, DescribesItself) {
  const std::string d = tiny(Style::kLlama3).describe();
  EXPECT_NE(d.find("byte-level BPE"), std::string::npos) << d;
  EXPECT_NE(d.find("Split (Llama 3 pattern) + ByteLevel"), std::string::npos) << d;
  EXPECT_NE(tiny(Style::kGpt2).describe().find("ByteLevel (GPT-2 pattern)"), std::string::npos);
}

TEST(Tokenizer, LongPathologicalDocumentsEncode) {
  const Tokenizer tok = tiny(Style::kLlama3);
  for (const std::string& s : {std::string(2'000'000, ' '), std::string(1'000'000, 'e'),
                               std::string(300'000, '9') + "x", std::string(200'000, '\xff')}) {
    const auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode_bytes(ids), repair_utf8(s));
  }
}

}  // namespace
}  // namespace bw::tokenizer
