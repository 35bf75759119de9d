// `breakwater data prepare` as a user runs it: a summary table (or JSON) on success; bad input
// is exit status 2 with one `error:` line; and a run killed with SIGKILL at any moment leaves
// only whole shards (each header agrees with its size), at most one .tmp beside them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "dataprep_util.h"

namespace bw::dataprep {
namespace {
using namespace testing;
namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = "timeout -s KILL 120 '" BW_BINARY "' " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

std::string corpus_jsonl(const std::string& name, int docs) {
  std::string text;
  for (int i = 0; i < docs; ++i)
    text += nlohmann::json{{"text", fmt::format("{} {}", i, bw::tokenizer::testing::sample_text())}}
                .dump() +
            "\n";
  return write(name, text);
}

TEST(DataPrepareCli, PrintsASummaryTableOrJson) {
  const std::string tok = tokenizer_file();
  const std::string in = corpus_jsonl("cli.jsonl", 300);
  Result r =
      run(fmt::format("data prepare --tokenizer {} --out {}/cli_out --val-docs 10 "
                      "--shard-tokens 5000 --threads 2 {}",
                      tok, scratch(), in));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* want : {"split", "documents", "tokens", "shards", "val ", "train", "total",
                           "cli_out_train_000000.bin", "uint16 tokens (llm.c .bin version 1)"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in:\n" << r.out;
  r = run(fmt::format("data prepare --tokenizer {} --out {}/cli_json --val-fraction 0.1 --json {}",
                      tok, scratch(), in));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["val"]["documents"].get<int>() + j["train"]["documents"].get<int>(), 300);
  EXPECT_EQ(j["version"], 1);
  // The top-level help lists the subcommand with its description, and `data --help` its verb.
  const Result help = run("--help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("Training data: text to token shards"), std::string::npos) << help.out;
  const Result data_help = run("data --help");
  EXPECT_EQ(data_help.status, 0) << data_help.out;
  EXPECT_NE(data_help.out.find("prepare"), std::string::npos) << data_help.out;
}

TEST(DataPrepareCli, BadInputIsOneErrorLineAndExitTwo) {
  const std::string tok = tokenizer_file();
  const std::string in = corpus_jsonl("cli_bad.jsonl", 3);
  const std::string bad = write("cli_bad_line.jsonl", "{\"text\": \"a\"}\n{oops}\n");
  const std::string out = scratch() + "/cli_bad_out";
  struct Case {
    std::string args, phrase;
  };
  const std::vector<Case> cases = {
      {fmt::format("--tokenizer {} --out {} {}/nope.jsonl", tok, out, scratch()),
       "cannot open input"},
      {fmt::format("--tokenizer {} --out {} {}", tok, out, bad),
       "cli_bad_line.jsonl:2: not valid JSON"},
      {fmt::format("--tokenizer {} --out {} --val-docs 1 --val-fraction 0.1 {}", tok, out, in),
       "give --val-docs or --val-fraction, not both"},
      {fmt::format("--tokenizer {} --out {} --val-docs 0 {}", tok, out, in),
       "--val-docs must be in [1,"},
      {fmt::format("--tokenizer {} --out {} --val-docs -3 {}", tok, out, in), "--val-docs"},
      {fmt::format("--tokenizer {} --out {} --shard-tokens 0 {}", tok, out, in),
       "--shard-tokens must be in [1, 2147483647]"},
      {fmt::format("--tokenizer {} --out {} --threads 0 {}", tok, out, in),
       "--threads must be in [1, 1024]"},
      {fmt::format("--tokenizer {} --out {} --val-fraction nan {}", tok, out, in),
       "--val-fraction must be a number"},
      {fmt::format("--tokenizer {} --out /dev/full {}", tok, in), "is not a folder"},
      {fmt::format("--tokenizer {} --out {}/x {}", tok, in, in), "cannot create output folder"},
      {fmt::format("--tokenizer {} --out {} /dev/zero", tok, out), "character device"},
      {fmt::format("--tokenizer {} --out {} {}", in, out, in), "is not valid JSON"},
  };
  for (const Case& c : cases) {
    const Result r = run("data prepare " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.phrase), std::string::npos) << c.args << "\n" << r.out;
    if (r.out.rfind("error: ", 0) == 0) {
      EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line:\n" << r.out;
    }
  }
  EXPECT_TRUE(files_in(out).empty());
}

// Every shard present is whole; returns how many there are.
int check_whole(const std::string& dir) {
  int whole = 0, tmp = 0;
  for (const auto& f : files_in(dir)) {
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".tmp") == 0) {
      ++tmp;
      continue;
    }
    if (f.find(".bin") == std::string::npos) continue;
    const Shard s = read_shard(dir + "/" + f);  // checks the header against the size
    EXPECT_GE(s.tokens.size(), 1u) << f;
    EXPECT_LE(s.tokens.size(), 20000u) << f;
    ++whole;
  }
  EXPECT_LE(tmp, 2);  // one per split at most
  return whole;
}

// Whole shards and .tmp files in `dir` now (the folder may not exist yet).
std::pair<int, int> count_shards(const std::string& dir) {
  int whole = 0, tmp = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.ends_with(".bin.tmp")) ++tmp;
    if (f.ends_with(".bin")) ++whole;
  }
  return {whole, tmp};
}

TEST(DataPrepareCli, AKilledRunLeavesOnlyWholeShards) {
  const std::string tok = tokenizer_file();
  const std::string in = corpus_jsonl("kill.jsonl", 30000);  // 216 shards of 20 000 tokens
  // The kill lands while the run is writing: after `after` shards are whole and while the next
  // one is open as a .tmp (checked before the kill), with the run still going (it dies of the
  // signal, not of its own exit), and short of the shards a whole run writes (checked after).
  for (const int after : {1, 30, 70}) {
    const std::string out = fmt::format("{}/kill_{}", scratch(), after);
    fs::remove_all(out);  // a fresh folder (repeated runs of the test share the scratch folder)
    const pid_t pid = fork();
    if (pid == 0) {
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execl(BW_BINARY, BW_BINARY, "data", "prepare", "--tokenizer", tok.c_str(), "--out",
            out.c_str(), "--shard-tokens", "20000", "--threads", "2", in.c_str(), nullptr);
      _exit(127);
    }
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::pair<int, int> seen{0, 0};
    int status = 0;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
      seen = count_shards(out);
      if (seen.first >= after && seen.second > 0) break;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (!exited) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the run was not killed mid-write: it "
        << (WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                              : std::string("was still writing at the deadline"))
        << " with " << seen.first << " whole shards and " << seen.second << " .tmp";
    EXPECT_GE(seen.first, after);
    EXPECT_GE(seen.second, 1) << "no shard was being written when the kill was sent";
    const int whole = check_whole(out);
    EXPECT_GE(whole, after);
    // A new run over the debris: --overwrite replaces it and removes the stale .tmp files.
    const Result r =
        run(fmt::format("data prepare --tokenizer {} --out {} --shard-tokens 20000 "
                        "--overwrite --json {}",
                        tok, out, in));
    if (r.status == 2 && r.out.find("already") != std::string::npos) ADD_FAILURE() << r.out;
    ASSERT_EQ(r.status, 0) << r.out;
    for (const auto& f : files_in(out)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
    const int total = check_whole(out);
    EXPECT_LT(whole, total) << "the killed run had already written every shard";
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(total, static_cast<int>(j["train"]["shards"].size() + j["val"]["shards"].size()))
        << r.out;
  }
}

}  // namespace
}  // namespace bw::dataprep
