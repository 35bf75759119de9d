// Runs the breakwater binary as a child process with a deadline, for the multi-process tests.
// The child gets its own process group; on timeout the whole group is killed (workers also die
// with their coordinator through PR_SET_PDEATHSIG), so a failing test never leaves processes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../scratch.h"

namespace bw::testing {

struct CliResult {
  int status = -1;  // exit code; 128 + signal when killed; -1 on timeout
  bool timed_out = false;
  std::string output;  // stdout and stderr together
  pid_t pid = -1;
};

// Whether the tests' oracles (transformers, tokenizers: scripts/requirements-test.txt) must be
// present: in CI, which sets CI=true and installs them, a test that cannot run its oracle fails;
// elsewhere it skips with one line (BW_SKIP_WITHOUT_ORACLE).
inline bool oracle_required() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string(ci) != "0" && std::string(ci) != "false";
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A key for results cached on disk across test processes (reference runs): changes whenever the
// launcher `binary`, the breakwater-torch beside it or this test binary is rebuilt, so a rebuilt
// library never meets results of the old one.
inline std::string build_stamp(const std::string& binary) {
  namespace fs = std::filesystem;
  std::string stamp = binary;
  const fs::path torch_binary = fs::path(binary).parent_path() / "breakwater-torch";
  for (const fs::path& p : {fs::path(binary), torch_binary, fs::read_symlink("/proc/self/exe")}) {
    std::error_code ec;
    const auto t = fs::last_write_time(p, ec);
    stamp += ":" + std::to_string(ec ? 0 : t.time_since_epoch().count());
  }
  return stamp;
}

// A run that many cases compare with, made once per build and shared on disk by every process
// of the test binaries (CTest runs each case in its own process). Returns the folder
// <temporary folder>/<cache>_<hash of build_stamp(binary)>/<name>. When no earlier process made
// it, `make(folder)` runs into the emptied folder under that name's lock, and returning true marks
// it made; a failed run is not kept, so the next case makes it again and reports the failure.
// Returns "" with a test failure when another process held the lock for `wait_s`.
inline std::string shared_run(const std::string& cache, const std::string& binary,
                              const std::string& name,
                              const std::function<bool(const std::string&)>& make,
                              int wait_s = 240) {
  namespace fs = std::filesystem;
  const auto shared = fs::temp_directory_path() /
                      (cache + "_" + std::to_string(std::hash<std::string>{}(build_stamp(binary))));
  fs::create_directories(shared);
  const int lock = ::open((shared / (name + ".lock")).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0) {
    ADD_FAILURE() << "cannot open " << (shared / (name + ".lock"));
    return "";
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  while (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "another process held " << (shared / (name + ".lock")) << " for " << wait_s
                    << " s";
      ::close(lock);
      return "";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto folder = shared / name;
  if (!fs::exists(shared / (name + ".done"))) {
    fs::remove_all(folder);
    if (make(folder.string())) std::ofstream(shared / (name + ".done")) << "ok\n";
  }
  ::close(lock);  // releases the lock
  return folder.string();
}

// Starts the CLI; `on_start` (optional) runs in the test process while the child runs and may
// return early. Waits at most `deadline_s`.
template <typename OnStart>
CliResult run_cli(const std::vector<std::string>& args, const std::string& log_path,
                  double deadline_s, OnStart on_start) {
  std::vector<std::string> full = {BW_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  CliResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(BW_BINARY, argv.data());
    _exit(127);
  }
  result.pid = pid;
  on_start(pid);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(deadline_s * 1000));
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.output = read_text(log_path);
  return result;
}

inline CliResult run_cli(const std::vector<std::string>& args, const std::string& log_path,
                         double deadline_s) {
  return run_cli(args, log_path, deadline_s, [](pid_t) {});
}

}  // namespace bw::testing

// In a test body: fails in CI (the oracle must be installed there), else skips; `why` is streamed.
#define BW_SKIP_WITHOUT_ORACLE(why)                                                          \
  do {                                                                                       \
    if (::bw::testing::oracle_required()) {                                                  \
      FAIL() << why << " (CI is set: install scripts/requirements-test.txt, as setup.sh does)"; \
    } else {                                                                                 \
      GTEST_SKIP() << why;                                                                   \
    }                                                                                        \
  } while (0)
