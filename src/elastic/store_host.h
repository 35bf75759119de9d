// Hosting the run's c10d TCPStore on exactly the address it is told (docs/multihost.md
// "Security"). LibTorch 1.13's TCPStore server has no option for its listen address: it binds
// the wildcard address of every family getaddrinfo offers, that is every interface. While
// host_store() constructs the server, this file's bind() (which takes precedence over libc's for
// the whole process, the executable's own definition) turns the wildcard address of the store's
// sockets into the one asked for; every other bind (Gloo, other threads, other times) passes
// through untouched. Afterwards every listening socket of the process on the store's port is
// checked: if any is bound elsewhere, hosting fails (ConfigError); there is no silent fallback
// to listening everywhere. An explicit wildcard ("0.0.0.0", "::") is honoured as asked.
//
// Thread-safety: host_store() may be called from any thread; the rewrite applies to binds made
// by the calling thread only.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>
#include <vector>

namespace c10d {
class TCPStore;
}

namespace bw::elastic {

// A TCPStore server listening on `address` (numeric or a name) and `port` (0 = a free one).
// ConfigError when the address is not local, the port is taken, or the listen address could not
// be restricted.
c10::intrusive_ptr<c10d::TCPStore> host_store(const std::string& address, int port,
                                              std::chrono::milliseconds timeout);

// The numeric addresses this process listens on at `port` (from its own sockets).
std::vector<std::string> listening_addresses(int port);

}  // namespace bw::elastic
