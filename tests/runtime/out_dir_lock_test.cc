// One run per out_dir: a second lock on a held directory is refused naming the holder's pid, a
// lock left by a dead process is taken over, and unusable out_dirs are bad input before anything
// is created.
#include "runtime/out_dir_lock.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "../scratch.h"

namespace bw::runtime {
namespace {
namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  auto p = bw::testing::process_scratch("bw_lock") / name;
  fs::remove_all(p);
  return p.string();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// A child that takes the lock, says so through a pipe, and waits to be killed.
pid_t hold_in_child(const std::string& dir) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    try {
      auto lock = OutDirLock::acquire(dir);
      (void)!write(fds[1], "k", 1);
      pause();
    } catch (...) {
    }
    _exit(1);
  }
  close(fds[1]);
  char c = 0;
  EXPECT_EQ(read(fds[0], &c, 1), 1);
  close(fds[0]);
  return pid;
}

TEST(OutDirLock, SecondRunIsRefusedNamingTheFirstAndADeadOneIsTakenOver) {
  const std::string dir = scratch("shared") + "/run";
  const pid_t holder = hold_in_child(dir);
  EXPECT_EQ(OutDirLock::holder(dir), holder);
  const std::string m = error_of([&] { OutDirLock::acquire(dir); });
  EXPECT_NE(m.find(fmt::format("in use by another run (pid {})", holder)), std::string::npos)
      << m;
  EXPECT_NE(m.find("train.out_dir"), std::string::npos) << m;
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  // The .lock file still names the dead pid; the kernel's lock went with the process.
  EXPECT_EQ(OutDirLock::holder(dir), -1);
  auto lock = OutDirLock::acquire(dir);
  EXPECT_EQ(OutDirLock::holder(dir), getpid());
  std::ifstream in(lock.path());
  pid_t recorded = 0;
  in >> recorded;
  EXPECT_EQ(recorded, getpid());
}

// Runs racing for one out_dir, each taking the lock, holding it a moment and letting it go, over
// and over: every refusal names the pid of one of the racing runs, never "unknown" (the holder's
// pid not written yet) and never a pid that is not racing (a dead holder's, not yet replaced).
TEST(OutDirLock, EveryRefusalNamesARacingHolder) {
  const std::string dir = scratch("race");
  constexpr int kRunners = 4;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::set<pid_t> runners;
  for (int r = 0; r < kRunners; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
      while (std::chrono::steady_clock::now() < end) {
        try {
          auto lock = OutDirLock::acquire(dir);
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        } catch (const ConfigError& e) {
          const std::string m = e.what();
          const auto at = m.find("(pid ");
          const std::string named =
              at == std::string::npos ? "?" : m.substr(at + 5, m.find(')', at) - at - 5);
          const std::string line = named + "\n";
          (void)!write(fds[1], line.data(), line.size());
        }
      }
      _exit(0);
    }
    runners.insert(pid);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(fds[0]);
  for (pid_t pid : runners) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::istringstream lines(text);
  int refusals = 0, bad = 0;
  for (std::string named; std::getline(lines, named);) {
    ++refusals;
    const bool racing = !named.empty() && named.size() < 10 &&
                        named.find_first_not_of("0123456789") == std::string::npos &&
                        runners.count(static_cast<pid_t>(std::stol(named))) > 0;
    if (!racing && ++bad <= 5) ADD_FAILURE() << "a refusal named pid '" << named << "'";
  }
  EXPECT_EQ(bad, 0) << "of " << refusals << " refusals";
  EXPECT_GT(refusals, 100) << "the runs hardly raced";
  // Only the lock file is left, not the runs' own files.
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), ".lock") << "left behind: " << e.path();
}

TEST(OutDirLock, ReleasedWhenDestroyed) {
  const std::string dir = scratch("release");
  { auto lock = OutDirLock::acquire(dir); }
  auto again = OutDirLock::acquire(dir);
  auto moved = std::move(again);
  EXPECT_EQ(OutDirLock::holder(dir), getpid());
}

TEST(OutDirLock, UnusableOutDirsAreBadInput) {
  const std::string base = scratch("unusable");
  fs::create_directories(base);
  std::ofstream(base + "/file") << "x";
  EXPECT_NE(error_of([&] { check_out_dir_usable(base + "/file"); }).find("not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_out_dir_usable(base + "/file/sub"); }).find("not a directory"),
            std::string::npos);
  check_out_dir_usable(base + "/new/deeper");  // creatable
  EXPECT_FALSE(fs::exists(base + "/new"));     // and nothing created
  if (geteuid() != 0) {  // root may write anywhere
    fs::create_directories(base + "/ro");
    fs::permissions(base + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(error_of([&] { check_out_dir_usable(base + "/ro/x"); }).find("not writable"),
              std::string::npos);
    fs::permissions(base + "/ro", fs::perms::owner_all);
  }
  EXPECT_NE(error_of([] { check_out_dir_usable("/dev/null/x"); }).find("not a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace bw::runtime
