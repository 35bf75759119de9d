// The shards `data prepare` writes: each document's token then its ids, in input order, cut into
// shards of exactly shard_tokens (the last fewer) with llm.c headers, uint16 or uint32 by the
// vocabulary; the same bytes whatever the thread count; the validation split by count and by
// fraction; the tokenizer copied beside; a second run refused, or replacing with --overwrite.
#include "dataprep/prepare.h"

#include <gtest/gtest.h>

#include "dataprep/shard_writer.h"
#include "dataprep_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace bw::dataprep {
namespace {
using namespace testing;

struct Corpus {
  std::vector<std::string> inputs;
  std::vector<std::string> docs;  // the documents, in order, as the tokenizer sees them
};

// A JSONL file, a text file with invalid UTF-8 and a folder of both.
Corpus corpus(const std::string& tag) {
  Corpus c;
  std::string jsonl;
  for (int i = 0; i < 120; ++i) {
    std::string text = fmt::format(
        "Document {} says: {}", i,
        bw::tokenizer::repair_utf8(bw::tokenizer::testing::sample_text().substr(0, 20 + i * 7)));
    if (i % 17 == 0) text = "";  // an empty document is still a document
    jsonl += nlohmann::json{{"text", text}, {"id", i}}.dump() + "\n";
    if (i % 30 == 0) jsonl += "\n   \n";  // blank lines are skipped
    c.docs.push_back(text);
  }
  c.inputs.push_back(write(tag + "/a.jsonl", jsonl));
  const std::string raw = "caf\xC3\xA9 \xFF\xFE broken \xE2\x82 end";
  c.inputs.push_back(write(tag + "/b.txt", raw));
  c.docs.push_back(bw::tokenizer::repair_utf8(raw));
  write(tag + "/dir/2.txt", "second file of the folder");
  write(tag + "/dir/1.jsonl", "{\"text\": \"first\"}\n{\"text\": \"line two\"}");
  write(tag + "/dir/sub/0.txt", "in a sub-folder, after 1.jsonl and 2.txt? no: 'sub' > '2.txt'");
  write(tag + "/dir/.hidden.txt", "hidden");
  write(tag + "/dir/notes.md", "not an input");
  c.inputs.push_back(scratch() + "/" + tag + "/dir");
  for (const char* d : {"first", "line two", "second file of the folder",
                        "in a sub-folder, after 1.jsonl and 2.txt? no: 'sub' > '2.txt'"})
    c.docs.push_back(d);
  return c;
}

// The expected token stream of documents [from, to) that pass `keep`.
std::vector<uint32_t> stream(const bw::tokenizer::Tokenizer& tok,
                             const std::vector<std::string>& docs,
                             const std::function<bool(size_t)>& keep) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!keep(i)) continue;
    out.push_back(*tok.document_token());
    const auto ids = tok.encode(docs[i]);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::vector<uint32_t> concat(const std::vector<std::string>& shards, int64_t shard_tokens,
                             int version) {
  std::vector<uint32_t> out;
  for (size_t k = 0; k < shards.size(); ++k) {
    const Shard s = read_shard(shards[k]);
    EXPECT_EQ(s.version, version) << shards[k];
    if (k + 1 < shards.size()) EXPECT_EQ(static_cast<int64_t>(s.tokens.size()), shard_tokens);
    EXPECT_GE(s.tokens.size(), 1u);
    EXPECT_LE(static_cast<int64_t>(s.tokens.size()), shard_tokens);
    out.insert(out.end(), s.tokens.begin(), s.tokens.end());
  }
  return out;
}

PrepareOptions options(const Corpus& c, const std::string& tok, const std::string& out) {
  PrepareOptions o;
  o.tokenizer = tok;
  o.out_dir = scratch() + "/" + out;
  o.inputs = c.inputs;
  o.threads = 2;
  return o;
}

