#include "elastic/control_store_embedded.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"

namespace bw::elastic {
namespace {

constexpr std::chrono::milliseconds kPoll{5};

// The c10d store's own failures (a closed connection, a server gone) are the backend's
// unavailability.
template <class F>
auto guarded(const char* what, const std::string& key, F&& f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw ControlUnavailable(fmt::format("the embedded store failed to {} '{}': {}", what, key,
                                         e.what_without_backtrace()));
  }
}

bool compare(int64_t have, Compare::Result r, int64_t want) {
  switch (r) {
    case Compare::Result::kEqual:
      return have == want;
    case Compare::Result::kNotEqual:
      return have != want;
    case Compare::Result::kLess:
      return have < want;
    case Compare::Result::kGreater:
      return have > want;
  }
  return false;
}

bool compare(const std::string& have, Compare::Result r, const std::string& want) {
  const int c = have.compare(want);  // bytewise, as etcd compares values
  return compare(static_cast<int64_t>(c < 0 ? -1 : c > 0 ? 1 : 0), r, 0);
}

}  // namespace

EmbeddedControlStore::EmbeddedControlStore(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {
  BW_CHECK(store_, "the embedded control store needs a c10d store");
}

EmbeddedControlStore::~EmbeddedControlStore() = default;

std::optional<KeyValue> EmbeddedControlStore::read(const std::string& key) {
  const bool there = guarded("check", key, [&] { return store_->check({key}); });
  if (!there) return std::nullopt;
  KeyValue kv;
  kv.key = key;
  const auto bytes = guarded("read", key, [&] { return store_->get(key); });
  kv.value.assign(bytes.begin(), bytes.end());
  if (const auto it = meta_.find(key); it != meta_.end()) {
    kv.create_revision = it->second.create_revision;
    kv.mod_revision = it->second.mod_revision;
    kv.version = it->second.version;
    kv.lease = it->second.lease;
  }
  return kv;
}

bool EmbeddedControlStore::holds(const Compare& c) {
  const auto kv = read(c.key);
  switch (c.target) {
    case Compare::Target::kValue:
      return kv && compare(kv->value, c.result, c.value);  // false on an absent key, as etcd
    case Compare::Target::kCreateRevision:
      return compare(kv ? kv->create_revision : 0, c.result, c.revision);
    case Compare::Target::kModRevision:
      return compare(kv ? kv->mod_revision : 0, c.result, c.revision);
  }
  return false;
}

void EmbeddedControlStore::log(WatchEvent e) {
  log_.push_back(std::move(e));
  if (log_.size() > kWatchHistory) {
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(log_.size() / 2));
    log_start_ = log_.front().revision;
  }
}

void EmbeddedControlStore::require_lease(int64_t lease) {
  if (lease != 0 && !leases_.count(lease)) {
    throw LeaseGone(fmt::format("lease {} of the embedded store was revoked", lease));
  }
}

void EmbeddedControlStore::write(const std::string& key, const std::string& value, int64_t lease,
                                 int64_t revision) {
  guarded("write", key, [&] {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return 0;
  });
  Meta& m = meta_[key];
  if (m.create_revision == 0) m.create_revision = revision;
  m.mod_revision = revision;
  ++m.version;
  if (m.lease != lease) {
    if (m.lease != 0) leases_[m.lease].second.erase(key);
    if (lease != 0) leases_.at(lease).second.insert(key);
    m.lease = lease;
  }
  log({WatchEvent::Type::kPut, key, value, revision});
}

bool EmbeddedControlStore::remove(const std::string& key, int64_t revision) {
  const bool there = guarded("delete", key, [&] { return store_->deleteKey(key); });
  const auto it = meta_.find(key);
  if (it != meta_.end()) {
    if (it->second.lease != 0) {
      if (auto l = leases_.find(it->second.lease); l != leases_.end()) l->second.second.erase(key);
    }
    meta_.erase(it);
  }
  if (there) log({WatchEvent::Type::kDelete, key, {}, revision});
  return there;
}

std::optional<KeyValue> EmbeddedControlStore::get(const std::string& key, Deadline) {
  check_key(key);
  std::lock_guard<std::mutex> lock(mu_);
  return read(key);
}

int64_t EmbeddedControlStore::put(const std::string& key, const std::string& value, Deadline,
                                  int64_t lease) {
  check_value(key, value);
  std::lock_guard<std::mutex> lock(mu_);
  require_lease(lease);
  write(key, value, lease, ++revision_);
  changed_.notify_all();
  return revision_;
}

