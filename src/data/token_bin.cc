// llm.c / nanoGPT `.bin` token files: a header of 256 little-endian int32 (magic 20240520,
// version, token count, then zeros) followed by the tokens, little-endian. Version 1 holds uint16
// GPT-2 tokens; version 2 holds uint32 tokens (llm.c writes Llama-3 tokenizations that way).
#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"

namespace bw::data {
namespace {

constexpr int64_t kHeaderBytes = kTokenBinHeaderInts * 4;

int32_t read_le_i32(const uint8_t* p) {
  uint32_t v = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
               (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  return static_cast<int32_t>(v);
}

void put_le_i32(char* p, int32_t value) {
  auto v = static_cast<uint32_t>(value);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

bool has_token_bin_magic(const ByteSource& bytes) {
  return bytes.size() >= 4 && read_le_i32(bytes.data()) == kTokenBinMagic;
}

TokenDataset open_token_bin(const std::string& path, std::shared_ptr<const ByteSource> bytes) {
  const int64_t size = bytes->size();
  if (size < kHeaderBytes) {
    throw ConfigError(
        fmt::format("token file '{}' has {} bytes, fewer than the {}-byte header "
                    "of an llm.c .bin file",
                    path, size, kHeaderBytes));
  }
  const uint8_t* p = bytes->data();
  int32_t magic = read_le_i32(p);
  if (magic != kTokenBinMagic) {
    throw ConfigError(
        fmt::format("token file '{}' has magic {} where an llm.c .bin file has {}; "
                    "it is not a token file (rename it to read it as raw text)",
                    path, magic, kTokenBinMagic));
  }
  int32_t version = read_le_i32(p + 4);
  int token_bytes = 0;
  int vocab = 0;
  if (version == 1) {
    token_bytes = 2;
    vocab = kGpt2Vocab;
  } else if (version == 2) {
    token_bytes = 4;
    vocab = kLlama3Vocab;
  } else {
    throw ConfigError(
        fmt::format("token file '{}' has version {}; supported versions are 1 "
                    "(uint16 GPT-2 tokens) and 2 (uint32 tokens)",
                    path, version));
  }
  int64_t count = read_le_i32(p + 8);
  int64_t payload = size - kHeaderBytes;
  if (count <= 0 || count * token_bytes != payload) {
    throw ConfigError(
        fmt::format("token file '{}' declares {} tokens at header offset 8 ({} bytes) but holds {} "
                    "bytes after its header; the file is truncated or corrupt",
                    path, count, count * token_bytes, payload));
  }
  return TokenDataset(path, TokenDataset::Format::kTokenBin, std::move(bytes), kHeaderBytes,
                      token_bytes, count, vocab);
}

void write_token_bin(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::string buf(static_cast<size_t>(kHeaderBytes) + 2 * tokens.size(), '\0');
  put_le_i32(buf.data(), kTokenBinMagic);
  put_le_i32(buf.data() + 4, 1);
  put_le_i32(buf.data() + 8, static_cast<int32_t>(tokens.size()));
  char* out = buf.data() + kHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    out[2 * i] = static_cast<char>(tokens[i] & 0xff);
    out[2 * i + 1] = static_cast<char>(tokens[i] >> 8);
  }
  io::write_file(path, buf, "token file");
}

}  // namespace bw::data
