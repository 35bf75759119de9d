#include "plan/profile.h"

#include <gtest/gtest.h>

#include "plan/cluster.h"

namespace bw::plan {
namespace {

json::Json good() {
  return json::Json::parse(R"({
    "model": "tiny", "microbatch_size": 2, "device": "cpu",
    "layers": [
      {"name": "emb", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 10,
       "output_bytes": 20, "param_bytes": 30},
      {"name": "blk", "forward_ms": 1.5, "backward_ms": 3, "backward_input_ms": 1.5,
       "backward_weight_ms": 1.5, "activation_bytes": 10, "output_bytes": 20, "param_bytes": 30}
    ]})");
}

std::string error_of(const json::Json& doc) {
  try {
    parse_profile(doc, "p.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Profile, ParsesAndRoundTrips) {
  Profile p = parse_profile(good());
  ASSERT_EQ(p.num_layers(), 2);
  EXPECT_EQ(p.microbatch_size, 2);
  EXPECT_EQ(*p.device, "cpu");
  EXPECT_DOUBLE_EQ(p.layers[1].backward_ms, 3);
  EXPECT_DOUBLE_EQ(*p.layers[1].backward_weight_ms, 1.5);
  EXPECT_FALSE(p.layers[0].backward_input_ms.has_value());
  EXPECT_EQ(to_json(parse_profile(to_json(p))), to_json(p));
  std::string path = ::testing::TempDir() + "/profile_roundtrip.json";
  save_profile(path, p);
  EXPECT_EQ(to_json(load_profile(path)), to_json(p));
}

struct Bad {
  std::string what;
  std::function<void(json::Json&)> edit;
  std::vector<std::string> expect;  // substrings of the message
};

TEST(Profile, RejectsBadInputNamingLayerAndField) {
  std::vector<Bad> cases = {
      {"missing field",
       [](json::Json& j) { j["layers"][1].erase("forward_ms"); },
       {"layer 1", "blk", "forward_ms"}},
      {"negative time",
       [](json::Json& j) { j["layers"][0]["backward_ms"] = -1; },
       {"layer 0", "emb", "backward_ms", ">= 0"}},
      {"wrong type",
       [](json::Json& j) { j["layers"][1]["param_bytes"] = "big"; },
       {"layer 1", "param_bytes", "number"}},
      {"zero layers",
       [](json::Json& j) { j["layers"] = json::Json::array(); },
       {"at least one layer"}},
      {"layers not array", [](json::Json& j) { j["layers"] = 3; }, {"layers", "array"}},
      {"half a split",
       [](json::Json& j) { j["layers"][0]["backward_input_ms"] = 1; },
       {"layer 0", "backward_weight_ms"}},
      {"unknown key", [](json::Json& j) { j["layers"][0]["fwd_ms"] = 1; }, {"layer 0", "fwd_ms"}},
      {"bad microbatch", [](json::Json& j) { j["microbatch_size"] = 0; }, {"microbatch_size"}},
      {"missing model", [](json::Json& j) { j.erase("model"); }, {"model"}},
  };
  for (const auto& c : cases) {
    json::Json j = good();
    c.edit(j);
    std::string msg = error_of(j);
    ASSERT_FALSE(msg.empty()) << c.what << ": accepted";
    EXPECT_NE(msg.find("p.json"), std::string::npos) << c.what << ": " << msg;
    for (const auto& s : c.expect)
      EXPECT_NE(msg.find(s), std::string::npos) << c.what << ": '" << s << "' not in: " << msg;
  }
}

TEST(Cluster, ParsesAndValidates) {
  auto j = json::Json::parse(
      R"({"nodes": 4, "devices_per_node": 8, "device_memory_gb": 80, "inter_node_gbps": 100})");
  Cluster c = parse_cluster(j);
  EXPECT_EQ(c.num_nodes, 4);
  EXPECT_DOUBLE_EQ(c.inter_node_gbps, 100);
  // 1 GB at 100 Gbit/s = 80 ms, plus latency.
  EXPECT_NEAR(c.transfer_ms(1e9, false), 80 + c.latency_us * 1e-3, 1e-9);
  j["devices_per_node"] = 0;
  EXPECT_THROW(parse_cluster(j), ConfigError);
  j["devices_per_node"] = 8;
  j["speed"] = 1;
  EXPECT_THROW(parse_cluster(j), ConfigError);
}

}  // namespace
}  // namespace bw::plan
