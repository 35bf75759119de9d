// The etcd backend of the control store (control_store.h): libcurl against etcd 3.4's v3 JSON
// gateway (/v3/kv/range|put|txn|deleterange, /v3/lease/grant|keepalive|revoke, /v3/watch), every
// key under "bw/{run_id}/". The JSON is etcd_json.h's.
//
// - Endpoints are tried in order, starting with the last one that answered: a refused or
//   unreachable member (connect timeout: at most 500 ms), or one that has no leader, sends the
//   call to the next; when a whole round fails the call retries every 20 ms until its deadline,
//   then throws ControlUnavailable naming every endpoint and what it said.
// - Each HTTP request's timeout is what is left of the call's deadline; a request cut by it
//   throws ControlTimedOut. A call is never sent again after it may have reached a member (its
//   outcome would be unknown): only connection failures and "no leader" replies (nothing was
//   applied) move on to the next endpoint; a watch, which changes nothing, also moves on after a
//   broken connection.
// - Reads are linearizable (the gateway's default, serializable = false).
// - add() is a compare-and-set loop on the key's mod revision; the election is control_store.cc's
//   transaction on the leader key (the epoch is the revision of its creation, as in etcd's
//   client/v3/concurrency); a fence is an outer transaction comparing the leader key's create
//   revision around the caller's, so a fenced-out write changes nothing.
// - watch() reads the gateway's stream of newline-separated messages until the first one with
//   events, or until the deadline; a compacted start revision is ControlUnavailable.
//
// Thread-safety: all calls may run at once; each takes its own curl handle from a pool (handles
// keep their connections, so a call on loopback costs one HTTP round trip).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "elastic/control_store.h"
#include "elastic/etcd_json.h"

namespace bw::elastic {

class EtcdControlStore : public ControlStore {
 public:
  // Checks that some endpoint answers (retrying until the deadline) and that the cluster runs
  // etcd 3.4 or newer. ConfigError naming every endpoint tried when none answers, or the version
  // found when it is older.
  static std::unique_ptr<EtcdControlStore> connect(const ControlUrl& url, const std::string& run_id,
                                                   Deadline deadline);
  ~EtcdControlStore() override;

  std::string describe() const override;
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
  struct Handle;
  EtcdControlStore(std::vector<ControlUrl::Endpoint> endpoints, const std::string& run_id);
  // POSTs `body` to `path` on the first endpoint that answers; the reply's body. Maps the
  // gateway's errors to the typed ones.
  std::string call(const std::string& path, const std::string& body, Deadline deadline);
  // The same for a stream (watch): on_data sees the body so far after every chunk and returns
  // false to stop reading; at the deadline the body so far is returned.
  std::string call_stream(const std::string& path, const std::string& body, Deadline deadline,
                          std::function<bool(const std::string&)> on_data);
  Handle* take();
  void give(Handle* h);
  std::string where(size_t endpoint, const std::string& path) const;
  EtcdRange range(const std::string& key, Deadline deadline);

  std::vector<ControlUrl::Endpoint> endpoints_;
  std::string run_id_;
  EtcdCodec codec_;
  std::atomic<size_t> preferred_{0};
  std::mutex pool_mu_;
  std::vector<Handle*> pool_;
};

}  // namespace bw::elastic
