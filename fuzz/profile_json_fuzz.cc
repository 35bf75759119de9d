// Layer profile JSON (plan/profile.h), as `plan --profile` reads it.
#include <optional>

#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "plan/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<bw::plan::Profile> profile;
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    profile = bw::plan::parse_profile(bw::json::parse(bw::fuzz::text(data, size), "fuzz.json"),
                                      "fuzz.json");
  });
  if (profile) (void)bw::plan::parse_profile(bw::plan::to_json(*profile), "printed");
  return 0;
}
