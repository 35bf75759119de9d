// Reading the inputs: folders recursively in name order with hidden entries skipped and other
// files counted; JSONL lines numbered from 1 with blank lines skipped, CRLF endings and a last
// line without a newline; lines longer than one read; batches bounded by bytes and documents.
#include "dataprep/inputs.h"

#include <gtest/gtest.h>

#include "dataprep_util.h"

namespace bw::dataprep {
namespace {
using namespace testing;

std::vector<RawDocument> all(const InputList& in, size_t max_bytes = 1 << 20,
                             size_t max_docs = 1000) {
  DocumentReader r(in);
  std::vector<RawDocument> out, batch;
  while (r.next_batch(batch, max_bytes, max_docs)) {
    EXPECT_LE(batch.size(), max_docs);
    for (auto& d : batch) out.push_back(std::move(d));
  }
  return out;
}

TEST(Inputs, FoldersAreReadRecursivelyInNameOrder) {
  write("tree/b.txt", "b");
  write("tree/a/2.jsonl", "{\"text\": \"a2\"}\n");
  write("tree/a/10.txt", "a10");
  write("tree/a.txt", "a.txt");
  write("tree/.git/x.txt", "hidden folder");
  write("tree/.x.txt", "hidden file");
  write("tree/c.json", "skipped");
  write("tree/d.jsonl.gz", "skipped");
  const InputList in = list_inputs({scratch() + "/tree"});
  std::vector<std::string> names;
  for (const auto& f : in.files)
    names.push_back(fs::path(f.path).lexically_relative(scratch()).string());
  EXPECT_EQ(names, (std::vector<std::string>{"tree/a/10.txt", "tree/a/2.jsonl", "tree/a.txt",
                                             "tree/b.txt"}));
  EXPECT_EQ(in.skipped_files, 2);
  EXPECT_TRUE(in.files[1].jsonl);
  EXPECT_FALSE(in.files[0].jsonl);
}

TEST(Inputs, JsonlLinesAreNumberedAndBlankOnesSkipped) {
  const std::string p = write("lines.jsonl",
                              "{\"text\": \"one\"}\r\n\n  \t\n{\"text\": \"four\"}\n"
                              "{\"text\": \"five, no newline\"}");
  const auto docs = all(list_inputs({p}));
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].line, 1);
  EXPECT_EQ(docs[0].bytes, "{\"text\": \"one\"}\r");
  EXPECT_EQ(docs[1].line, 4);
  EXPECT_EQ(docs[2].line, 5);
  EXPECT_EQ(docs[2].bytes, "{\"text\": \"five, no newline\"}");
  EXPECT_TRUE(docs[2].jsonl);
}

TEST(Inputs, LinesLongerThanOneReadAndBatchLimits) {
  const std::string big(9'500'000, 'x');
  std::string text;
  for (int i = 0; i < 50; ++i) text += "{\"text\": \"" + std::to_string(i) + "\"}\n";
  text += "{\"text\": \"" + big + "\"}\n{\"text\": \"after\"}\n";
  const std::string p = write("long.jsonl", text);
  const std::string t = write("plain.txt", "a text file is one document\nwith its newlines\n");
  write("empty.txt", "");
  const InputList in = list_inputs({p, scratch() + "/empty.txt", t});
  const auto docs = all(in, 100, 7);  // small batches: by bytes and by count
  ASSERT_EQ(docs.size(), 53u);
  EXPECT_EQ(docs[50].bytes.size(), big.size() + 12);
  EXPECT_EQ(docs[50].line, 51);
  EXPECT_EQ(docs[51].bytes, "{\"text\": \"after\"}");
  EXPECT_EQ(docs[52].bytes, "a text file is one document\nwith its newlines\n");
  EXPECT_EQ(docs[52].line, 0);
  EXPECT_EQ(docs[52].file, 2u);
  DocumentReader r(in);
  std::vector<RawDocument> batch;
  ASSERT_TRUE(r.next_batch(batch, 1, 1000));  // the byte limit stops after the first document
  EXPECT_EQ(batch.size(), 1u);
}

}  // namespace
}  // namespace bw::dataprep
