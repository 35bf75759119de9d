// Bad input to `data prepare` is one ConfigError naming the file and line or the option, and it
// leaves nothing behind: shards already completed by the run are removed with the temporary one.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "dataprep/prepare.h"
#include "dataprep_util.h"

namespace bw::dataprep {
namespace {
using namespace testing;

PrepareOptions base(const std::string& out) {
  PrepareOptions o;
  o.tokenizer = tokenizer_file();
  o.out_dir = scratch() + "/" + out;
  o.inputs = {write("good.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n")};
  o.threads = 2;
  return o;
}

void expect_error(const PrepareOptions& o, const std::string& phrase) {
  const std::string m = error_of([&] { prepare(o); });
  EXPECT_NE(m.find(phrase), std::string::npos) << "want '" << phrase << "' in: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const auto& f : files_in(o.out_dir))
    EXPECT_TRUE(f.find(".bin") == std::string::npos) << "left behind: " << f;
}

TEST(PrepareErrors, BadJsonlLinesNameTheFileAndLine) {
  PrepareOptions o = base("badjson");
  o.inputs = {write("bad1.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"ok\"\n")};
  expect_error(o, "bad1.jsonl:3: not valid JSON");
  o.inputs = {write("bad2.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n")};
  expect_error(o, "bad2.jsonl:2: no string field \"text\"");
  o.inputs = {write("bad3.jsonl", "{\"text\": 42}\n")};
  expect_error(o, "bad3.jsonl:1: no string field \"text\"");
  o.inputs = {write("bad4.jsonl", "[\"text\"]\n")};
  expect_error(o, "bad4.jsonl:1: no string field");
  o.inputs = {write("bad5.jsonl", "{\"text\": \"caf\xC3\"}\n")};  // invalid UTF-8 in JSON
  expect_error(o, "bad5.jsonl:1: not valid JSON");
}

TEST(PrepareErrors, AnErrorAfterShardsWereWrittenRemovesThem) {
  PrepareOptions o = base("late");
  std::string text;
  for (int i = 0; i < 20000; ++i)
    text += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  text += "not json\n";
  o.inputs = {write("late.jsonl", text)};
  o.shard_tokens = 5000;  // many shards complete before the bad line
  expect_error(o, "late.jsonl:20001: not valid JSON");
  EXPECT_TRUE(files_in(o.out_dir).empty()) << files_in(o.out_dir).size() << " files left";
}

TEST(PrepareErrors, OptionsAreChecked) {
  PrepareOptions o = base("options");
  o.val_docs = 1;
  o.val_fraction = 0.5;
  expect_error(o, "give --val-docs or --val-fraction, not both");
  o = base("options");
  o.val_docs = 0;
  expect_error(o, "--val-docs must be >= 1, got 0");
  o = base("options");
  for (double f : {0.0, 1.0, -0.5, 2.0}) {
    o.val_fraction = f;
    expect_error(o, "--val-fraction must be in (0, 1)");
  }
  o = base("options");
  o.shard_tokens = 0;
  expect_error(o, "--shard-tokens must be in [1, 2147483647]");
  o.shard_tokens = int64_t{1} << 31;
  expect_error(o, "--shard-tokens must be in [1, 2147483647]");
  o = base("options");
  o.threads = -1;
  expect_error(o, "--threads must be in [1, 1024]");
  o = base("options");
  o.name = "../escape";
  expect_error(o, "--name '../escape' must be letters");
  o = base("options");
  o.val_docs = 2;  // both documents
  expect_error(o, "the validation split takes all 2 documents");
}

TEST(PrepareErrors, InputsAndOutputsAreChecked) {
  PrepareOptions o = base("io");
  o.inputs = {scratch() + "/missing.jsonl"};
  expect_error(o, "cannot open input '" + scratch() + "/missing.jsonl': No such file");
  o.inputs = {"/dev/zero"};
  expect_error(o, "input '/dev/zero' is a character device");
  const std::string fifo = scratch() + "/fifo.jsonl";
  mkfifo(fifo.c_str(), 0600);
  o.inputs = {fifo};
  expect_error(o, "is a FIFO");
  const std::string huge = scratch() + "/huge.txt";  // sparse: 1 GiB + 1 byte, no disk used
  std::ofstream(huge).close();
  std::filesystem::resize_file(huge, (uint64_t{1} << 30) + 1);
  o.inputs = {huge};
  expect_error(o, "more than the limit of 1.0 GiB for one document");
  o.inputs = {write("empty.jsonl", "\n\n")};
  expect_error(o, "the inputs hold no document");
  write("nodocs/readme.md", "x");
  o.inputs = {scratch() + "/nodocs"};
  expect_error(o, "input folder '" + scratch() + "/nodocs' has no .txt or .jsonl files (1 other");
  o = base("io");
  o.out_dir = write("a_file", "x");
  expect_error(o, "output folder '" + o.out_dir + "' exists and is not a folder");
  o.out_dir = scratch() + "/a_file/below";
  expect_error(o, "cannot create output folder");
  o = base("io");
  o.tokenizer = scratch() + "/none.json";
  expect_error(o, "none.json");
  o = base("io");
  auto j = bw::tokenizer::testing::tiny_tokenizer(bw::tokenizer::testing::Style::kGpt2, "ab", 2);
  j["added_tokens"] = nlohmann::json::array();
  o.tokenizer = write("nodoc.json", j.dump());
  expect_error(o, "has no document token");
  j["model"]["type"] = "WordPiece";
  o.tokenizer = write("wordpiece.json", j.dump());
  expect_error(o, "the model WordPiece is not supported");
}

}  // namespace
}  // namespace bw::dataprep
