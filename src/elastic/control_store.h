// The control store: the one seam through which the elastic control plane keeps its durable
// state (docs/elastic.md "Control store"). Two backends implement it and one conformance suite
// (tests/elastic/control_store_test.cc) runs unchanged against both:
//   - embedded (control_store_embedded.h): the run's own c10d TCPStore, one writer, one process;
//   - etcd (control_store_etcd.h): a 3.4+ etcd cluster through its v3 JSON gateway, so that a
//     standby coordinator can take over and every decision of the old one is fenced.
//
// The model is etcd's: a revisioned key-value store. Every write gets the store's next revision
// (a counter over the whole store that only grows); a key remembers the revision that created it
// (create_revision) and the one that last changed it (mod_revision); both are 0 for an absent key.
// Keys are relative to the run (the etcd backend stores them under "bw/{run_id}/"); values are at
// most kMaxValueBytes. Leases expire unless kept alive and take their keys with them. An election
// is one key: whoever creates it (bound to their lease) leads, and the epoch is the revision at
// which they created it, so epochs only grow. A Fence (key, epoch) guards a transaction: it is
// applied only while that key still holds that epoch, so an old leader's write fails inside the
// store (etcd's client/v3/concurrency does the same).
//
// Every call takes a deadline and either returns or throws before it (within a small slack):
//   ControlUnavailable  no member answers, or none has a quorum (retry later or give up)
//   ControlTimedOut     the deadline passed (a wait that saw nothing, or a call that hung)
//   FencedOut           a fenced transaction found another epoch: this process no longer leads
//   LeaseGone           the lease expired or was revoked
// All four are CommError (recoverable, handled by the elastic layer). Bugs (a value over the
// limit, an empty key) are InternalError; bad configuration (a URL, an old etcd) ConfigError.
//
// Thread-safety: every backend is safe to call from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace bw::elastic {

using ControlClock = std::chrono::steady_clock;
using Deadline = ControlClock::time_point;
inline Deadline deadline_in(std::chrono::milliseconds ms) { return ControlClock::now() + ms; }

inline constexpr size_t kMaxValueBytes = 64 * 1024;

// --- typed errors
class ControlError : public CommError {
 public:
  using CommError::CommError;
};
class ControlUnavailable : public ControlError {
 public:
  using ControlError::ControlError;
};
class ControlTimedOut : public ControlError {
 public:
  using ControlError::ControlError;
};
class FencedOut : public ControlError {
 public:
  using ControlError::ControlError;
};
class LeaseGone : public ControlError {
 public:
  using ControlError::ControlError;
};

// --- data
struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
  bool operator==(const KeyValue&) const = default;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key, value;  // value empty for a delete
  int64_t revision = 0;    // the event's mod revision
  bool operator==(const WatchEvent&) const = default;
};

// One condition of a transaction. A value comparison on an absent key is false whatever the
// operator (etcd's rule); revision comparisons see 0 for an absent key.
struct Compare {
  enum class Target { kValue, kCreateRevision, kModRevision };
  enum class Result { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kValue;
  Result result = Result::kEqual;
  std::string value;     // kValue
  int64_t revision = 0;  // kCreateRevision, kModRevision

  static Compare value_is(std::string key, std::string value);
  static Compare mod_revision_is(std::string key, int64_t revision);
  static Compare create_revision_is(std::string key, int64_t revision);
  static Compare absent(std::string key) { return create_revision_is(std::move(key), 0); }
  static Compare exists(std::string key);
};

struct TxnOp {
  enum class Type { kPut, kDelete, kGet };
  Type type = Type::kGet;
  std::string key, value;
  int64_t lease = 0;  // kPut: bind the key to this lease (0: none)

