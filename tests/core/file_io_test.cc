// Bounded reads refuse what is not a regular file (a directory, a FIFO, /dev/zero) and files over
// their limit, before reading; checked writes report a full device (/dev/full) and unwritable
// paths instead of succeeding; durable writes leave no .tmp behind.
#include "core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "../scratch.h"

namespace bw::io {
namespace {
namespace fs = std::filesystem;

std::string dir() {
  static const std::string d = [] {
    return bw::testing::process_scratch("bw_file_io").string();
  }();
  return d;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(FileIo, ReadsRegularFilesWithinTheLimit) {
  const std::string p = dir() + "/a.txt";
  std::ofstream(p) << "hello";
  EXPECT_EQ(read_file(p, 5, "test file"), "hello");
  EXPECT_EQ(require_regular_file(p, 5, "test file"), 5);
  const std::string m = error_of([&] { read_file(p, 4, "test file"); });
  EXPECT_NE(m.find("more than the limit of 4 B"), std::string::npos) << m;
  std::ofstream(dir() + "/empty.txt");
  EXPECT_EQ(read_file(dir() + "/empty.txt", 4, "test file"), "");
}

TEST(FileIo, RefusesDirectoriesDevicesAndFifosWithoutBlocking) {
  EXPECT_NE(error_of([] { read_file(dir(), 100, "profile"); }).find("is a directory"),
            std::string::npos);
  const std::string zero = error_of([] { read_file("/dev/zero", 100, "profile"); });
  EXPECT_NE(zero.find("character device"), std::string::npos) << zero;
  const std::string fifo = dir() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string m = error_of([&] { read_file(fifo, 100, "trace"); });
  EXPECT_NE(m.find("FIFO"), std::string::npos) << m;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(error_of([] { read_file("/no/such/file", 100, "trace"); }).find("No such file"),
            std::string::npos);
}

TEST(FileIo, WriteErrorsAreConfigErrors) {
  const std::string full = error_of([] { write_file("/dev/full", "x", "SVG"); });
  EXPECT_NE(full.find("No space left on device"), std::string::npos) << full;
  EXPECT_NE(full.find("/dev/full"), std::string::npos) << full;
  EXPECT_NE(error_of([] { write_file(dir(), "x", "SVG"); }).find("Is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([] { write_file("/no/such/dir/x.svg", "x", "SVG"); }).find("No such file"),
            std::string::npos);
  const std::string p = dir() + "/out.txt";
  write_file(p, "abc", "test");
  EXPECT_EQ(read_file(p, 10, "test"), "abc");
}

// Appending (metrics.jsonl on resume) keeps what was there; without append the file starts over;
// each appended write is checked like any other.
TEST(FileIo, AppendKeepsEarlierLinesAndChecksEachWrite) {
  const std::string p = dir() + "/metrics.jsonl";
  write_file(p, "line 1\n", "metrics file");
  {
    FileWriter out(p, "metrics file", /*append=*/true);
    out.write("line 2\n");
    out.close();
  }
  EXPECT_EQ(read_file(p, 100, "test"), "line 1\nline 2\n");
  {
    FileWriter out(p, "metrics file");
    out.write("fresh\n");
    out.close();
  }
  EXPECT_EQ(read_file(p, 100, "test"), "fresh\n");
  const std::string full = error_of([] {
    FileWriter out("/dev/full", "metrics file", /*append=*/true);
    out.write("x\n");
  });
  EXPECT_NE(full.find("cannot write metrics file '/dev/full': No space left on device"),
            std::string::npos)
      << full;
}

TEST(FileIo, DurableWritesReplaceWholeAndLeaveNoTmp) {
  const std::string p = dir() + "/durable.json";
  write_file_durably(p, "old", "test");
  write_file_durably(p, "new", "test");
  EXPECT_EQ(read_file(p, 10, "test"), "new");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  EXPECT_NE(error_of([] { write_file_durably("/no/such/dir/x", "x", "test"); }).find("x.tmp"),
            std::string::npos);
}

TEST(FileIo, WriteAtOverwritesInPlaceAndChecksTheWrite) {
  const std::string p = dir() + "/header.bin";
  FileWriter out(p, "shard");
  out.write("HHHHbody");
  out.write_at(0, "head", 4);
  out.write("!");  // appends after the body: write_at leaves the position alone
  out.close();
  EXPECT_EQ(read_file(p, 100, "shard"), "headbody!");
  FileWriter full("/dev/full", "shard");
  EXPECT_NE(error_of([&] { full.write_at(0, "x", 1); }).find("cannot write shard '/dev/full'"),
            std::string::npos);
}

}  // namespace
}  // namespace bw::io
