// Error types shared by every module.
//
// Two families, after Gloo: errors the caller can act on (bad input, a lost peer) and
// always-on invariant checks that carry file, line and values. Library code throws; only the
// cli turns exceptions into messages and exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace bw {

// Bad input from a user: a malformed profile, an impossible cluster, an unknown config key.
// The message names the problem, the numbers involved and what to change.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& what) : std::runtime_error(what) {}
};

// A broken invariant inside breakwater itself (a bug, not bad input). Thrown by BW_CHECK.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

// A recoverable communication failure: peer lost, timeout, closed connection. Only the elastic
// layer catches it; everything below lets it propagate.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& what) : std::runtime_error(what) {}
};

// The user asked the run to stop (Ctrl-C, SIGTERM) and it did, cleanly; exit status 130.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace bw
