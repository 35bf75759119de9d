// The embedded backend of the control store (control_store.h): the run's own c10d store (the
// TCPStore the coordinator hosts, store_host.h) with this process as its single writer. It is
// the default: `breakwater train`, single-host runs and most tests need nothing else, and a lost
// coordinator still ends the run (exit 3), as it does today.
//
// What each operation means here:
// - Values live in the c10d store under their own names (no prefix: the store holds one run),
//   so other processes keep reading them with plain get/wait/check. The bookkeeping etcd keeps
//   per key (create and mod revision, version, lease) and the revision counter live in this
//   object: writes made through it get revisions, a key another process wrote directly (an add()
//   counter of a worker) reads with revisions 0, and only writes through this object are watched.
// - txn() is atomic with respect to every other call on this object (one mutex); c10d's own
//   compareSet is not needed since no other process writes the keys this object writes.
// - add() is c10d's atomic add, so counters other processes bump stay exact.
// - wait() polls check() every few milliseconds (a c10d wait that times out would leave a TCPStore
//   connection out of step with its server) and wakes at once on writes of this object.
// - watch() reads an in-memory log of this object's writes, the last kWatchHistory of them; an
//   older start revision is ControlUnavailable ("compacted"), as on etcd.
// - Leases never expire while this process lives: the process that holds them is the process that
//   holds the store, so when it dies everything goes with it. keep_alive() fails only for a
//   revoked lease; revoke() deletes its keys.
// - The election: campaign() wins at once when nobody holds the key. In a run only the
//   coordinator campaigns, once, so the epoch is constant (1 in a fresh store); a second campaign
//   waits for a resign or a revoke and gets a larger epoch, as on etcd. Fences are checked inside
//   the same lock, so a fenced-out transaction changes nothing.
// - ControlUnavailable wraps the c10d store's own errors (a closed or broken connection).
//
// Thread-safety: every call may run from any thread; one mutex orders them.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "elastic/control_store.h"

namespace c10d {
class Store;
}

namespace bw::elastic {

class EmbeddedControlStore : public ControlStore {
 public:
  static constexpr size_t kWatchHistory = 100000;

  explicit EmbeddedControlStore(c10::intrusive_ptr<c10d::Store> store);
  ~EmbeddedControlStore() override;

  std::string describe() const override { return "embedded store"; }
  std::optional<KeyValue> get(const std::string& key, Deadline deadline) override;
  int64_t put(const std::string& key, const std::string& value, Deadline deadline,
              int64_t lease = 0) override;
  bool erase(const std::string& key, Deadline deadline) override;
  TxnResult txn(const Txn& txn, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  std::vector<WatchEvent> watch(const std::string& prefix, int64_t from_revision,
                                Deadline deadline) override;
  int64_t revision(Deadline deadline) override;
  Lease grant_lease(int64_t ttl_s, Deadline deadline) override;
  int64_t keep_alive(int64_t lease, Deadline deadline) override;
  void revoke(int64_t lease, Deadline deadline) override;

 private:
  struct Meta {
    int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
  };
  // All below: with mu_ held.
  std::optional<KeyValue> read(const std::string& key);
  bool holds(const Compare& c);
  void write(const std::string& key, const std::string& value, int64_t lease, int64_t revision);
  bool remove(const std::string& key, int64_t revision);
  void log(WatchEvent e);
  void require_lease(int64_t lease);

  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mu_;
  std::condition_variable changed_;
  int64_t revision_ = 0;
  std::map<std::string, Meta> meta_;
  std::map<int64_t, std::pair<int64_t, std::set<std::string>>> leases_;  // id -> (ttl, keys)
  int64_t next_lease_ = 1;
  std::vector<WatchEvent> log_;  // revision order
  int64_t log_start_ = 1;        // the first revision still in log_
};

}  // namespace bw::elastic
