// The backend-independent part of the control store: the convenience forms, the election on top
// of txn() and watch(), the bug checks and the --control URL. Pure (no LibTorch, no curl).
#include "elastic/control_store.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <set>

#include "core/check.h"

namespace bw::elastic {

Compare Compare::value_is(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.value = std::move(value);
  return c;
}
Compare Compare::mod_revision_is(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kModRevision;
  c.revision = revision;
  return c;
}
Compare Compare::create_revision_is(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kCreateRevision;
  c.revision = revision;
  return c;
}
Compare Compare::exists(std::string key) {
  Compare c = create_revision_is(std::move(key), 0);
  c.result = Result::kGreater;
  return c;
}

TxnOp TxnOp::put(std::string key, std::string value, int64_t lease) {
  return TxnOp{Type::kPut, std::move(key), std::move(value), lease};
}
TxnOp TxnOp::erase(std::string key) { return TxnOp{Type::kDelete, std::move(key), {}, 0}; }
TxnOp TxnOp::get(std::string key) { return TxnOp{Type::kGet, std::move(key), {}, 0}; }

void check_key(const std::string& key) { BW_CHECK(!key.empty(), "a control store key is empty"); }

void check_value(const std::string& key, const std::string& value) {
  check_key(key);
  BW_CHECK(value.size() <= kMaxValueBytes,
           "the value of control store key '{}' has {} bytes, over the limit of {}: bulky data "
           "does not belong in the control store",
           key, value.size(), kMaxValueBytes);
}

void check_txn(const Txn& txn) {
  for (const auto& c : txn.when) check_key(c.key);
  for (const auto* ops : {&txn.then, &txn.otherwise}) {
    std::set<std::string> written;
    for (const auto& op : *ops) {
      if (op.type == TxnOp::Type::kPut) {
        check_value(op.key, op.value);
      } else {
        check_key(op.key);
      }
      // etcd refuses a branch that writes one key twice; so does every backend.
      BW_CHECK(op.type == TxnOp::Type::kGet || written.insert(op.key).second,
               "a transaction branch writes control store key '{}' twice", op.key);
    }
  }
  if (txn.fence) check_key(txn.fence->key);
}

bool ControlStore::create(const std::string& key, const std::string& value, Deadline deadline,
                          int64_t lease) {
  Txn t;
  t.when = {Compare::absent(key)};
  t.then = {TxnOp::put(key, value, lease)};
  return txn(t, deadline).succeeded;
}

bool ControlStore::compare_and_set(const std::string& key, const std::string& expected,
                                   const std::string& value, Deadline deadline) {
  Txn t;
  t.when = {Compare::value_is(key, expected)};
  t.then = {TxnOp::put(key, value)};
  return txn(t, deadline).succeeded;
}

int64_t ControlStore::fenced_put(const Fence& fence, const std::string& key,
                                 const std::string& value, Deadline deadline) {
  Txn t;
  t.fence = fence;
  t.then = {TxnOp::put(key, value)};
  return txn(t, deadline).revision;
}

int64_t ControlStore::campaign(const std::string& key, const std::string& value, int64_t lease,
                               Deadline deadline) {
  BW_CHECK(lease != 0, "campaigning for '{}' needs a lease, so a dead leader's key goes", key);
  for (;;) {
    Txn t;
    t.when = {Compare::absent(key)};
    t.then = {TxnOp::put(key, value, lease)};
    t.otherwise = {TxnOp::get(key)};
    const TxnResult r = txn(t, deadline);
    if (r.succeeded) return r.revision;
    // Held: wait for the holder's key to go (resigned, revoked, or its lease expired).
    int64_t from = r.revision + 1;
    if (!r.reads.empty() && r.reads[0]) from = r.reads[0]->mod_revision + 1;
    bool gone = false;
    while (!gone) {
      const auto events = watch(key, from, deadline);
      if (events.empty()) {
        throw ControlTimedOut(fmt::format(
            "campaign for '{}' on the {} store: still held at the deadline", key, describe()));
      }
      for (const auto& e : events) {
        if (e.key == key && e.type == WatchEvent::Type::kDelete) gone = true;
        from = e.revision + 1;
      }
    }
  }
}

bool ControlStore::resign(const std::string& key, int64_t epoch, Deadline deadline) {
  Txn t;
  t.when = {Compare::create_revision_is(key, epoch)};
  t.then = {TxnOp::erase(key)};
  return txn(t, deadline).succeeded;
}

std::optional<Leader> ControlStore::leader(const std::string& key, Deadline deadline) {
  const auto kv = get(key, deadline);
  if (!kv) return std::nullopt;
  return Leader{kv->value, kv->create_revision, kv->lease};
}

// --- URL

std::string ControlUrl::Endpoint::url() const {
  return host.find(':') != std::string::npos ? fmt::format("http://[{}]:{}", host, port)
                                             : fmt::format("http://{}:{}", host, port);
}
std::string ControlUrl::Endpoint::str() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

namespace {

constexpr const char* kUrlForm =
    "write --control=embedded or --control=etcd://HOST:PORT[,HOST:PORT...] (IPv6: [ADDR]:PORT)";

bool host_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

ControlUrl::Endpoint parse_endpoint(const std::string& text, const std::string& url) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(
        fmt::format("--control '{}': endpoint '{}' {}; {}", url, text, why, kUrlForm));
  };
  ControlUrl::Endpoint ep;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) throw bad("has '[' without ']'");
    ep.host = text.substr(1, close - 1);
    if (ep.host.empty()) throw bad("has an empty host");
    for (char c : ep.host) {
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) {
        throw bad("is not an IPv6 address in brackets");
      }
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') throw bad("has no port");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) throw bad("has no port");
    ep.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (ep.host.empty()) throw bad("has an empty host");
    for (char c : ep.host) {
      if (!host_char_ok(c)) throw bad(fmt::format("has a host with the character '{}'", c));
    }
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    throw bad(fmt::format("has the port '{}', not a number from 1 to 65535", port));
  }
  ep.port = value;
  return ep;
}

}  // namespace

