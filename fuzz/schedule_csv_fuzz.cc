// Schedule CSV (schedule/csv.h), PyTorch pipelining's format; a schedule that reads must write
// back to CSV that reads again.
#include <optional>
#include <sstream>

#include "fuzz/fuzz_util.h"
#include "schedule/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(bw::fuzz::text(data, size));
  std::optional<bw::schedule::Schedule> s;
  try {
    s = bw::schedule::read_csv(in);
  } catch (const bw::ConfigError&) {
  }
  if (s) {  // outside the try: what reads must write back to CSV that reads
    std::istringstream again(bw::schedule::to_csv(*s));
    (void)bw::schedule::read_csv(again);
  }
  return 0;
}
