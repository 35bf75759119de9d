// The hostfile of `breakwater launch` (elastic/launch.h): DeepSpeed's `host slots=g` lines.
#include <cstdlib>

#include "elastic/launch.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    const auto hosts = bw::elastic::parse_hostfile(bw::fuzz::text(data, size), "hostfile");
    if (hosts.empty()) std::abort();  // documented: an empty file is an error
    for (const auto& h : hosts) {
      if (h.host.empty() || h.slots < 1 || h.slots != hosts.front().slots) std::abort();
    }
  });
  return 0;
}
