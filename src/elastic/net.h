// Addresses of a multi-host run (docs/multihost.md): `ADDR:PORT` parsing, the local address that
// reaches the coordinator (Gloo's interface), and the IPv4 address of a named interface
// (GLOO_SOCKET_IFNAME, as c10d users set it). Bad input is a ConfigError naming the fix.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <chrono>
#include <string>

namespace bw::elastic {

struct HostPort {
  std::string host;  // as written (a name or a numeric address; brackets of IPv6 removed)
  int port = 0;
};

// "10.0.0.1:29500", "node7:29500", "[fd00::1]:29500"; `what` names the flag in errors.
HostPort parse_host_port(const std::string& text, const std::string& what);

// The numeric address `host` resolves to (the first one); ConfigError if it does not resolve.
std::string numeric_address(const std::string& host, const std::string& what);

// The address of this host's interface that routes to `host` (no packet is sent).
std::string local_address_towards(const std::string& host);

// The IPv4 address of interface `name`; ConfigError naming the interfaces there are otherwise.
std::string interface_address(const std::string& name);

// The address Gloo binds to for a run whose coordinator is `coordinator_host`:
// GLOO_SOCKET_IFNAME's address when set, else local_address_towards(coordinator_host).
std::string gloo_address(const std::string& coordinator_host);

// One TCP connection attempt to host:port within `timeout`: accepted (kOpen), refused (kRefused:
// positive evidence that nothing listens there), or neither (kUnknown: no answer, no route, a
// name that does not resolve). The connection is closed at once.
enum class Probe { kOpen, kRefused, kUnknown };
Probe probe_tcp(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace bw::elastic
