#include "elastic/local_etcd.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "elastic/control_store_etcd.h"

namespace bw::elastic {

std::optional<std::string> find_etcd() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
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

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  BW_CHECK(ok, "no free loopback port");
  return ntohs(a.sin_port);
}

LocalEtcd::LocalEtcd(int members, const std::string& temp_dir,
                     std::chrono::milliseconds start_deadline) {
  const auto exe = find_etcd();
  if (!exe) {
    throw ConfigError(
        "etcd is not installed (no etcd on PATH): install Debian's etcd-server package "
        "(scripts/setup.sh does), or give an etcd of your own as etcd://HOST:PORT[,...]");
  }
  exe_ = *exe;
  namespace fs = std::filesystem;
  const std::string base = fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0
                               ? std::string("/dev/shm")
                               : temp_dir;
  std::string templ = base + "/bw-etcd-XXXXXX";
  if (!::mkdtemp(templ.data())) {
    throw ConfigError(fmt::format("cannot create a folder for etcd's data under {}", base));
  }
  dir_ = templ;
  const Deadline deadline = ControlClock::now() + start_deadline;
  for (int attempt = 0;; ++attempt) {
    start(members, attempt);
    try {
      wait_healthy(deadline);
      return;
    } catch (const CommError&) {
      for (int i = 0; i < size(); ++i) kill(i);
      if (attempt == 2 || ControlClock::now() >= deadline) {
        std::error_code ec;
        fs::remove_all(dir_, ec);
        throw;
      }
    }
  }
}

LocalEtcd::~LocalEtcd() {
  for (int i = 0; i < size(); ++i) kill(i);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LocalEtcd::url() const {
  std::string out = "etcd://";
  for (size_t i = 0; i < client_.size(); ++i) {
    out += fmt::format("{}127.0.0.1:{}", i ? "," : "", client_[i]);
  }
  return out;
}

std::string LocalEtcd::member_url(int i) const {
  return fmt::format("etcd://127.0.0.1:{}", client_[i]);
}

std::string LocalEtcd::log_of(int i) const { return fmt::format("{}/m{}.log", dir_, i); }

void LocalEtcd::kill(int i) { pids_[i].kill(); }

void LocalEtcd::restart(int i) {
  if (!pids_[i].poll()) return;
  pids_[i] = ChildProcess::spawn(exe_, member_args(i), log_of(i) + ".again");
}

int LocalEtcd::leader() {
  for (int i = 0; i < size(); ++i) {
    if (pids_[i].poll()) continue;
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

void LocalEtcd::start(int members, int attempt) {
  attempt_ = attempt;
  client_.clear();
  peer_.clear();
  pids_.clear();
  initial_.clear();
  for (int i = 0; i < members; ++i) {
    client_.push_back(free_loopback_port());
    peer_.push_back(free_loopback_port());
    initial_ += fmt::format("{}m{}=http://127.0.0.1:{}", i ? "," : "", i, peer_[i]);
  }
  for (int i = 0; i < members; ++i) {
    pids_.push_back(ChildProcess::spawn(exe_, member_args(i), log_of(i)));
  }
}

std::vector<std::string> etcd_member_args(const std::string& exe, const std::string& name,
                                          const std::string& data_dir, const std::string& client,
                                          const std::string& peer, const std::string& initial,
                                          const std::string& token) {
  return {exe,
          "--name",
          name,
          "--data-dir",
          data_dir,
          "--listen-client-urls",
          client,
          "--advertise-client-urls",
          client,
          "--listen-peer-urls",
          peer,
          "--initial-advertise-peer-urls",
          peer,
          "--initial-cluster",
          initial,
          "--initial-cluster-state",
          "new",
          "--initial-cluster-token",
          token,
          "--heartbeat-interval",
          "50",
          "--election-timeout",
          "250",
          "--logger",
          "zap",
          "--log-level",
          "error"};
}

std::vector<std::string> LocalEtcd::member_args(int i) const {
  return etcd_member_args(exe_, fmt::format("m{}", i), fmt::format("{}/a{}m{}", dir_, attempt_, i),
                          fmt::format("http://127.0.0.1:{}", client_[i]),
                          fmt::format("http://127.0.0.1:{}", peer_[i]), initial_,
                          fmt::format("bw-{}-{}", ::getpid(), fmt::ptr(this)));
}

void LocalEtcd::wait_healthy(Deadline deadline) {
  for (int i = 0; i < size(); ++i) {
    for (;;) {
      for (int m = 0; m < size(); ++m) {
        if (pids_[m].poll()) {
          throw CommError(
              fmt::format("etcd member {} exited at start (its log: {})", m, log_of(m)));
        }
      }
      try {
        auto store =
            EtcdControlStore::connect(parse_control_url(member_url(i)), "health", deadline);
        store->revision(deadline);
        break;
      } catch (const std::exception& e) {
        if (ControlClock::now() >= deadline) {
          throw CommError(fmt::format("etcd member {} did not come up ({}; its log: {})", i,
                                      e.what(), log_of(i)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
}

}  // namespace bw::elastic
