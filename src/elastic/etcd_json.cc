#include "elastic/etcd_json.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/error.h"

namespace bw::elastic {
namespace {

using Json = nlohmann::json;

ConfigError not_etcd(const std::string& where, const std::string& why) {
  return ConfigError(
      fmt::format("{} answered with something that is not an etcd v3 reply ({}); "
                  "point --control at etcd 3.4 or newer",
                  where, why));
}

Json parse(const std::string& text, const std::string& where) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw not_etcd(where, "not JSON");
  if (!doc.is_object()) throw not_etcd(where, "not a JSON object");
  return doc;
}

const Json* field(const Json& obj, const char* name) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// An int64 as proto3 writes it: a decimal string, or a number; absent = 0.
int64_t i64(const Json& obj, const char* name, const std::string& where) {
  const Json* v = field(obj, name);
  if (!v) return 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw not_etcd(where, fmt::format("'{}' out of range", name));
    }
    return v->get<int64_t>();
  }
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    int64_t out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) return out;
  }
  throw not_etcd(where, fmt::format("'{}' is not a 64-bit integer", name));
}

bool flag(const Json& obj, const char* name, const std::string& where) {
  const Json* v = field(obj, name);
  if (!v) return false;
  if (!v->is_boolean()) throw not_etcd(where, fmt::format("'{}' is not a boolean", name));
  return v->get<bool>();
}

std::string str(const Json& obj, const char* name, const std::string& where) {
  const Json* v = field(obj, name);
  if (!v) return {};
  if (!v->is_string()) throw not_etcd(where, fmt::format("'{}' is not a string", name));
  return v->get<std::string>();
}

std::string bytes(const Json& obj, const char* name, const std::string& where) {
  const auto b = base64_decode(str(obj, name, where));
  if (!b) throw not_etcd(where, fmt::format("'{}' is not base64", name));
  return *b;
}

const Json& object(const Json& obj, const char* name, const std::string& where) {
  static const Json kEmpty = Json::object();
  const Json* v = field(obj, name);
  if (!v) return kEmpty;
  if (!v->is_object()) throw not_etcd(where, fmt::format("'{}' is not an object", name));
  return *v;
}

const Json& array(const Json& obj, const char* name, const std::string& where) {
  static const Json kEmpty = Json::array();
  const Json* v = field(obj, name);
  if (!v) return kEmpty;
  if (!v->is_array()) throw not_etcd(where, fmt::format("'{}' is not an array", name));
  return *v;
}

int64_t header_revision(const Json& reply, const std::string& where) {
  return i64(object(reply, "header", where), "revision", where);
}

std::string i64_text(int64_t v) { return std::to_string(v); }

const char* result_name(Compare::Result r) {
  switch (r) {
    case Compare::Result::kEqual:
      return "EQUAL";
    case Compare::Result::kNotEqual:
      return "NOT_EQUAL";
    case Compare::Result::kLess:
      return "LESS";
    case Compare::Result::kGreater:
      return "GREATER";
  }
  return "EQUAL";
}

}  // namespace

std::string prefix_range_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string EtcdCodec::relative(const std::string& full_key, const std::string& where) const {
  if (full_key.compare(0, prefix_.size(), prefix_) != 0) {
    throw not_etcd(where, "a key outside the run's prefix");
  }
  return full_key.substr(prefix_.size());
}

// --- requests

std::string EtcdCodec::range(const std::string& key) const {
  return Json{{"key", base64_encode(full(key))}}.dump();
}

std::string EtcdCodec::put(const std::string& key, const std::string& value, int64_t lease) const {
  Json j{{"key", base64_encode(full(key))}, {"value", base64_encode(value)}};
  if (lease != 0) j["lease"] = i64_text(lease);
  return j.dump();
}

std::string EtcdCodec::delete_range(const std::string& key) const {
  return Json{{"key", base64_encode(full(key))}}.dump();
}

