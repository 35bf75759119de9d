#include "elastic/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"

namespace bw::elastic {

HostPort parse_host_port(const std::string& text, const std::string& what) {
  HostPort out;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw ConfigError(fmt::format("{} '{}' is not [ADDRESS]:PORT", what, text));
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      throw ConfigError(
          fmt::format("{} '{}' is not ADDRESS:PORT (e.g. 10.0.0.1:29500; IPv6 as [fd00::1]:29500)",
                      what, text));
    }
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (out.host.empty() || port.empty() || *end != '\0' || p < 0 || p > 65535) {
    throw ConfigError(fmt::format(
        "{} '{}' needs an address and a port in 0-65535 (0 = any free port), e.g. 10.0.0.1:29500",
        what, text));
  }
  out.port = static_cast<int>(p);
  return out;
}

std::string numeric_address(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw ConfigError(fmt::format("{}: cannot resolve '{}' ({}); give a numeric address", what,
                                  host, gai_strerror(rc)));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(res);
  return buf;
}

std::string local_address_towards(const std::string& host) {
  const auto addr = numeric_address(host, "the coordinator address");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), "9", &hints, &res) != 0 || res == nullptr) {
    throw ConfigError(fmt::format("cannot parse the coordinator address '{}'", addr));
  }
  const int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  const bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  const bool named = ok && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (!named) {
    throw ConfigError(fmt::format(
        "no route from this host to the coordinator at {} ({}); check the address, or name the "
        "interface with GLOO_SOCKET_IFNAME",
        host, std::strerror(err)));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof(buf), nullptr, 0,
              NI_NUMERICHOST);
  return buf;
}

std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw ConfigError(fmt::format("cannot list network interfaces: {}", std::strerror(errno)));
  }
  std::string found;
  std::set<std::string> names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    names.insert(a->ifa_name);
    if (found.empty() && name == a->ifa_name) {
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      found = buf;
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    throw ConfigError(fmt::format(
        "GLOO_SOCKET_IFNAME='{}': no such interface with an IPv4 address here (there are: {}); "
        "set it to one of them or unset it",
        name, fmt::join(names, ", ")));
  }
  return found;
}

std::string gloo_address(const std::string& coordinator_host) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    const std::string name = ifname;
    if (name.find(',') != std::string::npos) {
      throw ConfigError(fmt::format(
          "GLOO_SOCKET_IFNAME='{}' names several interfaces; breakwater uses one: name one", name));
    }
    return interface_address(name);
  }
  return local_address_towards(coordinator_host);
}

Probe probe_tcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    return Probe::kUnknown;
  }
  Probe out = Probe::kUnknown;
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int rc = connect(fd, found->ai_addr, found->ai_addrlen);
    if (rc == 0) {
      out = Probe::kOpen;
    } else if (errno == ECONNREFUSED) {
      out = Probe::kRefused;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        out = err == 0 ? Probe::kOpen : err == ECONNREFUSED ? Probe::kRefused : Probe::kUnknown;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return out;
}

}  // namespace bw::elastic
