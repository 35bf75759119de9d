// Peer addresses by number, never by a reverse DNS lookup, in `breakwater-torch`.
//
// c10d names the peer of every socket it connects (the text of its log lines) with getnameinfo().
// It also prefers IPv6, so a store at 127.0.0.1 is reached as ::ffff:127.0.0.1, which /etc/hosts
// does not list: each TCPStore connection (a worker opens several: heartbeat, abort watch,
// groups) sends a PTR query to the DNS server and waits for it. The answer normally comes in a
// millisecond; when the query is lost, the resolver waits its 5 s timeout, far past a 1 s connect
// deadline (the abort watcher's), and a healthy worker was taken for a lost one. Measured on the
// development machine: 40 processes forked at once from one that loaded LibTorch, each opening a
// TCPStore client with a 1 s timeout: 4 failed after 5.01 s; none with this definition.
//
// This executable defines getnameinfo(), which the dynamic linker then binds for the shared
// libraries too (the executable comes first in the lookup order); it asks glibc's for the numeric
// host always. Nothing in breakwater shows a host name from a reverse lookup.
#include <dlfcn.h>
#include <netdb.h>
#include <sys/socket.h>

extern "C" int getnameinfo(const struct sockaddr* addr, socklen_t addrlen, char* host,
                           socklen_t hostlen, char* serv, socklen_t servlen, int flags) {
  using Real = int (*)(const struct sockaddr*, socklen_t, char*, socklen_t, char*, socklen_t, int);
  static const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getnameinfo"));
  if (real == nullptr) return EAI_SYSTEM;
  return real(addr, addrlen, host, hostlen, serv, servlen, flags | NI_NUMERICHOST);
}
