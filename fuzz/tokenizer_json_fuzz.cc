// A Hugging Face tokenizer.json (tokenizer/tokenizer.h): input = the JSON, then, after a "%%"
// line, text to encode; what encodes must decode (text and raw bytes) without error.
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = bw::fuzz::parts(bw::fuzz::text(data, size));
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    const auto tok = bw::tokenizer::Tokenizer::from_json(parts[0], "tokenizer.json");
    const std::string sample = parts.size() > 1 ? parts[1] : std::string("Hello world, 123!");
    const auto ids = tok.encode(sample);
    (void)tok.decode(ids);
    (void)tok.decode_bytes(ids, true);
  });
  return 0;
}
