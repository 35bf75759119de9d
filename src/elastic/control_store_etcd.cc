#include "elastic/control_store_etcd.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <functional>
#include <thread>

#include "core/check.h"

namespace bw::elastic {

struct EtcdControlStore::Handle {
  CURL* curl = nullptr;
  curl_slist* headers = nullptr;
};

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kConnectTimeout{500};
constexpr milliseconds kRoundPause{20};

struct Transfer {
  std::string body;
  std::function<bool(const std::string&)> on_data;  // false: stop reading
  bool stopped = false;
};

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->body.append(data, size * count);
  if (t->on_data && !t->on_data(t->body)) {
    t->stopped = true;
    return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  }
  return size * count;
}

int64_t left_ms(Deadline deadline) {
  return std::chrono::duration_cast<milliseconds>(deadline - ControlClock::now()).count();
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool contains(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

EtcdControlStore::EtcdControlStore(std::vector<ControlUrl::Endpoint> endpoints,
                                   const std::string& run_id)
    : endpoints_(std::move(endpoints)), run_id_(run_id), codec_("bw/" + run_id + "/") {
  init_curl_once();
}

EtcdControlStore::~EtcdControlStore() {
  for (Handle* h : pool_) {
    curl_slist_free_all(h->headers);
    curl_easy_cleanup(h->curl);
    delete h;
  }
}

EtcdControlStore::Handle* EtcdControlStore::take() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      Handle* h = pool_.back();
      pool_.pop_back();
      return h;
    }
  }
  auto* h = new Handle;
  h->curl = curl_easy_init();
  BW_CHECK(h->curl != nullptr, "curl_easy_init failed");
  h->headers = curl_slist_append(nullptr, "Content-Type: application/json");
  h->headers = curl_slist_append(h->headers, "Expect:");  // no 100-continue round trip
  curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->headers);
  curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h->curl, CURLOPT_PROXY, "");  // never through an environment's proxy
  return h;
}

void EtcdControlStore::give(Handle* h) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.push_back(h);
}

std::string EtcdControlStore::describe() const {
  std::vector<std::string> eps;
  for (const auto& e : endpoints_) eps.push_back(e.str());
  return fmt::format("etcd at {} (run {})", fmt::join(eps, ","), run_id_);
}

std::string EtcdControlStore::where(size_t endpoint, const std::string& path) const {
  return fmt::format("the etcd at {} ({})", endpoints_[endpoint].str(), path);
}

namespace {

// One HTTP exchange; the curl code, the HTTP status and the body.
struct Exchange {
  CURLcode rc = CURLE_OK;
  long http = 0;
  bool stopped = false;
  bool sent = false;  // the request went out: it may have reached a member
  std::string body;
};

Exchange exchange(CURL* curl, const std::string& url, const std::string* post, int64_t timeout_ms,
                  std::function<bool(const std::string&)> on_data) {
  Transfer t;
  t.on_data = std::move(on_data);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (post) {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(post->size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, timeout_ms)));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::clamp<int64_t>(timeout_ms, 1, kConnectTimeout.count())));
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  Exchange out;
  out.rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.http);
  long request_bytes = 0;  // 0 until the request went out (a reused connection has no connect time)
  curl_easy_getinfo(curl, CURLINFO_REQUEST_SIZE, &request_bytes);
  out.sent = request_bytes > 0;
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, nullptr);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, nullptr);
  out.stopped = t.stopped;
  out.body = std::move(t.body);
  return out;
}

// Failures where the request cannot have reached a member: safe to send elsewhere.
bool not_sent(CURLcode rc) {
  return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
         rc == CURLE_COULDNT_RESOLVE_PROXY;
}

}  // namespace

std::string EtcdControlStore::call(const std::string& path, const std::string& body,
                                   Deadline deadline) {
  return call_stream(path, body, deadline, nullptr);
}