bool EmbeddedControlStore::erase(const std::string& key, Deadline) {
  check_key(key);
  std::lock_guard<std::mutex> lock(mu_);
  const bool there = guarded("check", key, [&] { return store_->check({key}); });
  if (!there) return false;
  remove(key, ++revision_);
  changed_.notify_all();
  return true;
}

TxnResult EmbeddedControlStore::txn(const Txn& t, Deadline) {
  check_txn(t);
  std::lock_guard<std::mutex> lock(mu_);
  if (t.fence && !holds(Compare::create_revision_is(t.fence->key, t.fence->epoch))) {
    throw FencedOut(fmt::format(
        "'{}' no longer holds epoch {} on the embedded store: another leader has taken over, "
        "nothing was written",
        t.fence->key, t.fence->epoch));
  }
  TxnResult out;
  out.succeeded =
      std::all_of(t.when.begin(), t.when.end(), [&](const Compare& c) { return holds(c); });
  const auto& ops = out.succeeded ? t.then : t.otherwise;
  for (const auto& op : ops) {
    if (op.type == TxnOp::Type::kPut) require_lease(op.lease);
  }
  // One revision for every write of the transaction, as etcd's.
  const int64_t rev = revision_ + 1;
  bool wrote = false;
  for (const auto& op : ops) {
    switch (op.type) {
      case TxnOp::Type::kPut:
        write(op.key, op.value, op.lease, rev);
        wrote = true;
        break;
      case TxnOp::Type::kDelete:
        wrote = remove(op.key, rev) || wrote;
        break;
      case TxnOp::Type::kGet:
        out.reads.push_back(read(op.key));
        break;
    }
  }
  if (wrote) {
    revision_ = rev;
    changed_.notify_all();
  }
  out.revision = revision_;
  return out;
}

int64_t EmbeddedControlStore::add(const std::string& key, int64_t delta, Deadline) {
  check_key(key);
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t value = guarded("add to", key, [&] { return store_->add(key, delta); });
  Meta& m = meta_[key];
  const int64_t rev = ++revision_;
  if (m.create_revision == 0) m.create_revision = rev;
  m.mod_revision = rev;
  ++m.version;
  log({WatchEvent::Type::kPut, key, std::to_string(value), rev});
  changed_.notify_all();
  return value;
}

void EmbeddedControlStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& k : keys) check_key(k);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (guarded("check", keys.empty() ? std::string() : keys[0],
                [&] { return store_->check(keys); })) {
      return;
    }
    const auto now = ControlClock::now();
    if (now >= deadline) {
      throw ControlTimedOut(
          fmt::format("waited for {} key(s) (the first '{}') on the embedded "
                      "store until the deadline",
                      keys.size(), keys.empty() ? "" : keys[0]));
    }
    // Woken by this object's writes; polls for those of other processes.
    changed_.wait_until(lock, std::min(deadline, now + kPoll));
  }
}

std::vector<WatchEvent> EmbeddedControlStore::watch(const std::string& prefix,
                                                    int64_t from_revision, Deadline deadline) {
  check_key(prefix);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (from_revision < log_start_) {
      throw ControlUnavailable(fmt::format(
          "the embedded store's history from revision {} is compacted (it keeps revisions from "
          "{}); the watcher must re-read the state",
          from_revision, log_start_));
    }
    std::vector<WatchEvent> out;
    auto it = std::lower_bound(log_.begin(), log_.end(), from_revision,
                               [](const WatchEvent& e, int64_t r) { return e.revision < r; });
    for (; it != log_.end(); ++it) {
      if (it->key.compare(0, prefix.size(), prefix) == 0) out.push_back(*it);
    }
    if (!out.empty() || ControlClock::now() >= deadline) return out;
    changed_.wait_until(lock, deadline);
  }
}

int64_t EmbeddedControlStore::revision(Deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

Lease EmbeddedControlStore::grant_lease(int64_t ttl_s, Deadline) {
  BW_CHECK(ttl_s >= 1, "a lease needs a TTL of at least 1 s, not {}", ttl_s);
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = next_lease_++;
  leases_[id] = {ttl_s, {}};
  return Lease{id, ttl_s};
}

int64_t EmbeddedControlStore::keep_alive(int64_t lease, Deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  require_lease(lease);
  return leases_.at(lease).first;
}

void EmbeddedControlStore::revoke(int64_t lease, Deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return;
  const std::set<std::string> keys = it->second.second;
  leases_.erase(it);
  const int64_t rev = revision_ + 1;
  bool wrote = false;
  for (const auto& k : keys) wrote = remove(k, rev) || wrote;
  if (wrote) {
    revision_ = rev;
    changed_.notify_all();
  }
}

}  // namespace bw::elastic