TEST(Prepare, ShardsHoldEachDocumentAfterItsTokenInOrder) {
  const Corpus c = corpus("order");
  for (const bool wide : {false, true}) {
    const std::string tok_path = tokenizer_file(false, wide);
    const auto tok = bw::tokenizer::Tokenizer::from_file(tok_path);
    const auto val = stream(tok, c.docs, [](size_t i) { return i < 5; });
    const auto train = stream(tok, c.docs, [](size_t i) { return i >= 5; });
    const auto n = static_cast<int64_t>(train.size());
    // Boundaries: the split in exactly one shard, one token short of it, three and a bit
    // shards, and shards larger than the split.
    for (const int64_t shard_tokens : {n, n - 1, n / 3, int64_t{1'000'000}}) {
      PrepareOptions o = options(c, tok_path, fmt::format("order_{}_{}", wide, shard_tokens));
      o.shard_tokens = shard_tokens;
      o.val_docs = 5;
      const PrepareSummary s = prepare(o);
      const int version = wide ? 2 : 1;
      EXPECT_EQ(s.token_bytes, wide ? 4 : 2);
      EXPECT_EQ(s.val.documents, 5);
      EXPECT_EQ(s.train.documents, static_cast<int64_t>(c.docs.size()) - 5);
      EXPECT_EQ(s.repaired_documents, 1);
      EXPECT_EQ(s.skipped_files, 1);  // notes.md
      EXPECT_EQ(concat(s.val.shards, shard_tokens, version), val) << shard_tokens;
      EXPECT_EQ(concat(s.train.shards, shard_tokens, version), train) << shard_tokens;
      EXPECT_EQ(s.val.tokens, static_cast<int64_t>(val.size()));
      EXPECT_EQ(static_cast<int64_t>(s.train.shards.size()), (n + shard_tokens - 1) / shard_tokens);
      EXPECT_EQ(fs::path(s.train.shards.front()).filename(), shard_name(s.name, "train", 0));
      EXPECT_EQ(slurp(o.out_dir + "/tokenizer.json"), slurp(tok_path));
      for (const auto& f : files_in(o.out_dir)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
    }
  }
}

TEST(Prepare, OneTokenShardsSplitDocumentsAnywhere) {
  const std::string tok_path = tokenizer_file();
  const auto tok = bw::tokenizer::Tokenizer::from_file(tok_path);
  PrepareOptions o;
  o.tokenizer = tok_path;
  o.out_dir = scratch() + "/one";
  o.inputs = {write("one.jsonl", "{\"text\": \"the quick\"}\n{\"text\": \"fox\"}\n")};
  o.shard_tokens = 1;
  const PrepareSummary s = prepare(o);
  const auto want = stream(tok, {"the quick", "fox"}, [](size_t) { return true; });
  EXPECT_EQ(concat(s.train.shards, 1, 1), want);
  EXPECT_EQ(s.train.shards.size(), want.size());
  EXPECT_EQ(fs::path(s.train.shards.back()).filename(),
            shard_name("one", "train", static_cast<int64_t>(want.size()) - 1));
}

TEST(Prepare, BytesDoNotDependOnTheThreadCount) {
  const Corpus c = corpus("threads");
  const std::string tok = tokenizer_file(true);
  std::vector<std::string> first;
  for (const int threads : {1, 2, 3, 8}) {
    PrepareOptions o = options(c, tok, fmt::format("threads_{}", threads));
    o.name = "t";
    o.threads = threads;
    o.shard_tokens = 333;
    o.val_fraction = 0.1;
    const PrepareSummary s = prepare(o);
    std::vector<std::string> bytes;
    for (const auto* split : {&s.val, &s.train})
      for (const auto& p : split->shards) bytes.push_back(slurp(p));
    if (first.empty()) {
      first = bytes;
      EXPECT_GT(first.size(), 2u);
    } else {
      EXPECT_EQ(bytes, first) << threads << " threads";
    }
  }
}

TEST(Prepare, ValidationFractionIsEvenlySpreadFromDocumentZero) {
  int64_t val = 0;
  for (int64_t i = 0; i < 1000; ++i) val += is_val_by_fraction(i, 0.01);
  EXPECT_EQ(val, 10);
  EXPECT_TRUE(is_val_by_fraction(0, 0.01));
  EXPECT_FALSE(is_val_by_fraction(1, 0.01));
  EXPECT_TRUE(is_val_by_fraction(100, 0.01));
  EXPECT_EQ(is_val_by_fraction(3, 0.5), false);
  EXPECT_EQ(is_val_by_fraction(2, 0.5), true);

  const Corpus c = corpus("fraction");
  const std::string tok_path = tokenizer_file();
  const auto tok = bw::tokenizer::Tokenizer::from_file(tok_path);
  PrepareOptions o = options(c, tok_path, "fraction");
  o.val_fraction = 0.25;
  const PrepareSummary s = prepare(o);
  const auto is_val = [](size_t i) { return is_val_by_fraction(static_cast<int64_t>(i), 0.25); };
  EXPECT_EQ(concat(s.val.shards, o.shard_tokens, 1), stream(tok, c.docs, is_val));
  EXPECT_EQ(concat(s.train.shards, o.shard_tokens, 1),
            stream(tok, c.docs, [&](size_t i) { return !is_val(i); }));
}

TEST(Prepare, NoValidationSplitUnlessAsked) {
  const Corpus c = corpus("noval");
  PrepareOptions o = options(c, tokenizer_file(), "noval");
  const PrepareSummary s = prepare(o);
  EXPECT_EQ(s.val.documents, 0);
  EXPECT_TRUE(s.val.shards.empty());
  EXPECT_EQ(s.name, "noval");  // the folder's name
  EXPECT_EQ(s.train.documents, static_cast<int64_t>(c.docs.size()));
}

TEST(Prepare, ASecondRunNeedsOverwriteWhichRemovesStaleShards) {
  const Corpus c = corpus("again");
  PrepareOptions o = options(c, tokenizer_file(), "again_out");
  o.shard_tokens = 50;
  const PrepareSummary first = prepare(o);
  const std::string m = error_of([&] { prepare(o); });
  EXPECT_NE(m.find("already holds " + std::to_string(first.train.shards.size()) +
                   " shards of 'again_out'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--overwrite"), std::string::npos) << m;
  o.overwrite = true;
  o.shard_tokens = 100000;  // one shard now: the others must go
  const PrepareSummary second = prepare(o);
  EXPECT_EQ(second.train.shards.size(), 1u);
  EXPECT_EQ(files_in(o.out_dir),
            (std::vector<std::string>{"again_out_train_000000.bin", "tokenizer.json"}));
  // Another name in the same folder is no conflict.
  o.overwrite = false;
  o.name = "other";
  EXPECT_NO_THROW(prepare(o));
}

TEST(Prepare, ALlama3StyleTokenizerStartsDocumentsWithBos) {
  const Corpus c = corpus("bos");
  const std::string tok_path = tokenizer_file(true);
  const auto tok = bw::tokenizer::Tokenizer::from_file(tok_path);
  ASSERT_EQ(tok.document_token(), tok.token_to_id("<|begin_of_text|>"));
  const PrepareSummary s = prepare(options(c, tok_path, "bos"));
  EXPECT_NE(s.document_token.find("<|begin_of_text|>"), std::string::npos);
  const Shard first = read_shard(s.train.shards.front());
  EXPECT_EQ(first.tokens.front(), *tok.document_token());
}

}  // namespace
}  // namespace bw::dataprep
