#include "elastic/leadership.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/check.h"

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
    LeaderRecord holder;
    try {
      holder = decode_leader(r.reads[0]->value, opt_.key);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format(
          "the run's leader key in the {} control store holds something that is not a "
          "coordinator's record ({}); give this run another run id",
          store_->describe(), e.what()));
    }
    const std::string who = fmt::format("the live coordinator at {} (host {}, pid {}, epoch {})",
                                        holder.address, holder.host, holder.pid,
                                        r.reads[0]->create_revision);
    if (holder.config != opt_.record.config) {
      throw ConfigError(fmt::format(
          "this run id is led by {} with another config (the {} control store); give this run "
          "another run id, or stop that coordinator",
          who, store_->describe()));
    }
    throw ConfigError(fmt::format(
        "this run id is already led by {} with the same config (the {} control store): a second "
        "active coordinator would split the run; stop that one first, or give another run id",
        who, store_->describe()));
  }
  epoch_ = r.revision;
  renewed_ms_ = now_ms();
  renewer_ = std::thread([this] { renew_loop(); });
}

Leadership::~Leadership() {
  stop_renewing();
  if (resigned_) return;
  try {  // a run that ended without resign(): its lease goes now rather than after its TTL
    store_->revoke(lease_, deadline_in(std::chrono::milliseconds(1000)));
  } catch (const ControlError&) {
  }
}

std::string Leadership::instance_prefix() const { return fmt::format("i{}/", epoch_); }

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
