// Test hosts made of Linux network namespaces (docs/multihost.md "Test hosts"): one namespace per
// host, each with an interface eth0 whose veth peer sits on a bridge in a "switch" namespace, so
// nothing is added to the machine's own network. Addresses come from 10.X.Y.0/24 with X.Y picked
// from the process id, names carry the process id too, so parallel test processes never clash;
// namespaces left by a test process that died (SIGKILL) are removed by the next one. The
// destructor removes everything, also when a test fails (and a SIGINT/SIGTERM handler does the
// same before the process ends).
//
// available() says why the hosts cannot be made (not root, no `ip netns`), for GTEST_SKIP.
//
// Thread-safety: use one NetnsHosts from one thread.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace bw::testing {

// Runs a command line through the shell; returns its exit status (output to `log` when given).
inline int shell(const std::string& command, const std::string& log = "") {
  const std::string full =
      log.empty() ? command + " >/dev/null 2>&1" : command + " >>" + log + " 2>&1";
  const int rc = std::system(full.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

inline std::vector<std::string>& live_namespaces() {
  static std::vector<std::string> names;
  return names;
}

extern "C" inline void netns_cleanup_on_signal(int sig) {
  for (const auto& n : live_namespaces()) shell("ip netns del " + n);
  signal(sig, SIG_DFL);
  raise(sig);
}

class NetnsHosts {
 public:
  // Why hosts cannot be made here, or nullopt when they can.
  static std::optional<std::string> unavailable() {
    if (geteuid() != 0) return "network-namespace tests need root (they create veth pairs)";
    if (shell("ip netns list") != 0) return "`ip netns` is missing (install iproute2)";
    const std::string probe = fmt::format("bwprobe{}", getpid());
    if (shell("ip netns add " + probe) != 0) {
      return "`ip netns add` is not permitted here (needs CAP_SYS_ADMIN and CAP_NET_ADMIN)";
    }
    const bool veth = shell(fmt::format("ip link add eth0 netns {} type veth peer name p0 netns {}",
                                        probe, probe)) == 0;
    shell("ip netns del " + probe);
    if (!veth) return "veth pairs cannot be created here (no veth support)";
    return std::nullopt;
  }

  // `hosts` namespaces h0..h{hosts-1}; host k has address address(k).
  explicit NetnsHosts(int hosts) : prefix_(fmt::format("bwt{}", getpid())) {
    remove_stale();
    const int pid = getpid();
    subnet_ = fmt::format("10.{}.{}", 100 + pid % 100, (pid / 100) % 250);
    static std::once_flag once;
    std::call_once(once, [] {
      signal(SIGINT, netns_cleanup_on_signal);
      signal(SIGTERM, netns_cleanup_on_signal);
    });
    add_namespace(sw());
    ok_ = ok_ && shell(fmt::format("ip -n {} link add br0 type bridge && ip -n {} link set br0 up",
                                   sw(), sw())) == 0;
    for (int k = 0; k < hosts && ok_; ++k) {
      add_namespace(host(k));
      ok_ = ok_ &&
            shell(fmt::format("ip link add eth0 netns {h} type veth peer name p{k} netns {s} && "
                              "ip -n {s} link set p{k} master br0 up && "
                              "ip -n {h} addr add {a}/24 dev eth0 && ip -n {h} link set eth0 up "
                              "&& ip -n {h} link set lo up",
                              fmt::arg("h", host(k)), fmt::arg("s", sw()), fmt::arg("k", k),
                              fmt::arg("a", address(k)))) == 0;
    }
    hosts_ = hosts;
  }
  ~NetnsHosts() {
    for (const auto& n : made_) shell("ip netns del " + n);
    auto& live = live_namespaces();
    for (const auto& n : made_) live.erase(std::remove(live.begin(), live.end(), n), live.end());
  }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool ok() const { return ok_; }
  int size() const { return hosts_; }
  std::string host(int k) const { return fmt::format("{}h{}", prefix_, k); }
  std::string address(int k) const { return fmt::format("{}.{}", subnet_, k + 1); }
  // Cuts (or restores) host k's link at the switch, as a pulled cable: the host's own interface
  // stays configured, its packets are lost.
  bool set_link(int k, bool up) {
    return shell(fmt::format("ip -n {} link set p{} {}", sw(), k, up ? "up" : "down")) == 0;
  }
  // Puts the root qdisc `qdisc` (a tc spec, e.g. "tbf rate 1mbit burst 1600 latency 1s" or
  // "netem delay 5ms") on both directions of host k's link.
  bool shape(int k, const std::string& qdisc) {
    return shell(fmt::format("ip -n {} link set eth0 txqueuelen 1000 && ip netns exec {} tc qdisc "
                             "replace dev eth0 root {}",
                             host(k), host(k), qdisc)) == 0 &&
           shell(fmt::format("ip netns exec {} tc qdisc replace dev p{} root {}", sw(), k,
                             qdisc)) == 0;
  }

 private:
  std::string sw() const { return prefix_ + "sw"; }
  void add_namespace(const std::string& name) {
    if (shell("ip netns add " + name) != 0) {
      ok_ = false;
      return;
    }
    made_.push_back(name);
    live_namespaces().push_back(name);
  }
  // Namespaces of test processes that no longer exist.
  static void remove_stale() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
      const auto name = e.path().filename().string();
      if (name.rfind("bwt", 0) != 0) continue;
      const auto digits = name.substr(3, name.find_first_not_of("0123456789", 3) - 3);
      if (digits.empty()) continue;
      const pid_t pid = std::stoi(digits);
      if (pid != getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) shell("ip netns del " + name);
    }
  }

  std::string prefix_, subnet_;
  std::vector<std::string> made_;
  int hosts_ = 0;
  bool ok_ = true;
};

// A process in a namespace (`ip netns exec`), output to a log file, killed with its process group
// when the object goes (and by the kernel when the test process dies).
class NsProcess {
 public:
  NsProcess(const std::string& netns, std::vector<std::string> args, const std::string& log,
            const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<std::string> full = {"ip", "netns", "exec", netns};
    full.insert(full.end(), args.begin(), args.end());
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : full) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("ip", argv.data());
      _exit(127);
    }
  }
  ~NsProcess() { kill(); }
  NsProcess(const NsProcess&) = delete;
  NsProcess& operator=(const NsProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::optional<int> poll() {
    if (status_ || pid_ < 0) return status_;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return status_;
  }
  // The exit status, or -1 when it did not end within `deadline_s` (then it is killed).
  int wait(double deadline_s) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000));
    while (!poll()) {
      if (std::chrono::steady_clock::now() > end) {
        kill();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return *status_;
  }
  void kill() {
    if (pid_ < 0 || poll()) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    status_ = 128 + SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace bw::testing
