// An llm.c / nanoGPT `.bin` token file (data/dataset.h): header, then every token read through
// the vocabulary check.
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "fuzz/fuzz_util.h"

namespace {
class Bytes : public bw::data::ByteSource {
 public:
  Bytes(const uint8_t* data, size_t size) : bytes_(data, data + size) {}
  const uint8_t* data() const override { return bytes_.data(); }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    auto bytes = std::make_shared<const Bytes>(data, size);
    const auto ds = bw::data::open_token_bin("fuzz.bin", bytes);
    std::vector<int64_t> out(static_cast<size_t>(std::min<int64_t>(ds.num_tokens(), 4096)));
    ds.copy_tokens(0, static_cast<int64_t>(out.size()), out.data());
    (void)ds.content_digest();
  });
  return 0;
}