std::string EtcdCodec::txn(const Txn& txn) const {
  const auto compare = [&](const Compare& c) {
    Json j{{"key", base64_encode(full(c.key))}, {"result", result_name(c.result)}};
    switch (c.target) {
      case Compare::Target::kValue:
        j["target"] = "VALUE";
        j["value"] = base64_encode(c.value);
        break;
      case Compare::Target::kCreateRevision:
        j["target"] = "CREATE";
        j["create_revision"] = i64_text(c.revision);
        break;
      case Compare::Target::kModRevision:
        j["target"] = "MOD";
        j["mod_revision"] = i64_text(c.revision);
        break;
    }
    return j;
  };
  const auto ops = [&](const std::vector<TxnOp>& list) {
    Json out = Json::array();
    for (const auto& op : list) {
      switch (op.type) {
        case TxnOp::Type::kPut: {
          Json p{{"key", base64_encode(full(op.key))}, {"value", base64_encode(op.value)}};
          if (op.lease != 0) p["lease"] = i64_text(op.lease);
          out.push_back(Json{{"request_put", p}});
          break;
        }
        case TxnOp::Type::kDelete:
          out.push_back(Json{{"request_delete_range", {{"key", base64_encode(full(op.key))}}}});
          break;
        case TxnOp::Type::kGet:
          out.push_back(Json{{"request_range", {{"key", base64_encode(full(op.key))}}}});
          break;
      }
    }
    return out;
  };
  Json inner{
      {"compare", Json::array()}, {"success", ops(txn.then)}, {"failure", ops(txn.otherwise)}};
  for (const auto& c : txn.when) inner["compare"].push_back(compare(c));
  if (!txn.fence) return inner.dump();
  // The fence is an outer transaction around the caller's: nothing of it runs when it fails.
  Json fence = Json::array();
  fence.push_back(compare(Compare::create_revision_is(txn.fence->key, txn.fence->epoch)));
  Json success = Json::array();
  success.push_back(Json{{"request_txn", inner}});
  Json outer{{"compare", fence}, {"success", success}, {"failure", Json::array()}};
  return outer.dump();
}

std::string EtcdCodec::watch_create(const std::string& prefix, int64_t start_revision) const {
  return Json{{"create_request",
               {{"key", base64_encode(full(prefix))},
                {"range_end", base64_encode(prefix_range_end(full(prefix)))},
                {"start_revision", i64_text(start_revision)}}}}
      .dump();
}

std::string EtcdCodec::lease_grant(int64_t ttl_s) { return Json{{"TTL", i64_text(ttl_s)}}.dump(); }

std::string EtcdCodec::lease_id(int64_t id) { return Json{{"ID", i64_text(id)}}.dump(); }

// --- responses

std::optional<EtcdError> EtcdCodec::error(const std::string& text) {
  Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  const Json* e = field(doc, "error");
  if (!e) return std::nullopt;
  EtcdError out;
  const std::string where = "an error reply";
  try {
    if (e->is_object()) {  // inside a stream
      out.code = static_cast<int>(i64(*e, "grpc_code", where));
      out.message = str(*e, "message", where);
    } else {
      out.code = static_cast<int>(i64(doc, "code", where));
      out.message = str(doc, "message", where);
      if (out.message.empty() && e->is_string()) out.message = e->get<std::string>();
    }
  } catch (const ConfigError&) {
    out.code = 2;  // UNKNOWN
    out.message = e->dump().substr(0, 200);
  }
  return out;
}

EtcdRange EtcdCodec::decode_range(const std::string& text, const std::string& where) const {
  const Json doc = parse(text, where);
  EtcdRange out;
  out.revision = header_revision(doc, where);
  for (const auto& kv : array(doc, "kvs", where)) {
    if (!kv.is_object()) throw not_etcd(where, "a kvs entry is not an object");
    KeyValue k;
    k.key = relative(bytes(kv, "key", where), where);
    k.value = bytes(kv, "value", where);
    k.create_revision = i64(kv, "create_revision", where);
    k.mod_revision = i64(kv, "mod_revision", where);
    k.version = i64(kv, "version", where);
    k.lease = i64(kv, "lease", where);
    out.kvs.push_back(std::move(k));
  }
  return out;
}

int64_t EtcdCodec::decode_revision(const std::string& text, const std::string& where) {
  return header_revision(parse(text, where), where);
}

