// The fork server (elastic/fork_server.h): its children run the entry function with their own
// command line and report their exit statuses; other programs and a changed environment are
// exec'd; the owner's death ends the server and its children; a lost server reports its children
// killed, and ChildProcess then execs again.
#include "elastic/fork_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../scratch.h"
#include "elastic/process.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// What a child of the server runs. Its arguments start like this test binary's own so that, were
// it exec'd instead, GoogleTest would list no test and exit 0:
//   <binary> --gtest_list_tests --gtest_filter=NoSuchTest.None cmd exit N       returns N
//   ... cmd sleep S      sleeps S seconds
//   ... cmd report FILE  writes its parent's pid, spawner_pid() and its command line
// It ends with _exit: the test process's state at the server's start (scratch folders removed at
// exit, GoogleTest's) is not the child's to tear down.
int entry(int argc, char** argv) {
  if (argc < 6 || std::string(argv[3]) != "cmd") _exit(99);
  const std::string what = argv[4];
  const char* arg = argv[5];
  if (what == "exit") _exit(std::atoi(arg));
  if (what == "sleep") {
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(arg)));
    _exit(0);
  }
  if (what == "report") {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    std::ofstream(arg, std::ios::binary) << getppid() << ' ' << spawner_pid() << '\n' << cmdline;
    _exit(0);
  }
  _exit(98);
}

std::vector<std::string> command(const std::string& what, const std::string& arg) {
  return {
      self_executable(), "--gtest_list_tests", "--gtest_filter=NoSuchTest.None", "cmd", what, arg};
}

std::optional<int> wait_for(const std::function<std::optional<int>()>& poll, int seconds = 10) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(seconds);
  while (steady_clock::now() < deadline) {
    if (auto status = poll()) return status;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return std::nullopt;
}

// Whether `pid` runs (neither gone nor a zombie).
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] != 'Z';
}

bool ends_within(pid_t pid, int seconds) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(seconds);
  while (running(pid) && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  return !running(pid);
}

TEST(ForkServer, ChildrenRunTheEntryWithTheirOwnCommandLineAndReportTheirExitStatus) {
  std::string why;
  auto server = ForkServer::start(entry, &why);
  ASSERT_TRUE(server) << why;
  ASSERT_TRUE(server->forks_in_process()) << "PR_SET_MM_MAP is refused on this kernel";
  for (int code : {0, 3, 42}) {
    const pid_t pid = server->spawn(self_executable(), command("exit", std::to_string(code)));
    EXPECT_EQ(wait_for([&] { return server->poll(pid); }), code);
  }
  const auto file = testing::process_scratch("bw_fork_server_test") / "report.txt";
  const auto args = command("report", file.string());
  const pid_t pid = server->spawn(self_executable(), args);
  ASSERT_EQ(wait_for([&] { return server->poll(pid); }), 0);
  std::ifstream in(file, std::ios::binary);
  pid_t parent = 0, spawner = 0;
  in >> parent >> spawner;
  in.get();
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(parent, server->server_pid()) << "not a child of the server";
  EXPECT_EQ(spawner, getpid()) << "spawner_pid() is not the server's owner";
  std::string expected;
  for (const auto& a : args) expected += a + '\0';
  EXPECT_EQ(cmdline, expected);
}

TEST(ForkServer, AnotherProgramOrAChangedEnvironmentIsExecdAndKillEndsAChild) {
  std::string why;
  auto server = ForkServer::start(entry, &why);
  ASSERT_TRUE(server) << why;
  pid_t pid = server->spawn("/bin/sh", {"sh", "-c", "exit 7"});
  EXPECT_EQ(wait_for([&] { return server->poll(pid); }), 7);
  // An exec'd child learns who spawned it from its environment (spawner_pid()).
  const auto file = testing::process_scratch("bw_fork_server_test") / "spawned_by.txt";
  pid = server->spawn("/bin/sh", {"sh", "-c", "echo \"$BW_SPAWNED_BY\" > " + file.string()});
  EXPECT_EQ(wait_for([&] { return server->poll(pid); }), 0);
  std::ifstream spawned_by(file);
  std::string line;
  std::getline(spawned_by, line);
  EXPECT_EQ(line, std::to_string(getpid()) + ":" + std::to_string(server->server_pid()));

  // Exec'd, this binary lists no test and exits 0 where the entry would have returned 3.
  ::setenv("BW_FORK_SERVER_TEST", "1", 1);
  pid = server->spawn(self_executable(), command("exit", "3"));
  const auto status = wait_for([&] { return server->poll(pid); }, 60);
  ::unsetenv("BW_FORK_SERVER_TEST");
  EXPECT_EQ(status, 0) << "a child whose environment differs from the server's was not exec'd";

  pid = server->spawn(self_executable(), command("sleep", "30"));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(server->poll(pid).has_value());
  const auto t0 = steady_clock::now();
  EXPECT_EQ(server->kill(pid), 128 + SIGKILL);
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_FALSE(running(pid));
}

TEST(ForkServer, TheOwnersDeathEndsTheServerAndItsChildren) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    ::close(fds[0]);
    std::string why;
    auto server = ForkServer::start(entry, &why);
    if (!server) _exit(1);
    const pid_t child = server->spawn(self_executable(), command("sleep", "60"));
    const std::string pids = std::to_string(server->server_pid()) + " " + std::to_string(child);
    if (write(fds[1], pids.data(), pids.size()) < 0) _exit(1);
    ::close(fds[1]);
    pause();  // until killed
    _exit(0);
  }
  ::close(fds[1]);
  char buf[64] = {};
  ASSERT_GT(read(fds[0], buf, sizeof buf - 1), 0);
  ::close(fds[0]);
  pid_t server = 0, child = 0;
  ASSERT_EQ(std::sscanf(buf, "%d %d", &server, &child), 2);
  EXPECT_TRUE(running(server));
  EXPECT_TRUE(running(child));
  ::kill(owner, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(owner, &status, 0), owner);
  EXPECT_TRUE(ends_within(server, 10)) << "the server outlived its owner";
  EXPECT_TRUE(ends_within(child, 10)) << "a child outlived the server's owner";
}

TEST(ForkServer, ALostServerReportsItsChildrenKilledAndChildProcessExecsAgain) {
  std::string why;
  auto server = ForkServer::start(entry, &why);
  ASSERT_TRUE(server) << why;
  const pid_t server_pid = server->server_pid();
  ForkServer::install(std::move(server));
  auto sleeper = ChildProcess::spawn(self_executable(), command("sleep", "60"));
  auto quick = ChildProcess::spawn(self_executable(), command("exit", "5"));
  EXPECT_EQ(wait_for([&] { return quick.poll(); }), 5);
  ::kill(server_pid, SIGKILL);
  EXPECT_EQ(wait_for([&] { return sleeper.poll(); }), 128 + SIGKILL);
  EXPECT_TRUE(ends_within(sleeper.pid(), 10)) << "a child outlived its server";
  auto after = ChildProcess::spawn("/bin/sh", {"sh", "-c", "exit 6"});
  EXPECT_EQ(after.wait_or_kill(std::chrono::seconds(10)), 6);
  ForkServer::install(nullptr);
}

}  // namespace
}  // namespace bw::elastic