std::string EtcdControlStore::call_stream(const std::string& path, const std::string& body,
                                          Deadline deadline,
                                          std::function<bool(const std::string&)> on_data) {
  const size_t n = endpoints_.size();
  for (;;) {
    std::vector<std::string> failures;
    const size_t start = preferred_.load();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (start + k) % n;
      const int64_t left = left_ms(deadline);
      if (left <= 0) break;
      Handle* h = take();
      Exchange x;
      try {
        x = exchange(h->curl, endpoints_[i].url() + path, &body, left, on_data);
      } catch (...) {
        give(h);
        throw;
      }
      give(h);
      if (x.stopped) {
        preferred_ = i;
        return x.body;
      }
      const bool connect_timeout = x.rc == CURLE_OPERATION_TIMEDOUT && !x.sent;
      if (not_sent(x.rc) || connect_timeout) {
        failures.push_back(fmt::format("{}: {}", endpoints_[i].str(), curl_easy_strerror(x.rc)));
        continue;
      }
      if (x.rc == CURLE_OPERATION_TIMEDOUT) {
        if (on_data) return x.body;  // a watch that saw nothing before its deadline
        throw ControlTimedOut(fmt::format("{} did not answer before the deadline", where(i, path)));
      }
      if (x.rc != CURLE_OK) {
        if (on_data) {  // a read: safe to ask another member
          failures.push_back(fmt::format("{}: {}", endpoints_[i].str(), curl_easy_strerror(x.rc)));
          continue;
        }
        throw ControlUnavailable(fmt::format("{} failed: {}; the outcome of the call is unknown",
                                             where(i, path), curl_easy_strerror(x.rc)));
      }
      const std::string first_line = x.body.substr(0, x.body.find('\n'));
      if (const auto e = EtcdCodec::error(first_line)) {
        const std::string what =
            fmt::format("{}: {} (code {})", where(i, path), e->message, e->code);
        if (e->code == 14 &&
            (contains(e->message, "no leader") || contains(e->message, "not capable") ||
             contains(e->message, "leader changed"))) {
          failures.push_back(fmt::format("{}: {}", endpoints_[i].str(), e->message));
          continue;  // not applied: another member may have a leader
        }
        if (e->code == 5 && contains(e->message, "lease not found")) throw LeaseGone(what);
        if (e->code == 4) throw ControlTimedOut(what);
        if (e->code == 3) throw InternalError(what);  // a request breakwater should not make
        throw ControlUnavailable(what);
      }
      if (x.http == 404) {
        throw ConfigError(
            fmt::format("{} has no {} (HTTP 404): not etcd's v3 gateway; run etcd "
                        "3.4 or newer there",
                        endpoints_[i].str(), path));
      }
      if (x.http != 200) {
        throw ControlUnavailable(fmt::format("{} answered HTTP {}", where(i, path), x.http));
      }
      preferred_ = i;
      return x.body;
    }
    if (left_ms(deadline) <= kRoundPause.count()) {
      throw ControlUnavailable(
          fmt::format("no etcd member could serve {} before the deadline: {}", path,
                      failures.empty() ? std::string("(the deadline had passed)")
                                       : fmt::format("{}", fmt::join(failures, "; "))));
    }
    std::this_thread::sleep_for(kRoundPause);
  }
}

std::unique_ptr<EtcdControlStore> EtcdControlStore::connect(const ControlUrl& url,
                                                            const std::string& run_id,
                                                            Deadline deadline) {
  if (url.kind != ControlUrl::Kind::kEtcd || url.endpoints.empty()) {
    throw ConfigError("the etcd control store needs --control=etcd://HOST:PORT[,HOST:PORT...]");
  }
  check_run_id(run_id);
  std::unique_ptr<EtcdControlStore> store(new EtcdControlStore(url.endpoints, run_id));
  std::vector<std::string> failures;
  for (;;) {
    failures.clear();
    for (size_t i = 0; i < store->endpoints_.size(); ++i) {
      const int64_t left = left_ms(deadline);
      if (left <= 0) break;
      Handle* h = store->take();
      const Exchange x =
          exchange(h->curl, store->endpoints_[i].url() + "/version", nullptr, left, nullptr);
      store->give(h);
      const std::string ep = store->endpoints_[i].str();
      if (x.rc != CURLE_OK) {
        failures.push_back(fmt::format("{} ({})", ep, curl_easy_strerror(x.rc)));
        continue;
      }
      if (x.http != 200) {
        failures.push_back(fmt::format("{} (HTTP {} on /version)", ep, x.http));
        continue;
      }
      const auto v = EtcdCodec::decode_version(x.body, store->where(i, "/version"));
      if (v[0] < 3 || (v[0] == 3 && v[1] < 4)) {
        throw ConfigError(fmt::format(
            "the etcd at {} runs {}.{}.{}; breakwater's control store needs etcd 3.4 or newer "
            "(its v3 JSON gateway under /v3/)",
            ep, v[0], v[1], v[2]));
      }
      store->preferred_ = i;
      return store;
    }
    if (left_ms(deadline) <= 100) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::vector<std::string> eps;
  for (const auto& e : url.endpoints) eps.push_back(e.str());
  throw ConfigError(fmt::format(
      "etcd is unreachable: tried {} ({}); start etcd there or fix --control", fmt::join(eps, ", "),
      failures.empty() ? std::string("no time left")
                       : fmt::format("{}", fmt::join(failures, "; "))));
}

EtcdRange EtcdControlStore::range(const std::string& key, Deadline deadline) {
  check_key(key);
  return codec_.decode_range(call("/v3/kv/range", codec_.range(key), deadline),
                             describe() + " /v3/kv/range");
}

std::optional<KeyValue> EtcdControlStore::get(const std::string& key, Deadline deadline) {
  auto r = range(key, deadline);
  if (r.kvs.empty()) return std::nullopt;
  return std::move(r.kvs.front());
}

int64_t EtcdControlStore::revision(Deadline deadline) {
  return codec_
      .decode_range(call("/v3/kv/range", codec_.range(""), deadline), describe() + " /v3/kv/range")
      .revision;
}

int64_t EtcdControlStore::put(const std::string& key, const std::string& value, Deadline deadline,
                              int64_t lease) {
  check_value(key, value);
  return EtcdCodec::decode_revision(call("/v3/kv/put", codec_.put(key, value, lease), deadline),
                                    describe() + " /v3/kv/put");
}

bool EtcdControlStore::erase(const std::string& key, Deadline deadline) {
  check_key(key);
  return EtcdCodec::decode_deleted(call("/v3/kv/deleterange", codec_.delete_range(key), deadline),
                                   describe() + " /v3/kv/deleterange") > 0;
}

TxnResult EtcdControlStore::txn(const Txn& t, Deadline deadline) {
  check_txn(t);
  auto r =
      codec_.decode_txn(call("/v3/kv/txn", codec_.txn(t), deadline), t, describe() + " /v3/kv/txn");
  if (!r) {
    throw FencedOut(
        fmt::format("'{}' no longer holds epoch {} on the {}: another leader has taken over, "
                    "nothing was written",
                    t.fence->key, t.fence->epoch, describe()));
  }
  return std::move(*r);
}

int64_t EtcdControlStore::add(const std::string& key, int64_t delta, Deadline deadline) {
  std::optional<KeyValue> kv = get(key, deadline);
  for (;;) {
    int64_t value = 0;
    if (kv) {
      const auto& s = kv->value;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      BW_CHECK(ec == std::errc() && end == s.data() + s.size(),
               "add() on control store key '{}' holding '{}', not an integer", key,
               s.substr(0, 40));
    }
    Txn t;
    t.when = {Compare::mod_revision_is(key, kv ? kv->mod_revision : 0)};
    t.then = {TxnOp::put(key, std::to_string(value + delta))};
    t.otherwise = {TxnOp::get(key)};
    const TxnResult r = txn(t, deadline);
    if (r.succeeded) return value + delta;
    kv = r.reads.at(0);
  }
}

void EtcdControlStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& key : keys) {
    for (;;) {
      const EtcdRange r = range(key, deadline);
      if (!r.kvs.empty()) break;
      bool put = false;
      int64_t from = r.revision + 1;
      while (!put) {
        const auto events = watch(key, from, deadline);
        if (events.empty()) {
          throw ControlTimedOut(
              fmt::format("waited for '{}' on the {} until the deadline", key, describe()));
        }
        for (const auto& e : events) {
          if (e.key == key && e.type == WatchEvent::Type::kPut) put = true;
          from = e.revision + 1;
        }
      }
    }
  }
}

