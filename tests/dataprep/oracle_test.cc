// `data prepare` against an independent reference: oracle.py "shards" encodes the same documents
// with Hugging Face `tokenizers` (JSONL lines and text files, invalid UTF-8 as
// bytes.decode("utf-8", "replace")), puts the document token before each, and writes llm.c
// shards itself; every shard must be byte for byte the same. With GPT-2's pre-tokenizer (uint16
// shards) and Llama 3's with ids past 65535 (uint32 shards).
#include <gtest/gtest.h>

#include "dataprep/prepare.h"
#include "dataprep_util.h"
#include "oracle_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace bw::dataprep {
namespace {
using namespace testing;

TEST(DataPrepareOracle, ShardsEqualTheReferenceByteForByte) {
  std::string error;
  const std::string dir = bw::tokenizer::testing::oracle_dir(&error);
  if (dir.empty()) FAIL() << error;
  const auto docs = bw::tokenizer::testing::read_docs(dir + "/corpus.bin");
  ASSERT_GT(docs.size(), 1000u);
  // A JSONL file of the first 400 documents that are valid UTF-8, and 30 text files (invalid
  // UTF-8 among them).
  std::string jsonl;
  int in_jsonl = 0, text_files = 0, invalid = 0;
  std::vector<std::string> inputs;
  for (const std::string& d : docs) {
    const bool valid = bw::tokenizer::valid_utf8_prefix(d) == d.size();
    if (valid && in_jsonl < 400 && d.size() < 50'000) {
      jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
      ++in_jsonl;
    } else if (text_files < 30 && !d.empty() && d.size() < 50'000) {
      inputs.push_back(write(fmt::format("oracle_in/t{:02d}.txt", text_files++), d));
      invalid += !valid;
    }
  }
  ASSERT_GT(invalid, 3);
  inputs.insert(inputs.begin(), write("oracle_in/docs.jsonl", jsonl));
  for (const char* tok : {"gpt2.json", "llama3_wide.json"}) {
    const std::string tok_path = dir + "/" + tok;
    const auto t = bw::tokenizer::Tokenizer::from_file(tok_path);
    PrepareOptions o;
    o.tokenizer = tok_path;
    o.out_dir = scratch() + "/oracle_out_" + tok;
    o.inputs = inputs;
    o.val_docs = 25;
    o.shard_tokens = 40'000;
    o.threads = 2;
    o.name = "ref";
    const PrepareSummary s = prepare(o);
    EXPECT_EQ(s.token_bytes, std::string(tok) == "gpt2.json" ? 2 : 4);
    const std::string ref = scratch() + "/oracle_ref_" + tok;
    std::vector<std::string> args = {"shards", tok_path,
                                     ref,      std::to_string(o.shard_tokens),
                                     "25",     std::to_string(*t.document_token())};
    args.insert(args.end(), inputs.begin(), inputs.end());
    const std::string err = bw::tokenizer::testing::run_oracle(args);
    ASSERT_EQ(err, "") << err;
    const auto theirs = files_in(ref);
    std::vector<std::string> ours;
    for (const auto& f : files_in(o.out_dir))
      if (f != "tokenizer.json") ours.push_back(f);
    ASSERT_EQ(ours, theirs) << tok;
    ASSERT_GT(ours.size(), 2u);
    for (const auto& f : ours) {
      const std::string a = slurp(o.out_dir + "/" + f), b = slurp(ref + "/" + f);
      if (a == b) continue;
      size_t p = 0;
      while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
      ADD_FAILURE() << tok << " " << f << ": " << a.size() << " bytes here, " << b.size()
                    << " in the reference; first difference at byte " << p << " (token "
                    << (p < 1024 ? -1 : static_cast<long>((p - 1024) / s.token_bytes)) << ")";
    }
  }
}

}  // namespace
}  // namespace bw::dataprep
