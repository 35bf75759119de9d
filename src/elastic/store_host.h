// Hosting the run's c10d TCPStore on exactly the address it is told (docs/multihost.md
// "Security"). host_store() binds and listens on a socket of its own, on that address only, and
// hands it to the store's server (TCPStoreOptions::masterListenFd), so the server never binds the
// wildcard address. Afterwards every listening socket of the process on the store's port is
// checked: if any is bound elsewhere, hosting fails (ConfigError); there is no silent fallback to
// listening everywhere. An explicit wildcard ("0.0.0.0", "::") is honoured as asked.
//
// Thread-safety: free functions without shared state.
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
