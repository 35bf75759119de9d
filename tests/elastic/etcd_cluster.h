// A real etcd cluster on loopback for the control store tests and bench: n members (etcd from
// PATH, Debian's etcd-server package), each on two free ports, data folders in a fresh folder on
// tmpfs (/dev/shm) when there is one, else under the given temp folder (the test's). Each member
// runs in its own process group and dies with the test process (PR_SET_PDEATHSIG); the destructor
// kills the groups and removes the folder. Heartbeat 50 ms and election timeout 250 ms, so a lost
// leader is replaced in well under a second and a 1 s lease is honoured (etcd's minimum TTL is 1.5
// election timeouts).
//
// etcd missing: find_etcd() is empty; under CI=true the tests fail on it (BW_REQUIRE_ETCD below),
// elsewhere they skip with one line.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "elastic/control_store_etcd.h"

// In a GoogleTest body: fails the test under CI=true (where scripts/setup.sh installs etcd),
// skips it elsewhere.
#define BW_REQUIRE_ETCD()                                                                     \
  do {                                                                                        \
    if (!::bw::elastic::etcd_test::find_etcd()) {                                             \
      const char* ci = std::getenv("CI");                                                     \
      if (ci && std::string(ci) == "true") {                                                  \
        FAIL() << "etcd is not installed (CI=true): scripts/setup.sh installs etcd-server";   \
      }                                                                                       \
      GTEST_SKIP() << "etcd not installed (apt-get install etcd-server): etcd cases skipped"; \
    }                                                                                         \
  } while (0)

namespace bw::elastic::etcd_test {

inline std::optional<std::string> find_etcd() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    const std::string exe = dirs.substr(pos, end - pos) + "/etcd";
    if (::access(exe.c_str(), X_OK) == 0) return exe;
    pos = end + 1;
  }
  return std::nullopt;
}

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("no free loopback port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

class EtcdCluster {
 public:
  explicit EtcdCluster(int members, const std::string& temp_dir,
                       std::chrono::milliseconds start_deadline = std::chrono::seconds(30)) {
    const auto exe = find_etcd();
    if (!exe) throw std::runtime_error("etcd is not installed");
    namespace fs = std::filesystem;
    std::string base = fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0
                           ? std::string("/dev/shm")
                           : temp_dir;
    std::string templ = base + "/bw-etcd-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed under " + base);
    dir_ = templ;
    // Free ports are free when chosen, not when etcd binds them (tests run in parallel): a
    // member that exits at once is started again on other ports.
    const Deadline deadline = ControlClock::now() + start_deadline;
    for (int attempt = 0;; ++attempt) {
      start(*exe, members, attempt);
      try {
        wait_healthy(deadline);
        return;
      } catch (const std::exception&) {
        for (size_t i = 0; i < pids_.size(); ++i) kill(static_cast<int>(i));
        if (attempt == 2 || ControlClock::now() >= deadline) {
          std::error_code ec;
          std::filesystem::remove_all(dir_, ec);
          throw;
        }
      }
    }
  }
  ~EtcdCluster() {
    for (size_t i = 0; i < pids_.size(); ++i) kill(static_cast<int>(i));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(pids_.size()); }
  std::string url() const {
    std::string out = "etcd://";
    for (size_t i = 0; i < client_.size(); ++i) {
      out += fmt::format("{}127.0.0.1:{}", i ? "," : "", client_[i]);
    }
    return out;
  }
  std::string member_url(int i) const { return fmt::format("etcd://127.0.0.1:{}", client_[i]); }
  // SIGKILL of the member's process group, and reaped.
  void kill(int i) {
    if (pids_[i] <= 0) return;
    ::kill(-pids_[i], SIGKILL);
    ::waitpid(pids_[i], nullptr, 0);
    pids_[i] = -1;
  }
  std::string log_of(int i) const { return fmt::format("{}/m{}.log", dir_, i); }
  // Starts a killed member again, on its ports and with its data (it rejoins the cluster).
  void restart(int i) {
    if (pids_[i] > 0) return;
    pids_[i] = spawn(member_args(i), log_of(i) + ".again");
  }
  // The member that leads the cluster now, as its own status says (etcdctl endpoint status);
  // -1 when no live member says it leads.
  int leader() const {
    for (int i = 0; i < size(); ++i) {
      if (pids_[i] <= 0) continue;
      const std::string cmd = fmt::format(
          "etcdctl --endpoints=http://127.0.0.1:{} --command-timeout=2s endpoint status -w json "
          "2>/dev/null",
          client_[i]);
      FILE* p = ::popen(cmd.c_str(), "r");
      if (!p) continue;
      std::string out;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
      ::pclose(p);
      const auto doc = nlohmann::json::parse(out, nullptr, false);
      if (!doc.is_array() || doc.empty() || !doc[0].contains("Status")) continue;
      const auto& st = doc[0]["Status"];
      if (st.contains("leader") && st.contains("header") && st["header"].contains("member_id") &&
          st["leader"] == st["header"]["member_id"]) {
        return i;
      }
    }
    return -1;
  }

 private:
  void start(const std::string& exe, int members, int attempt) {
    exe_ = exe;
    attempt_ = attempt;
    client_.clear();
    peer_.clear();
    pids_.clear();
    initial_.clear();
    for (int i = 0; i < members; ++i) {
      client_.push_back(free_port());
      peer_.push_back(free_port());
      initial_ += fmt::format("{}m{}=http://127.0.0.1:{}", i ? "," : "", i, peer_[i]);
    }
    for (int i = 0; i < members; ++i) pids_.push_back(spawn(member_args(i), log_of(i)));
  }

  std::vector<std::string> member_args(int i) const {
    return {exe_,
            "--name",
            fmt::format("m{}", i),
            "--data-dir",
            fmt::format("{}/a{}m{}", dir_, attempt_, i),
            "--listen-client-urls",
            fmt::format("http://127.0.0.1:{}", client_[i]),
            "--advertise-client-urls",
            fmt::format("http://127.0.0.1:{}", client_[i]),
            "--listen-peer-urls",
            fmt::format("http://127.0.0.1:{}", peer_[i]),
            "--initial-advertise-peer-urls",
            fmt::format("http://127.0.0.1:{}", peer_[i]),
            "--initial-cluster",
            initial_,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            fmt::format("bw-test-{}", ::getpid()),
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "250",
            "--logger",
            "zap",
            "--log-level",
            "error"};
  }

  static pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    return pid;
  }

  // Every member serves a linearizable read (it has a leader and a quorum).
  void wait_healthy(Deadline deadline) {
    for (int i = 0; i < size(); ++i) {
      for (;;) {
        for (int m = 0; m < size(); ++m) {
          if (::waitpid(pids_[m], nullptr, WNOHANG) == pids_[m]) {
            pids_[m] = -1;
            throw std::runtime_error(
                fmt::format("etcd member {} exited at start ({})", m, log_of(m)));
          }
        }
        try {
          auto store =
              EtcdControlStore::connect(parse_control_url(member_url(i)), "health", deadline);
          store->revision(deadline);
          break;
        } catch (const std::exception& e) {
          if (ControlClock::now() >= deadline) {
            throw std::runtime_error(fmt::format("etcd member {} not healthy: {}", i, e.what()));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    }
  }

  std::string dir_;
  std::vector<int> client_, peer_;
  std::string exe_, initial_;
  int attempt_ = 0;
  std::vector<pid_t> pids_;
};

}  // namespace bw::elastic::etcd_test