int64_t EtcdCodec::decode_deleted(const std::string& text, const std::string& where) {
  return i64(parse(text, where), "deleted", where);
}

EtcdTxnReply EtcdCodec::decode_txn(const std::string& text, const Txn& txn,
                                   const std::string& where) const {
  const Json doc = parse(text, where);
  TxnResult out;
  out.revision = header_revision(doc, where);
  const Json* reply = &doc;
  if (txn.fence) {
    if (!flag(doc, "succeeded", where)) return std::nullopt;
    const Json& responses = array(doc, "responses", where);
    if (responses.size() != 1) throw not_etcd(where, "a fenced transaction without its inner one");
    reply = &object(responses[0], "response_txn", where);
  }
  out.succeeded = flag(*reply, "succeeded", where);
  const auto& ops = out.succeeded ? txn.then : txn.otherwise;
  const Json& responses = array(*reply, "responses", where);
  if (responses.size() != ops.size()) {
    throw not_etcd(where,
                   fmt::format("{} responses to {} operations", responses.size(), ops.size()));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].type != TxnOp::Type::kGet) continue;
    const Json& r = object(responses[i], "response_range", where);
    const Json& kvs = array(r, "kvs", where);
    if (kvs.empty()) {
      out.reads.emplace_back();
      continue;
    }
    // Decode through the range decoder's rules (one entry).
    EtcdRange one = decode_range(Json{{"kvs", Json::array({kvs[0]})}}.dump(), where);
    out.reads.emplace_back(std::move(one.kvs.at(0)));
  }
  return out;
}

Lease EtcdCodec::decode_lease_grant(const std::string& text, const std::string& where) {
  const Json doc = parse(text, where);
  Lease out{i64(doc, "ID", where), i64(doc, "TTL", where)};
  if (out.id == 0) throw not_etcd(where, "a lease grant without an ID");
  return out;
}

int64_t EtcdCodec::decode_keepalive(const std::string& text, const std::string& where) {
  // A stream: the first message is the answer.
  const std::string first = text.substr(0, text.find('\n'));
  const Json doc = parse(first, where);
  return i64(object(doc, "result", where), "TTL", where);
}

EtcdWatchMessage EtcdCodec::decode_watch(const std::string& line, const std::string& where) const {
  const Json doc = parse(line, where);
  const Json& r = object(doc, "result", where);
  EtcdWatchMessage out;
  out.revision = header_revision(r, where);
  out.created = flag(r, "created", where);
  out.canceled = flag(r, "canceled", where);
  out.compact_revision = i64(r, "compact_revision", where);
  out.cancel_reason = str(r, "cancel_reason", where);
  for (const auto& e : array(r, "events", where)) {
    if (!e.is_object()) throw not_etcd(where, "an event is not an object");
    WatchEvent w;
    const std::string type = str(e, "type", where);
    if (type == "DELETE") {
      w.type = WatchEvent::Type::kDelete;
    } else if (type.empty() || type == "PUT") {
      w.type = WatchEvent::Type::kPut;
    } else {
      throw not_etcd(where, fmt::format("an event of type '{}'", type.substr(0, 40)));
    }
    const Json& kv = object(e, "kv", where);
    w.key = relative(bytes(kv, "key", where), where);
    w.value = bytes(kv, "value", where);
    w.revision = i64(kv, "mod_revision", where);
    out.events.push_back(std::move(w));
  }
  return out;
}

std::vector<int> EtcdCodec::decode_version(const std::string& text, const std::string& where) {
  const Json doc = parse(text, where);
  const std::string v = str(doc, "etcdserver", where);
  std::vector<int> out;
  size_t pos = 0;
  while (out.size() < 3) {
    int part = 0;
    const auto [end, ec] = std::from_chars(v.data() + pos, v.data() + v.size(), part);
    if (ec != std::errc()) break;
    out.push_back(part);
    pos = static_cast<size_t>(end - v.data());
    if (pos >= v.size() || v[pos] != '.') break;
    ++pos;
  }
  if (out.size() < 2) throw not_etcd(where, fmt::format("/version says '{}'", v.substr(0, 40)));
  while (out.size() < 3) out.push_back(0);
  return out;
}

}  // namespace bw::elastic
