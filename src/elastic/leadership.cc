#include "elastic/leadership.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "elastic/keys.h"

namespace bw::elastic {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             ControlClock::now().time_since_epoch())
      .count();
}

// One call's own deadline inside a longer retry: a call that hangs is cut and tried again.
constexpr std::chrono::milliseconds kCallMs{500};
constexpr std::chrono::milliseconds kRetryMs{50};

}  // namespace

Leadership::Leadership(std::shared_ptr<ControlStore> store, LeadershipOptions options,
                       Deadline deadline)
    : store_(std::move(store)), opt_(std::move(options)) {
  BW_CHECK(opt_.ttl_s >= 1, "a leader's lease needs a TTL of at least 1 s, not {}", opt_.ttl_s);
  if (opt_.standby) {
    wait_to_lead();
  } else {
    campaign(deadline);
  }
  renewed_ms_ = now_ms();
  renewer_ = std::thread([this] { renew_loop(); });
}

namespace {

// The holder of the leader key, read in a failed campaign, as the error that names it: another
// config (someone else's run id), or the same (a second active coordinator).
ConfigError refusal(const ControlStore& store, const std::string& key, const KeyValue& kv,
                    const std::string& config, bool* same_config) {
  LeaderRecord holder;
  try {
    holder = decode_leader(kv.value, key);
  } catch (const ConfigError& e) {
    return ConfigError(
        fmt::format("the run's leader key in the {} control store holds something that is not a "
                    "coordinator's record ({}); give this run another run id",
                    store.describe(), e.what()));
  }
  const std::string who = fmt::format("the live coordinator at {} (host {}, pid {}, epoch {})",
                                      holder.address, holder.host, holder.pid, kv.create_revision);
  *same_config = holder.config == config;
  if (!*same_config) {
    return ConfigError(fmt::format(
        "this run id is led by {} with another config (the {} control store); give this run "
        "another run id, or stop that coordinator",
        who, store.describe()));
  }
  return ConfigError(fmt::format(
      "this run id is already led by {} with the same config (the {} control store): a second "
      "active coordinator would split the run; stop that one first, give another run id, or "
      "start this one with --standby",
      who, store.describe()));
}

}  // namespace

void Leadership::campaign(Deadline deadline) {
  lease_ = store_->grant_lease(opt_.ttl_s, deadline).id;
  Txn t;
  t.when = {Compare::absent(opt_.key)};
  t.then = {TxnOp::put(opt_.key, encode_leader(opt_.record), lease_)};
  t.otherwise = {TxnOp::get(opt_.key)};
  const TxnResult r = store_->txn(t, deadline);
  if (!r.succeeded) {
    try {
      store_->revoke(lease_, deadline);
    } catch (const ControlError&) {  // it expires by itself
    }
    BW_CHECK(!r.reads.empty() && r.reads[0], "the leader key '{}' is held but reads absent",
             opt_.key);
    bool same = false;
    throw refusal(*store_, opt_.key, *r.reads[0], opt_.record.config, &same);
  }
  epoch_ = r.revision;
  instance_ = epoch_;
  // The instance this leader starts, named at the run's root for a standby to take over.
  store_->fenced_put(Fence{opt_.key, epoch_}, keys::instance(),
                     encode_instance({.epoch = instance_, .over = false}), deadline);
}

void Leadership::wait_to_lead() {
  constexpr std::chrono::milliseconds kPoll{50};
  lease_ = 0;
  for (;;) {
    if (opt_.cancelled && opt_.cancelled()) {
      if (lease_ != 0) {
        try {
          store_->revoke(lease_, deadline_in(kCallMs));
        } catch (const ControlError&) {
        }
      }
      throw Interrupted("stopped on request while standing by");
    }
    try {
      // A lease of its own, kept alive while waiting (a standby holds one, as the issue's
      // protocol says; it is what the leader key is bound to once it wins).
      if (lease_ == 0) {
        lease_ = store_->grant_lease(opt_.ttl_s, deadline_in(kCallMs * 4)).id;
      } else {
        store_->keep_alive(lease_, deadline_in(kCallMs * 4));
      }
      Txn t;
      t.when = {Compare::absent(opt_.key)};
      t.then = {TxnOp::put(opt_.key, encode_leader(opt_.record), lease_)};
      t.otherwise = {TxnOp::get(opt_.key)};
      const TxnResult r = store_->txn(t, deadline_in(kCallMs * 4));
      if (r.succeeded) {
        epoch_ = r.revision;
        break;
      }
      if (!r.reads.empty() && r.reads[0]) {
        bool same = false;
        auto refused = refusal(*store_, opt_.key, *r.reads[0], opt_.record.config, &same);
        if (!same) throw refused;
        const auto holder = decode_leader(r.reads[0]->value, opt_.key);
        if (opt_.holder_dead && opt_.holder_dead(holder, r.reads[0]->create_revision) &&
            r.reads[0]->lease != 0) {
          // Positive evidence of its death: its lease goes now, not after its TTL.
          store_->revoke(r.reads[0]->lease, deadline_in(kCallMs * 4));
          on_evidence_ = true;
          continue;
        }
      }
    } catch (const LeaseGone&) {
      lease_ = 0;  // ours expired while the store was away: a new one
    } catch (const ControlError&) {
      // The store is away (no quorum): keep standing by.
    }
    std::this_thread::sleep_for(kPoll);
  }
  const auto kv = store_->get(keys::instance(), deadline_in(kCallMs * 4));
  InstanceRecord inst;
  if (kv) inst = decode_instance(kv->value, keys::instance());
  nothing_ = !kv || inst.over;
  instance_ = kv ? inst.epoch : epoch_;
}

