#include "elastic/store_host.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "elastic/net.h"

namespace bw::elastic {
namespace {

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
  sockaddr_storage ss{};
  socklen_t len = 0;
  bool wildcard = false;
  auto& a4 = reinterpret_cast<sockaddr_in&>(ss);
  auto& a6 = reinterpret_cast<sockaddr_in6&>(ss);
  if (inet_pton(AF_INET, want.c_str(), &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    a4.sin_port = htons(static_cast<uint16_t>(port));
    wildcard = a4.sin_addr.s_addr == htonl(INADDR_ANY);
    len = sizeof(a4);
  } else if (inet_pton(AF_INET6, want.c_str(), &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    wildcard = IN6_IS_ADDR_UNSPECIFIED(&a6.sin6_addr);
    len = sizeof(a6);
  } else {
    throw ConfigError(fmt::format("'{}' is not an IP address", want));
  }
  const auto cannot = [&](const std::string& why) {
    return ConfigError(fmt::format(
        "cannot host the store on {}:{}: {}; listen on an address of this host and a free port "
        "(0 = any)",
        want, port, why));
  };
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw cannot(std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0 || ::listen(fd, 4096) != 0) {
    const int err = errno;
    ::close(fd);
    throw cannot(std::strerror(err));
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  opts.masterListenFd = fd;  // the server takes the socket over
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(want, opts);
  } catch (const std::exception& e) {
    throw cannot(e.what());
  }
  const int bound = store->getPort();
  const auto addrs = listening_addresses(bound);
  std::vector<std::string> wrong;
  for (const auto& a : addrs) {
    if (!wildcard && a != want) wrong.push_back(a);
  }
  if (addrs.empty() || !wrong.empty()) {
    throw ConfigError(fmt::format(
        "the store was asked to listen on {} only but listens on {} (port {}); it refuses to run "
        "rather than listen everywhere",
        want, addrs.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(addrs, ", ")),
        bound));
  }
  return store;
}

}  // namespace bw::elastic
