// Cluster JSON (plan/cluster.h), as `plan --cluster` reads it.
#include <optional>

#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "plan/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<bw::plan::Cluster> cluster;
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    auto parsed = bw::plan::parse_cluster(
        bw::json::parse(bw::fuzz::text(data, size), "fuzz.json"), "fuzz.json");
    bw::plan::validate(parsed);
    cluster = parsed;
  });
  if (cluster) (void)bw::plan::parse_cluster(bw::plan::to_json(*cluster), "printed");
  return 0;
}
