// A client of the leader's TCPStore that follows the run's leadership (leadership.h), for the
// agents and workers of a run whose control store is etcd. When a call fails because the store
// went with its coordinator, it waits for a coordinator that took the run over (a leader key with
// a greater epoch, and the store address that leader published after it won), connects to that
// store and makes the call again there: the caller keeps its state and waits at the same point.
// No new leader within the leaderless timeout: CommError (exit 3) naming the wait.
//
// A call is made again only on a new leader's store, never on the same one. Waits (get, wait) are
// cut into rounds of at most a second: between rounds the client looks for a newer leader, so a
// worker waiting on a coordinator that was paused or cut off, and replaced, moves to the new one
// within about a second of its store; a timed-out round reconnects (a timed-out TCPStore
// connection is out of step with its server). The wait as a whole still ends at the caller's
// timeout. Counters are the new store's: what a caller added on the old one is gone with it, and
// the new leader counts nothing from before its lead (it re-forms the generation, supervisor.h
// Supervisor::adopt).
//
// A set is followed by a round trip (c10d's set has no answer, so one sent to a store that has
// just gone would be lost without an error).
//
// Thread-safety: calls from several threads are serialized.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace bw::elastic {

class ControlStore;

// Where a leader's store listens, and the leader's epoch.
struct StoreAt {
  std::string host;
  int port = 0;
  int64_t epoch = 0;
};

// The store of the run's leader with an epoch above `after` (keys::leader_store, written after
// that leader won), waiting for one until `timeout`; CommError after that.
StoreAt locate_leader_store(ControlStore& control, int64_t after,
                            std::chrono::milliseconds timeout);
// One look: that store if there is one now (nullopt also when the control store does not answer).
std::optional<StoreAt> find_leader_store(ControlStore& control, int64_t after);

// The leader's store as a process's clients know it: every FailoverStore of the process follows
// one, so a client made after a takeover connects to the new store, and one wait for the next
// leader serves them all.
//
// A TCPStore call to a coordinator that is paused (or cut off without a reset) blocks in the
// kernel with no timeout of its own. So a thread looks for a newer leader every 250 ms and, when
// one has published its store, shuts down this process's connections to the deposed leader's
// store (sockets whose peer is its address): their calls fail at once, as if that store had gone,
// and follow the leadership. The thread starts with the follower and stops with it.
class LeaderFollower {
 public:
  // `first`: the store of the leader now, in `control`; a next leader is waited for up to
  // `leaderless` (then CommError).
  LeaderFollower(std::shared_ptr<ControlStore> control, StoreAt first,
                 std::chrono::milliseconds leaderless);
  StoreAt current();
  // The store of a leader after epoch `after`: the one known already, else waits for it.
  StoreAt after(int64_t epoch);
  // The same without waiting: nullopt when there is none now.
  std::optional<StoreAt> newer(int64_t epoch);
  ~LeaderFollower();

 private:
  void watch();

  std::shared_ptr<ControlStore> control_;
  std::chrono::milliseconds leaderless_;
  std::mutex mu_;
  StoreAt latest_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

// Shuts down (SHUT_RDWR) every socket of this process connected to host:port; returns how many.
int cut_connections_to(const std::string& host, int port);

class FailoverStore final : public c10d::Store {
 public:
  FailoverStore(std::shared_ptr<LeaderFollower> follower, std::chrono::milliseconds timeout);

  StoreAt at() {
    std::lock_guard lk(mu_);
    return at_;
  }
  // Calls made on each new store before the call that failed over is made again there: the
  // reports a caller waits on an answer to (ResendOnFailover). Empty: none.
  void set_resend(std::function<void(c10d::Store&)> resend) {
    std::lock_guard lk(mu_);
    resend_ = std::move(resend);
  }

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;

 private:
  template <class F>
  auto call(F&& f);
  void connect();
  // Waits for `keys` in rounds (see above) until `timeout`.
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::recursive_mutex mu_;
  std::shared_ptr<LeaderFollower> follower_;
  StoreAt at_;
  c10::intrusive_ptr<c10d::Store> inner_;
  std::function<void(c10d::Store&)> resend_;
};

// For the scope of a wait: `resend` is made again on the store of each coordinator that takes the
// run over, before the wait goes on there. Nothing when `store` is not a FailoverStore.
class ResendOnFailover {
 public:
  ResendOnFailover(c10d::Store* store, std::function<void(c10d::Store&)> resend)
      : store_(dynamic_cast<FailoverStore*>(store)) {
    if (store_ && resend) store_->set_resend(std::move(resend));
  }
  ~ResendOnFailover() {
    if (store_) store_->set_resend({});
  }
  ResendOnFailover(const ResendOnFailover&) = delete;
  ResendOnFailover& operator=(const ResendOnFailover&) = delete;

 private:
  FailoverStore* store_;
};

}  // namespace bw::elastic
