// Every reply of etcd's v3 JSON gateway the control store decodes (elastic/etcd_json.h): the
// input's first byte picks the reply, the rest is its body. A range reply that decodes is written
// back in the gateway's form and must decode to the same keys and values.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "elastic/etcd_json.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body = bw::fuzz::text(data + 1, size - 1);
  using namespace bw::elastic;
  const EtcdCodec codec("bw/run/");
  const auto run = [&] {
    switch (data[0] % 8) {
      case 0: {
        const EtcdRange r = codec.decode_range(body, "fuzz");
        nlohmann::json again{{"header", {{"revision", std::to_string(r.revision)}}},
                             {"kvs", nlohmann::json::array()}};
        for (const auto& kv : r.kvs) {
          again["kvs"].push_back({{"key", bw::base64_encode("bw/run/" + kv.key)},
                                  {"value", bw::base64_encode(kv.value)},
                                  {"create_revision", std::to_string(kv.create_revision)},
                                  {"mod_revision", std::to_string(kv.mod_revision)},
                                  {"version", std::to_string(kv.version)},
                                  {"lease", std::to_string(kv.lease)}});
        }
        const EtcdRange back = codec.decode_range(again.dump(), "again");
        if (back.revision != r.revision || back.kvs != r.kvs) std::abort();
        break;
      }
      case 1: {
        Txn t;
        t.when = {Compare::absent("k")};
        t.then = {TxnOp::put("k", "v"), TxnOp::get("k")};
        t.otherwise = {TxnOp::get("k")};
        if (data[0] & 8) t.fence = Fence{"leader", 7};
        const auto r = codec.decode_txn(body, t, "fuzz");
        if (r && r->reads.size() != 1) std::abort();
        break;
      }
      case 2:
        (void)codec.decode_watch(body, "fuzz");
        break;
      case 3:
        (void)EtcdCodec::decode_lease_grant(body, "fuzz");
        break;
      case 4:
        (void)EtcdCodec::decode_keepalive(body, "fuzz");
        break;
      case 5: {
        const auto v = EtcdCodec::decode_version(body, "fuzz");
        if (v.size() != 3) std::abort();
        break;
      }
      case 6:
        (void)EtcdCodec::error(body);
        break;
      case 7:
        (void)EtcdCodec::decode_revision(body, "fuzz");
        (void)EtcdCodec::decode_deleted(body, "fuzz");
        break;
    }
  };
  BW_FUZZ_EXPECT_CONFIG_ERRORS(run());
  return 0;
}
