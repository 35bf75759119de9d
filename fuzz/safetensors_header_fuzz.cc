// A safetensors file's length prefix and header (runtime/checkpoint_format.h): input = the whole
// file; the layout must lie inside it.
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    unsigned char len[8] = {};
    for (size_t i = 0; i < 8 && i < size; ++i) len[i] = data[i];
    const int64_t file_bytes = static_cast<int64_t>(size);
    const uint64_t n = bw::runtime::safetensors_header_length(len, file_bytes, "fuzz");
    const std::string_view header(reinterpret_cast<const char*>(data) + 8, n);
    const int64_t data_bytes = file_bytes - 8 - static_cast<int64_t>(n);
    const auto layout = bw::runtime::parse_safetensors_header(header, data_bytes, "fuzz");
    for (const auto& s : layout.spans) {
      if (s.begin < 0 || s.end > data_bytes || s.begin > s.end) std::abort();
    }
  });
  return 0;
}
