#include "elastic/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "elastic/fork_server.h"
#include "runtime/log.h"

namespace bw::elastic {
namespace {

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace

void prepare_spawned_child(pid_t parent, const std::string& output) {
  // Own process group, so kill() also ends anything the child started (a shell's children).
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl
  if (!output.empty()) {
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    ::close(fd);
  }
}

ChildProcess ChildProcess::spawn(const std::string& exe, const std::vector<std::string>& args,
                                 const std::string& output) {
  if (ForkServer* server = ForkServer::installed()) {
    try {
      ChildProcess child;
      child.pid_ = server->spawn(exe, args, output);
      child.server_ = server;
      return child;
    } catch (const ForkServer::ServerLost&) {
      static std::once_flag once;
      std::call_once(once, [&] {
        runtime::log(runtime::LogLevel::kWarn,
                     "the fork server (pid {}) is gone: children are exec'd from now on, each "
                     "paying LibTorch's start-up",
                     server->server_pid());
      });
    }
  }
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  BW_CHECK(pid >= 0, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    prepare_spawned_child(parent, output);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  ChildProcess child;
  child.pid_ = pid;
  return child;
}

std::optional<int> ChildProcess::poll() {
  if (status_ || pid_ < 0) return status_;
  if (server_ != nullptr) return status_ = server_->poll(pid_);
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = decode(status);
  return status_;
}

void ChildProcess::kill() {
  if (pid_ < 0 || poll()) return;
  if (server_ != nullptr) {
    status_ = server_->kill(pid_);
    return;
  }
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

std::vector<unsigned long long> self_stat_fields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  // Field 2 (the name) may hold spaces and parentheses: the fields after it follow the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<unsigned long long> fields(3);  // fields[3] is the state (a letter, read as 0)
  std::string word;
  while (rest >> word) fields.push_back(std::strtoull(word.c_str(), nullptr, 10));
  return fields;
}

double process_age_ms() {
  // Field 22, starttime, counts clock ticks since boot.
  const auto fields = self_stat_fields();
  if (fields.size() <= 22) return NAN;
  const unsigned long long start_ticks = fields[22];
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return NAN;
  const double age_ms = (static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9) * 1000 -
                        static_cast<double>(start_ticks) * 1000 / static_cast<double>(hz);
  return age_ms >= 0 ? age_ms : NAN;
}

namespace {
double g_main_entered_ms = NAN;
}

void note_main_entered() { g_main_entered_ms = process_age_ms(); }
double main_entered_ms() { return g_main_entered_ms; }

}  // namespace bw::elastic
