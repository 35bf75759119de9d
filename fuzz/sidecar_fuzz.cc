// The checkpoint sidecar JSON (runtime/checkpoint_format.h), as a resume reads it.
#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    const auto doc = bw::json::parse(bw::fuzz::text(data, size), "checkpoint.json");
    (void)bw::runtime::parse_sidecar(doc, "checkpoint.json");
  });
  return 0;
}
