#include "elastic/failover_store.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "elastic/control_store.h"
#include "elastic/keys.h"
#include "elastic/messages.h"
#include "elastic/net.h"
#include "runtime/log.h"

namespace bw::elastic {

std::optional<StoreAt> find_leader_store(ControlStore& control, int64_t after) {
  const auto call = [] { return deadline_in(std::chrono::milliseconds(1000)); };
  try {
    const auto lead = control.leader(keys::leader(), call());
    if (!lead || lead->epoch <= after) return std::nullopt;
    const auto inst = control.get(keys::instance(), call());
    if (!inst) return std::nullopt;
    const auto record = decode_instance(inst->value, keys::instance());
    const auto kv = control.get(fmt::format("i{}/{}", record.epoch, keys::leader_store()), call());
    if (!kv || kv->mod_revision < lead->epoch) return std::nullopt;  // not published yet
    const HostPort hp = parse_host_port(kv->value, "the leader's store address");
    return StoreAt{hp.host, hp.port, lead->epoch};
  } catch (const ControlError&) {
    return std::nullopt;  // no quorum now
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

StoreAt locate_leader_store(ControlStore& control, int64_t after,
                            std::chrono::milliseconds timeout) {
  using namespace std::chrono;
  const auto until = steady_clock::now() + timeout;
  for (;;) {
    if (auto at = find_leader_store(control, after)) return *at;
    if (steady_clock::now() >= until) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  throw CommError(fmt::format(
      "no coordinator led the run within the leaderless timeout of {:.1f} s after epoch {} ({})",
      timeout.count() / 1000.0, after, control.describe()));
}

LeaderFollower::LeaderFollower(std::shared_ptr<ControlStore> control, StoreAt first,
                               std::chrono::milliseconds leaderless)
    : control_(std::move(control)), leaderless_(leaderless), latest_(std::move(first)) {
  watcher_ = std::thread([this] { watch(); });
}

StoreAt LeaderFollower::current() {
  std::lock_guard lk(mu_);
  return latest_;
}

StoreAt LeaderFollower::after(int64_t epoch) {
  std::lock_guard lk(mu_);
  if (latest_.epoch <= epoch) latest_ = locate_leader_store(*control_, epoch, leaderless_);
  return latest_;
}

LeaderFollower::~LeaderFollower() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void LeaderFollower::watch() {
  using std::chrono::milliseconds;
  constexpr milliseconds kPeriod(250);
  while (!stop_) {
    for (milliseconds t(0); t < kPeriod && !stop_; t += milliseconds(10)) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    StoreAt old;
    {
      std::lock_guard lk(mu_);
      old = latest_;
    }
    const auto found = find_leader_store(*control_, old.epoch);
    if (!found) continue;
    {
      std::lock_guard lk(mu_);
      if (found->epoch > latest_.epoch) latest_ = *found;
    }
    const int cut = cut_connections_to(old.host, old.port);
    if (cut > 0) {
      runtime::log(runtime::LogLevel::kInfo,
                   "a coordinator took the run over (epoch {}): cut {} connection(s) to the old "
                   "store at {}:{}",
                   found->epoch, cut, old.host, old.port);
    }
  }
}

int cut_connections_to(const std::string& host, int port) {
  // The addresses `host` names, as IPv4 or IPv6 bytes.
  std::vector<std::pair<int, std::array<uint8_t, 16>>> want;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return 0;
  for (auto* a = found; a; a = a->ai_next) {
    std::array<uint8_t, 16> b{};
    if (a->ai_family == AF_INET) {
      std::memcpy(b.data(), &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, 4);
      want.emplace_back(AF_INET, b);
    } else if (a->ai_family == AF_INET6) {
      std::memcpy(b.data(), &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, 16);
      want.emplace_back(AF_INET6, b);
    }
  }
  freeaddrinfo(found);
  int cut = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    std::array<uint8_t, 16> b{};
    int family = peer.ss_family;
    int peer_port = 0;
    if (family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
      std::memcpy(b.data(), &in->sin_addr, 4);
      peer_port = ntohs(in->sin_port);
    } else if (family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
      peer_port = ntohs(in6->sin6_port);
      if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {  // an IPv4 peer on a dual-stack socket
        family = AF_INET;
        std::memcpy(b.data(), reinterpret_cast<const uint8_t*>(&in6->sin6_addr) + 12, 4);
      } else {
        std::memcpy(b.data(), &in6->sin6_addr, 16);
      }
    } else {
      continue;
    }
    if (peer_port != port) continue;
    for (const auto& [f, bytes] : want) {
      if (f == family && std::memcmp(bytes.data(), b.data(), f == AF_INET ? 4 : 16) == 0) {
        if (shutdown(fd, SHUT_RDWR) == 0) ++cut;
        break;
      }
    }
  }
  return cut;
}

std::optional<StoreAt> LeaderFollower::newer(int64_t epoch) {
  std::lock_guard lk(mu_);
  if (latest_.epoch <= epoch) {
    auto found = find_leader_store(*control_, epoch);
    if (!found) return std::nullopt;
    latest_ = *found;
  }
  return latest_;
}

FailoverStore::FailoverStore(std::shared_ptr<LeaderFollower> follower,
                             std::chrono::milliseconds timeout)
    : c10d::Store(timeout), follower_(std::move(follower)), at_(follower_->current()) {
  for (;;) {
    try {
      connect();
      return;
    } catch (const c10::DistError&) {
      at_ = follower_->after(at_.epoch);  // that leader has gone already
    }
  }
}

void FailoverStore::connect() {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(at_.port);
  opts.isServer = false;
  opts.waitWorkers = false;
  // A store that does not answer at once has gone: connecting is not retried for the whole
  // timeout of the calls.
  opts.timeout = std::min(timeout_, std::chrono::milliseconds(2000));
  inner_ = c10::make_intrusive<c10d::TCPStore>(at_.host, opts);
  inner_->setTimeout(timeout_);
}

template <class F>
auto FailoverStore::call(F&& f) {
  std::lock_guard lk(mu_);
  for (;;) {
    try {
      return f(*inner_);
    } catch (const c10::DistNetworkError& e) {
      // The store went (with its coordinator): follow the leadership to the next one.
      const std::string what = e.what();
      runtime::log(runtime::LogLevel::kWarn,
                   "the coordinator's store at {}:{} went ({}); waiting for the coordinator that "
                   "takes the run over",
                   at_.host, at_.port, what.substr(0, what.find('\n')));
      for (;;) {
        at_ = follower_->after(at_.epoch);
        try {
          connect();
          if (resend_) resend_(*inner_);
          break;
        } catch (const c10::DistError&) {
          // That leader went too before we reached it: the next one.
        }
      }
      runtime::log(runtime::LogLevel::kInfo, "reconnected to the store of epoch {} at {}:{}",
                   at_.epoch, at_.host, at_.port);
    } catch (const c10::DistError&) {
      // Timed out: a coordinator paused or cut off may have been replaced; call again on the new
      // one's store. Otherwise the timeout is the caller's, on a fresh connection (a timed-out
      // one is out of step with its server).
      const auto next = follower_->newer(at_.epoch);
      if (next) at_ = *next;
      try {
        connect();
        if (next && resend_) resend_(*inner_);
      } catch (const c10::DistError&) {
        if (!next) throw;
        continue;  // the new one went already: the network path above finds the next
      }
      if (!next) throw;
      runtime::log(runtime::LogLevel::kInfo, "moved to the store of epoch {} at {}:{}", at_.epoch,
                   at_.host, at_.port);
    }
  }
}

c10::intrusive_ptr<c10d::Store> FailoverStore::clone() {
  return c10::make_intrusive<FailoverStore>(follower_, timeout_);
}
void FailoverStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  // c10d's set expects no answer: sent to a store that has just gone, it is lost without an
  // error. The check after it is a round trip that fails there, so the set is made again on the
  // next leader's store.
  call([&](c10d::Store& s) {
    s.set(key, value);
    s.check({key});
    return 0;
  });
}
std::vector<uint8_t> FailoverStore::compareSet(const std::string& key,
                                               const std::vector<uint8_t>& expected,
                                               const std::vector<uint8_t>& desired) {
  return call([&](c10d::Store& s) { return s.compareSet(key, expected, desired); });
}
void FailoverStore::wait_for(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  using namespace std::chrono;
  const auto until = steady_clock::now() + timeout;
  for (;;) {
    const auto left = duration_cast<milliseconds>(until - steady_clock::now());
    try {
      const auto round = std::clamp(left, milliseconds(1), milliseconds(1000));
      call([&](c10d::Store& s) {
        s.wait(keys, round);
        return 0;
      });
      return;
    } catch (const c10::DistNetworkError&) {
      throw;  // call() follows the leadership; this one is past the leaderless timeout
    } catch (const c10::DistError&) {
      if (steady_clock::now() >= until) throw;
    }
    // A round timed out: a newer leader's store, else this one again on a fresh connection.
    std::lock_guard lk(mu_);
    for (;;) {
      auto next = follower_->newer(at_.epoch);
      if (next) at_ = *next;
      try {
        connect();
        if (next && resend_) resend_(*inner_);
        break;
      } catch (const c10::DistError&) {
        if (steady_clock::now() >= until) throw;
        std::this_thread::sleep_for(milliseconds(100));
      }
    }
  }
}

std::vector<uint8_t> FailoverStore::get(const std::string& key) {
  wait_for({key}, timeout_);
  return call([&](c10d::Store& s) { return s.get(key); });
}
int64_t FailoverStore::add(const std::string& key, int64_t value) {
  return call([&](c10d::Store& s) { return s.add(key, value); });
}
bool FailoverStore::deleteKey(const std::string& key) {
  return call([&](c10d::Store& s) { return s.deleteKey(key); });
}
bool FailoverStore::check(const std::vector<std::string>& keys) {
  return call([&](c10d::Store& s) { return s.check(keys); });
}
int64_t FailoverStore::getNumKeys() {
  return call([&](c10d::Store& s) { return s.getNumKeys(); });
}
void FailoverStore::wait(const std::vector<std::string>& keys) { wait_for(keys, timeout_); }
void FailoverStore::wait(const std::vector<std::string>& keys,
                         const std::chrono::milliseconds& timeout) {
  wait_for(keys, timeout);
}
void FailoverStore::setTimeout(const std::chrono::milliseconds& timeout) {
  std::lock_guard lk(mu_);
  c10d::Store::setTimeout(timeout);
  inner_->setTimeout(timeout);
}

}  // namespace bw::elastic
