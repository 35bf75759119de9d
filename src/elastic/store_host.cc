#include "elastic/store_host.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "elastic/net.h"

namespace bw::elastic {
namespace {

// The address the calling thread's wildcard binds are redirected to (while hosting a store).
struct Redirect {
  bool v4 = false;
  in_addr addr4{};
  in6_addr addr6{};
};
thread_local const Redirect* t_redirect = nullptr;

bool is_wildcard(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (addr->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  }
  return false;
}

std::string numeric(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      inet_ntop(AF_INET, &a6.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
    }
  }
  return buf;
}

}  // namespace

std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) continue;
    int p = -1;
    if (ss.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in&>(ss).sin_port);
    if (ss.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6&>(ss).sin6_port);
    if (p == port) out.push_back(numeric(ss));
  }
  return out;
}

c10::intrusive_ptr<c10d::TCPStore> host_store(const std::string& address, int port,
                                              std::chrono::milliseconds timeout) {
  const std::string want = numeric_address(address, "the store's listen address");
  Redirect redirect;
  bool wildcard = false;
  if (inet_pton(AF_INET, want.c_str(), &redirect.addr4) == 1) {
    redirect.v4 = true;
    wildcard = redirect.addr4.s_addr == htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET6, want.c_str(), &redirect.addr6) == 1) {
    wildcard = IN6_IS_ADDR_UNSPECIFIED(&redirect.addr6);
  } else {
    throw ConfigError(fmt::format("'{}' is not an IP address", want));
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  c10::intrusive_ptr<c10d::TCPStore> store;
  t_redirect = wildcard ? nullptr : &redirect;
  try {
    // The server binds in this thread; a client connection to it needs a reachable host name.
    store = c10::make_intrusive<c10d::TCPStore>(want, opts);
  } catch (const std::exception& e) {
    t_redirect = nullptr;
    throw ConfigError(fmt::format(
        "cannot host the store on {}:{}: {}; listen on an address of this host and a free port "
        "(0 = any)",
        want, port, e.what()));
  }
  t_redirect = nullptr;
  const int bound = store->getPort();
  const auto addrs = listening_addresses(bound);
  std::vector<std::string> wrong;
  for (const auto& a : addrs) {
    if (wildcard ? false : a != want) wrong.push_back(a);
  }
  if (addrs.empty() || !wrong.empty()) {
    throw ConfigError(fmt::format(
        "the store was asked to listen on {} only but listens on {} (port {}); this LibTorch "
        "cannot be restricted, so it refuses to run rather than listen everywhere",
        want, addrs.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(addrs, ", ")),
        bound));
  }
  return store;
}

}  // namespace bw::elastic

// The process's bind(): libtorch calls it for the TCPStore server's sockets (through its PLT, so
// the executable's definition wins over libc's). Outside host_store() it is libc's bind.
extern "C" int bind(int fd, const struct sockaddr* addr, socklen_t len) {
  using Bind = int (*)(int, const struct sockaddr*, socklen_t);
  static const Bind real = reinterpret_cast<Bind>(dlsym(RTLD_NEXT, "bind"));
  const auto* r = bw::elastic::t_redirect;
  if (r == nullptr || addr == nullptr || !bw::elastic::is_wildcard(addr)) {
    return real(fd, addr, len);
  }
  if (addr->sa_family == AF_INET) {
    if (!r->v4) {
      errno = EADDRNOTAVAIL;  // an IPv6 address cannot be bound to an IPv4 socket: next family
      return -1;
    }
    sockaddr_in a = *reinterpret_cast<const sockaddr_in*>(addr);
    a.sin_addr = r->addr4;
    return real(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  }
  sockaddr_in6 a = *reinterpret_cast<const sockaddr_in6*>(addr);
  if (r->v4) {  // an IPv4 address on a dual-stack socket: its v4-mapped form
    std::memset(&a.sin6_addr, 0, sizeof(a.sin6_addr));
    a.sin6_addr.s6_addr[10] = 0xff;
    a.sin6_addr.s6_addr[11] = 0xff;
    std::memcpy(&a.sin6_addr.s6_addr[12], &r->addr4, 4);
  } else {
    a.sin6_addr = r->addr6;
  }
  return real(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
}