std::vector<WatchEvent> EtcdControlStore::watch(const std::string& prefix, int64_t from_revision,
                                                Deadline deadline) {
  check_key(prefix);
  const std::string what = describe() + " /v3/watch";
  std::vector<WatchEvent> events;
  size_t parsed = 0;
  std::optional<EtcdError> failed;
  std::optional<std::string> bad;
  int64_t compacted = 0;
  const auto on_data = [&](const std::string& body) {
    size_t eol;
    while ((eol = body.find('\n', parsed)) != std::string::npos) {
      const std::string line = body.substr(parsed, eol - parsed);
      parsed = eol + 1;
      if (line.empty()) continue;
      if (auto e = EtcdCodec::error(line)) {
        failed = e;
        return false;
      }
      try {
        EtcdWatchMessage m = codec_.decode_watch(line, what);
        if (m.canceled) {
          compacted = m.compact_revision > 0 ? m.compact_revision : -1;
          return false;
        }
        for (auto& ev : m.events) events.push_back(std::move(ev));
      } catch (const ConfigError& e) {
        bad = e.what();
        return false;
      }
      if (!events.empty()) return false;
    }
    return true;
  };
  const int64_t start = std::max<int64_t>(from_revision, 1);
  call_stream("/v3/watch", codec_.watch_create(prefix, start), deadline, on_data);
  if (bad) throw ConfigError(*bad);
  if (failed) {
    throw ControlUnavailable(fmt::format("{}: {} (code {})", what, failed->message, failed->code));
  }
  if (compacted != 0) {
    throw ControlUnavailable(fmt::format(
        "{}: the history from revision {} is compacted (up to {}); the watcher must re-read the "
        "state",
        what, start, compacted));
  }
  return events;
}

Lease EtcdControlStore::grant_lease(int64_t ttl_s, Deadline deadline) {
  BW_CHECK(ttl_s >= 1, "a lease needs a TTL of at least 1 s, not {}", ttl_s);
  return EtcdCodec::decode_lease_grant(
      call("/v3/lease/grant", EtcdCodec::lease_grant(ttl_s), deadline),
      describe() + " /v3/lease/grant");
}

int64_t EtcdControlStore::keep_alive(int64_t lease, Deadline deadline) {
  const int64_t ttl =
      EtcdCodec::decode_keepalive(call("/v3/lease/keepalive", EtcdCodec::lease_id(lease), deadline),
                                  describe() + " /v3/lease/keepalive");
  if (ttl <= 0) {
    throw LeaseGone(
        fmt::format("lease {:x} on the {} has expired or was revoked", lease, describe()));
  }
  return ttl;
}

void EtcdControlStore::revoke(int64_t lease, Deadline deadline) {
  try {
    call("/v3/lease/revoke", EtcdCodec::lease_id(lease), deadline);
  } catch (const LeaseGone&) {
    // Already gone: what revoking wants.
  }
}

}  // namespace bw::elastic
