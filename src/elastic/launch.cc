#include "elastic/launch.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/error.h"

namespace bw::elastic {

std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<HostEntry> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string host, slots;
    if (!(words >> host)) continue;
    HostEntry e;
    e.host = host;
    if (words >> slots) {
      std::string rest;
      long value = 0;  // checked before it narrows (slots=4294967297 must not wrap to 1)
      char* end = nullptr;
      if (slots.rfind("slots=", 0) == 0) value = std::strtol(slots.c_str() + 6, &end, 10);
      if (slots.rfind("slots=", 0) != 0 || *end != '\0' || value < 1 || value > 1024 ||
          (words >> rest)) {
        throw ConfigError(
            fmt::format("{}:{}: '{}' is not `host slots=g` (g in 1..1024), e.g. `worker-1 slots=8`",
                        path, number, line));
      }
      e.slots = static_cast<int>(value);
    }
    if (!seen.insert(host).second) {
      throw ConfigError(
          fmt::format("{}:{}: host '{}' is listed twice; list each host once", path, number, host));
    }
    if (!hosts.empty() && hosts.front().slots != e.slots) {
      throw ConfigError(fmt::format(
          "{}:{}: host '{}' has slots={} but '{}' has slots={}; every node of a run has the same "
          "number of devices",
          path, number, host, e.slots, hosts.front().host, hosts.front().slots));
    }
    hosts.push_back(e);
  }
  if (hosts.empty()) {
    throw ConfigError(fmt::format("hostfile {} lists no hosts (`host slots=g`, one a line)", path));
  }
  return hosts;
}

std::vector<std::string> Launcher::command(const HostEntry& host,
                                           const std::string& coordinator) const {
  std::vector<std::string> argv = shell_;
  for (const auto& a :
       {host.host, binary_, std::string("agent"), std::string("--coordinator"), coordinator,
        std::string("--node-name"), host.host, std::string("--devices"), std::to_string(host.slots),
        std::string("--token-stdin")}) {
    argv.push_back(a);
  }
  return argv;
}

void Launcher::start(const HostEntry& host, const std::string& coordinator,
                     const std::string& token) {
  auto argv_s = command(host, coordinator);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  BW_CHECK(pipe(fds) == 0, "pipe failed: {}", std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  BW_CHECK(pid >= 0, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    // Own process group: a terminal's Ctrl-C reaches the launcher only, which stops the agents.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[0], 0);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], argv.data());
    fprintf(stderr, "cannot run the remote shell '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[0]);
  const std::string line = token + "\n";
  signal(SIGPIPE, SIG_IGN);  // a shell that died at once: its exit is what the run sees
  if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    // The agent never registers; the coordinator's wait names the host.
  }
  children_.push_back({pid, fds[1]});
}

void Launcher::stop(double timeout_ms) {
  for (auto& c : children_) {
    if (c.input >= 0) close(c.input);
    c.input = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_ms));
  for (auto& c : children_) {
    if (c.pid < 0) continue;
    int status = 0;
    while (waitpid(c.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(-c.pid, SIGKILL);
        ::kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    c.pid = -1;
  }
  children_.clear();
}

}  // namespace bw::elastic