ControlUrl parse_control_url(const std::string& url) {
  ControlUrl out;
  if (url.empty() || url == "embedded") return out;
  const std::string scheme = "etcd://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    throw ConfigError(
        fmt::format("--control '{}' is neither 'embedded' nor an etcd:// URL; {}", url, kUrlForm));
  }
  out.kind = ControlUrl::Kind::kEtcd;
  const std::string rest = url.substr(scheme.size());
  if (rest.empty())
    throw ConfigError(fmt::format("--control '{}' names no endpoint; {}", url, kUrlForm));
  size_t pos = 0;
  for (;;) {
    const size_t comma = rest.find(',', pos);
    const std::string part =
        rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (part.empty()) {
      throw ConfigError(fmt::format("--control '{}' has an empty endpoint; {}", url, kUrlForm));
    }
    if (part.find('/') != std::string::npos) {
      throw ConfigError(
          fmt::format("--control '{}': endpoint '{}' has a path; an endpoint is HOST:PORT only; {}",
                      url, part, kUrlForm));
    }
    out.endpoints.push_back(parse_endpoint(part, url));
    for (size_t i = 0; i + 1 < out.endpoints.size(); ++i) {
      if (out.endpoints[i].str() == out.endpoints.back().str()) {
        throw ConfigError(fmt::format("--control '{}' names {} twice; {}", url,
                                      out.endpoints.back().str(), kUrlForm));
      }
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void check_run_id(const std::string& run_id) {
  bool ok = !run_id.empty() && run_id.size() <= 64;
  for (char c : run_id) ok = ok && (host_char_ok(c));
  if (!ok) {
    throw ConfigError(fmt::format(
        "run id '{}' cannot name a control store prefix: use 1 to 64 letters, digits, '.', '_' "
        "or '-'",
        run_id));
  }
}

}  // namespace bw::elastic
