#include "tokenizer/byte_level.h"

#include <array>

namespace bw::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};  // -1: not a table character
};

const Tables& tables() {
  static const Tables tables = [] {
    Tables t;
    t.to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t.to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      t.to_byte[t.to_char[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else {  // the table's characters are all below U+0800
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

std::optional<std::string> chars_to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = (static_cast<char32_t>(b0 & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are never table characters
    }
    if (c >= t.to_byte.size() || t.to_byte[c] < 0) return std::nullopt;
    out += static_cast<char>(t.to_byte[c]);
  }
  return out;
}

std::string bytes_to_chars(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, byte_to_char(static_cast<uint8_t>(b)));
  return out;
}

}  // namespace bw::tokenizer
