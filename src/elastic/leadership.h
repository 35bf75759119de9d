// A coordinator's leadership of a run in the control store (docs/elastic.md "Leadership and fenced
// decisions"), for runs whose control store is etcd (`breakwater coordinator --control
// etcd://...`).
//
// Taking the lead: a lease of `ttl_s` seconds, then the leader key created bound to it. The epoch
// is the revision of that write, so epochs only grow. A key held by a live leader refuses the
// run: with another config, the run id is someone else's; with the same config, a second active
// coordinator would split the run (both ConfigError, exit 2, naming the holder). A thread renews
// the lease every ttl/3.
//
// Durable writes are fenced: a transaction that applies only while the leader key still holds
// this epoch, so a coordinator that was paused or cut off past its lease, and replaced, writes
// nothing: its first fenced write fails inside the store, and it stops (LostLeadership, exit 3)
// without touching the run. check() is called before every supervisor tick: a renewal older than
// 2/3 of the TTL (the process was paused, or starved) is redone at once, synchronously, and a lease
// found gone throws, so a resumed process acts on nothing before it knows it still leads.
//
// The keys of a run instance live under "i{epoch of its first leader}/" (instance_prefix), so a
// run id used again by a later run never reads an earlier run's decisions. The active leader
// names its instance at the run's root (keys::instance); a standby that wins takes over that
// instance, its decisions and its state, unless it is over.
//
// Standby (options.standby): the constructor campaigns until it leads: the leader key goes when
// its holder's lease expires (the lease path), or at once when `holder_dead` gives positive
// evidence that the holder is gone (its store refuses connections): the standby then revokes the
// holder's lease itself (the evidence path). A holder with another config refuses the standby
// (ConfigError); `cancelled` (Ctrl-C) ends the wait with Interrupted.
//
// The control store unreachable (no quorum): renewals and writes retry until
// `leaderless_timeout`, then throw CommError (exit 3); etcd expires no lease without a quorum, so
// the leadership holds when the store returns in time.
//
// Thread-safety: check(), decide() and put() from one thread; the renewal thread is internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"
#include "elastic/control_store.h"
#include "elastic/messages.h"

namespace bw::elastic {

// Another coordinator leads the run now: this one stops and touches nothing (exit 3).
class LostLeadership : public CommError {
 public:
  using CommError::CommError;
};

struct LeadershipOptions {
  std::string key = "leader";
  LeaderRecord record;
  int64_t ttl_s = 5;
  std::chrono::milliseconds leaderless_timeout{30000};
  bool standby = false;
  // standby, the evidence path: given the holder and its epoch, whether it is known dead
  std::function<bool(const LeaderRecord&, int64_t epoch)> holder_dead;
  std::function<bool()> cancelled;  // standby: stop waiting
};

class Leadership {
 public:
  // Takes the lead (see above) before `deadline`.
  Leadership(std::shared_ptr<ControlStore> store, LeadershipOptions options, Deadline deadline);
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  int64_t epoch() const { return epoch_; }
  int64_t lease() const { return lease_; }
  std::string instance_prefix() const;  // "i{instance}/"
  int64_t instance() const { return instance_; }
  // A standby that won found no run to take over (none was led, or it is over): resign.
  bool nothing_to_take_over() const { return nothing_; }
  // Whether the standby revoked its predecessor's lease on evidence (not the lease path).
  bool took_on_evidence() const { return on_evidence_; }
  ControlStore& store() { return *store_; }

  // Throws LostLeadership when the lease is known to be gone (see above).
  void check();
  // Writes `value` at instance_prefix() + key unless a value is there already, fenced by the
  // epoch; returns the value that stands there (this one, or the one written before). So each key
  // is written once across retries and leaders.
  std::string decide(const std::string& key, const std::string& value);
  // A fenced put at instance_prefix() + key.
  void put(const std::string& key, const std::string& value);
  // The value at instance_prefix() + key, if any (linearizable).
  std::optional<std::string> get(const std::string& key);
  // The same with its revisions.
  std::optional<KeyValue> get_kv(const std::string& key);
  // Every key under instance_prefix() + prefix written at or after `from_revision`, with the value
  // it holds now (keys relative to the instance; deleted ones left out), read from the store's
  // history in a few calls rather than one call per key.
  std::map<std::string, std::string> written_since(const std::string& prefix,
                                                   int64_t from_revision);
  // The run is over (finished or stopped): a standby has nothing to take over.
  void end_instance();
  // The run is over: the leader key goes (if still this epoch's) and the lease is revoked.
  void resign();

 private:
  void campaign(Deadline deadline);  // the active coordinator's single try
  void wait_to_lead();               // a standby's campaign
  void renew_loop();
  void stop_renewing();  // ends the renewal thread (idempotent)
  // Runs `call` until it returns, retrying while the store is unreachable until the leaderless
  // timeout; FencedOut and LeaseGone become LostLeadership.
  template <class F>
  auto fenced(const char* what, F&& call);
  [[noreturn]] void lose(const std::string& why);

  std::shared_ptr<ControlStore> store_;
  LeadershipOptions opt_;
  int64_t lease_ = 0;
  int64_t epoch_ = 0;
  int64_t instance_ = 0;
  bool nothing_ = false;
  bool on_evidence_ = false;
  std::atomic<int64_t> renewed_ms_{0};  // steady clock, ms: the last successful renewal
  std::atomic<bool> gone_{false};       // the renewal thread found the lease gone
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool resigned_ = false;
  std::thread renewer_;
};

}  // namespace bw::elastic
