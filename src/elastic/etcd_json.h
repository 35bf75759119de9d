// The JSON of etcd's v3 gateway (etcd 3.4, grpc-gateway over the etcdserverpb protos), encoded
// and decoded in one place for control_store_etcd.cc. Keys and values travel as base64
// (proto3 `bytes`), 64-bit integers as decimal strings (proto3's JSON mapping; numbers are
// accepted too), and proto3 leaves every default field out: an absent revision is 0, an absent
// `succeeded` false, an absent event type PUT, an absent TTL 0.
//
// Keys given to the codec are relative to the run; it adds the prefix ("bw/{run}/") on the way out
// and takes it off on the way in. Every decoder checks what it reads and throws ConfigError
// naming the response when the text is not one (another server on the port, a proxy's error
// page): never a JSON library exception or a crash. Pure: the fuzz target fuzz/etcd_json_fuzz.cc
// feeds the decoders arbitrary bytes.
//
// Thread-safety: an EtcdCodec is immutable after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "elastic/control_store.h"

namespace bw::elastic {

// An error body of the gateway ({"error", "code", "message"}; inside a stream {"error":
// {"grpc_code", "message"}}): the gRPC status code and message.
struct EtcdError {
  int code = 0;  // 5 NOT_FOUND (a lease), 14 UNAVAILABLE (no leader), 4 DEADLINE_EXCEEDED, ...
  std::string message;
};

struct EtcdRange {
  int64_t revision = 0;
  std::vector<KeyValue> kvs;
};

// One message of a watch stream.
struct EtcdWatchMessage {
  int64_t revision = 0;
  bool created = false, canceled = false;
  int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// What a fenced transaction's reply says: nullopt when the fence did not hold.
using EtcdTxnReply = std::optional<TxnResult>;

class EtcdCodec {
 public:
  explicit EtcdCodec(std::string prefix) : prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }

  // Requests (the JSON body to POST).
  std::string range(const std::string& key) const;
  std::string put(const std::string& key, const std::string& value, int64_t lease) const;
  std::string delete_range(const std::string& key) const;
  std::string txn(const Txn& txn) const;
  std::string watch_create(const std::string& prefix, int64_t start_revision) const;
  static std::string lease_grant(int64_t ttl_s);
  static std::string lease_id(int64_t id);  // keepalive, revoke

  // Responses. `where` names the request in messages ("the etcd at h:p, /v3/kv/range").
  static std::optional<EtcdError> error(const std::string& text);
  EtcdRange decode_range(const std::string& text, const std::string& where) const;
  static int64_t decode_revision(const std::string& text, const std::string& where);  // put
  static int64_t decode_deleted(const std::string& text, const std::string& where);
  EtcdTxnReply decode_txn(const std::string& text, const Txn& txn, const std::string& where) const;
  static Lease decode_lease_grant(const std::string& text, const std::string& where);
  // The TTL left (0: the lease is gone).
  static int64_t decode_keepalive(const std::string& text, const std::string& where);
  EtcdWatchMessage decode_watch(const std::string& line, const std::string& where) const;
  // /version: the server's version as {major, minor, patch}.
  static std::vector<int> decode_version(const std::string& text, const std::string& where);

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  std::string relative(const std::string& full_key, const std::string& where) const;

  std::string prefix_;
};

// The end of the range of every key starting with `prefix` (etcd's GetPrefixRangeEnd): the
// prefix with its last byte below 0xff incremented and the rest dropped; "\0" for all keys.
std::string prefix_range_end(const std::string& prefix);

}  // namespace bw::elastic