Leadership::~Leadership() {
  stop_renewing();
  if (resigned_) return;
  try {  // a run that ended without resign(): its lease goes now rather than after its TTL
    store_->revoke(lease_, deadline_in(std::chrono::milliseconds(1000)));
  } catch (const ControlError&) {
  }
}

std::string Leadership::instance_prefix() const { return fmt::format("i{}/", instance_); }

void Leadership::renew_loop() {
  const std::chrono::milliseconds period(std::max<int64_t>(opt_.ttl_s * 1000 / 3, 100));
  std::unique_lock lk(mu_);
  while (!stopping_) {
    if (cv_.wait_for(lk, period, [this] { return stopping_; })) break;
    lk.unlock();
    try {
      store_->keep_alive(lease_, deadline_in(period));
      renewed_ms_ = now_ms();
    } catch (const LeaseGone&) {
      gone_ = true;
      return;
    } catch (const ControlError&) {
      // Unreachable or slow: tried again next period; check() decides when it matters.
    }
    lk.lock();
  }
}

void Leadership::lose(const std::string& why) {
  gone_ = true;
  throw LostLeadership(fmt::format(
      "lost leadership of the run (epoch {}): {}; another coordinator may lead it now, so this "
      "one stops without touching the run",
      epoch_, why));
}

template <class F>
auto Leadership::fenced(const char* what, F&& call) {
  const Deadline until = deadline_in(opt_.leaderless_timeout);
  for (;;) {
    try {
      return call(std::min(until, deadline_in(kCallMs)));
    } catch (const FencedOut& e) {
      lose(fmt::format("{} was fenced out ({})", what, e.what()));
    } catch (const LeaseGone& e) {
      lose(fmt::format("{} found its lease gone ({})", what, e.what()));
    } catch (const ControlError& e) {
      if (ControlClock::now() >= until) {
        throw CommError(fmt::format(
            "the {} control store did not answer for {} s ({}: {}); the run stops, exit 3",
            store_->describe(), opt_.leaderless_timeout.count() / 1000.0, what, e.what()));
      }
      std::this_thread::sleep_for(kRetryMs);
    }
  }
}

void Leadership::check() {
  if (gone_) lose("its lease is gone");
  // Renewed recently: nothing else can lead before the lease could have expired.
  if (now_ms() - renewed_ms_.load() <= opt_.ttl_s * 1000 * 2 / 3) return;
  fenced("renewing the lease", [this](Deadline d) {
    store_->keep_alive(lease_, d);
    renewed_ms_ = now_ms();
    return 0;
  });
}

std::string Leadership::decide(const std::string& key, const std::string& value) {
  check();
  const std::string k = instance_prefix() + key;
  return fenced("the decision write", [&](Deadline d) {
    Txn t;
    t.fence = Fence{opt_.key, epoch_};
    t.when = {Compare::absent(k)};
    t.then = {TxnOp::put(k, value)};
    t.otherwise = {TxnOp::get(k)};
    const TxnResult r = store_->txn(t, d);
    if (r.succeeded) return value;
    BW_CHECK(!r.reads.empty() && r.reads[0], "decision key '{}' is held but reads absent", k);
    return r.reads[0]->value;
  });
}

void Leadership::put(const std::string& key, const std::string& value) {
  check();
  const std::string k = instance_prefix() + key;
  fenced("a fenced write", [&](Deadline d) {
    return store_->fenced_put(Fence{opt_.key, epoch_}, k, value, d);
  });
}

std::optional<std::string> Leadership::get(const std::string& key) {
  check();
  const std::string k = instance_prefix() + key;
  return fenced("a read", [&](Deadline d) -> std::optional<std::string> {
    auto kv = store_->get(k, d);
    if (!kv) return std::nullopt;
    return kv->value;
  });
}

std::optional<KeyValue> Leadership::get_kv(const std::string& key) {
  check();
  const std::string k = instance_prefix() + key;
  return fenced("a read", [&](Deadline d) { return store_->get(k, d); });
}

std::map<std::string, std::string> Leadership::written_since(const std::string& prefix,
                                                             int64_t from_revision) {
  check();
  const std::string full = instance_prefix() + prefix;
  // A watch blocks until there is an event to return: the history is read up to a mark written
  // under the instance (the watch covers the instance), so the last call returns at once with it
  // instead of waiting for its deadline.
  const std::string mark = instance_prefix() + "history-mark";
  return fenced("a read of the history", [&](Deadline d) {
    std::map<std::string, std::string> out;
    const int64_t until = store_->fenced_put(Fence{opt_.key, epoch_}, mark, "", d);
    int64_t from = from_revision;
    while (from <= until) {
      const auto events = store_->watch(instance_prefix(), from, d);
      if (events.empty()) break;
      for (const auto& e : events) {
        if (e.revision > until || e.key.compare(0, full.size(), full) != 0) continue;
        const std::string key = e.key.substr(instance_prefix().size());
        if (e.type == WatchEvent::Type::kPut) {
          out[key] = e.value;
        } else {
          out.erase(key);
        }
      }
      from = events.back().revision + 1;
    }
    return out;
  });
}

void Leadership::end_instance() {
  check();
  fenced("the end of the run", [&](Deadline d) {
    return store_->fenced_put(Fence{opt_.key, epoch_}, keys::instance(),
                              encode_instance({.epoch = instance_, .over = true}), d);
  });
}

void Leadership::stop_renewing() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
}

void Leadership::resign() {
  stop_renewing();
  resigned_ = true;
  try {
    store_->resign(opt_.key, epoch_, deadline_in(kCallMs));
    store_->revoke(lease_, deadline_in(kCallMs));
  } catch (const ControlError&) {  // the lease expires by itself
  }
}

}  // namespace bw::elastic