  static TxnOp put(std::string key, std::string value, int64_t lease = 0);
  static TxnOp erase(std::string key);
  static TxnOp get(std::string key);
};

// Guards a transaction: it applies only while `key` was created at revision `epoch`.
struct Fence {
  std::string key;
  int64_t epoch = 0;
};

// If every compare holds, `then` runs, else `otherwise`; atomically. With a fence, nothing runs
// and FencedOut is thrown when the fence does not hold.
struct Txn {
  std::vector<Compare> when;
  std::vector<TxnOp> then, otherwise;
  std::optional<Fence> fence;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after the transaction
  // One entry per kGet of the branch that ran, in order (nullopt: the key was absent).
  std::vector<std::optional<KeyValue>> reads;
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted (etcd may raise it to its minimum)
};

struct Leader {
  std::string value;
  int64_t epoch = 0;
  int64_t lease = 0;
};

class ControlStore {
 public:
  virtual ~ControlStore() = default;

  // "embedded" or "etcd", and where (for messages).
  virtual std::string describe() const = 0;

  virtual std::optional<KeyValue> get(const std::string& key, Deadline deadline) = 0;
  // Returns the revision of the write.
  virtual int64_t put(const std::string& key, const std::string& value, Deadline deadline,
                      int64_t lease = 0) = 0;
  // Whether the key existed (and is now gone).
  virtual bool erase(const std::string& key, Deadline deadline) = 0;
  virtual TxnResult txn(const Txn& txn, Deadline deadline) = 0;
  // Adds `delta` to the decimal integer at `key` (absent = 0) atomically; returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  // Returns once every key exists; ControlTimedOut at the deadline.
  virtual void wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // The changes to keys under `prefix` with revision >= from_revision, in revision order: blocks
  // until there is at least one, or returns an empty list at the deadline. Call again from the
  // last event's revision + 1 for the next ones.
  virtual std::vector<WatchEvent> watch(const std::string& prefix, int64_t from_revision,
                                        Deadline deadline) = 0;
  // The store's current revision.
  virtual int64_t revision(Deadline deadline) = 0;

  virtual Lease grant_lease(int64_t ttl_s, Deadline deadline) = 0;
  // Refreshes the lease; returns its TTL. LeaseGone when it has expired or was revoked.
  virtual int64_t keep_alive(int64_t lease, Deadline deadline) = 0;
  // Ends the lease and deletes its keys (no error when it is already gone).
  virtual void revoke(int64_t lease, Deadline deadline) = 0;

  // Waits until `key` is free and creates it with `value` bound to `lease`: returns the epoch
  // (the revision of that write). ControlTimedOut at the deadline, LeaseGone when `lease` is.
  virtual int64_t campaign(const std::string& key, const std::string& value, int64_t lease,
                           Deadline deadline);
  // Deletes the key if it still holds `epoch` (a leader stepping down); false when it did not.
  bool resign(const std::string& key, int64_t epoch, Deadline deadline);
  // The current leader, if any.
  std::optional<Leader> leader(const std::string& key, Deadline deadline);

  // Convenience forms of txn().
  bool create(const std::string& key, const std::string& value, Deadline deadline,
              int64_t lease = 0);  // create-if-absent: false when the key exists
  bool compare_and_set(const std::string& key, const std::string& expected,
                       const std::string& value, Deadline deadline);
  int64_t fenced_put(const Fence& fence, const std::string& key, const std::string& value,
                     Deadline deadline);
};

// Checks what every backend refuses as a bug: an empty key, a value over kMaxValueBytes.
void check_key(const std::string& key);
void check_value(const std::string& key, const std::string& value);
void check_txn(const Txn& txn);

// --control: "embedded" (or empty) or "etcd://HOST:PORT[,HOST:PORT...]" (IPv6 as [addr]:port).
struct ControlUrl {
  enum class Kind { kEmbedded, kEtcd };
  struct Endpoint {
    std::string host;  // without brackets
    int port = 0;
    std::string url() const;  // "http://host:port" ("http://[::1]:port")
    std::string str() const;  // "host:port"
  };
  Kind kind = Kind::kEmbedded;
  std::vector<Endpoint> endpoints;
};
// ConfigError naming the URL, what is wrong and the form to use.
ControlUrl parse_control_url(const std::string& url);

// Run ids become key prefixes: letters, digits, '.', '_', '-'; 1 to 64 characters.
void check_run_id(const std::string& run_id);

}  // namespace bw::elastic
