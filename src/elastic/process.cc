#include "elastic/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/check.h"

namespace bw::elastic {
namespace {

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::string& exe, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  BW_CHECK(pid >= 0, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    // Own process group, so kill() also ends anything the child started (a shell's children).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  ChildProcess child;
  child.pid_ = pid;
  return child;
}

std::optional<int> ChildProcess::poll() {
  if (status_ || pid_ < 0) return status_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = decode(status);
  return status_;
}

void ChildProcess::kill() {
  if (pid_ < 0 || poll()) return;
  ::kill(-pid_, SIGKILL);  // the child's process group (see spawn)
  ::kill(pid_, SIGKILL);
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_) status_ = decode(status);
}

int ChildProcess::wait_or_kill(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!poll()) kill();
  return status_.value_or(255);
}

std::string self_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace bw::elastic
