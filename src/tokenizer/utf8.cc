#include "tokenizer/utf8.h"

#include <cstdint>

namespace bw::tokenizer {
namespace {

// Length of the well-formed sequence starting at s[i] (Unicode Table 3-7), or 0 when the bytes
// there are ill-formed; then *subpart is the length of the maximal subpart to replace (>= 1).
size_t sequence_at(std::string_view s, size_t i, size_t* subpart) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *subpart = 1;  // C0, C1, F5..FF, or a lone continuation byte
    return 0;
  }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  if (k == need) return need;
  *subpart = k;
  return 0;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    size_t subpart = 0;
    const size_t n = sequence_at(s, i, &subpart);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const size_t ok = valid_utf8_prefix(s.substr(i));
    out.append(s.substr(i, ok));
    i += ok;
    if (i >= s.size()) break;
    size_t subpart = 1;
    sequence_at(s, i, &subpart);
    out.append("\xEF\xBF\xBD");
    i += subpart;
  }
  return out;
}

size_t count_invalid_utf8(std::string_view s) {
  size_t n = 0, i = 0;
  while (i < s.size()) {
    i += valid_utf8_prefix(s.substr(i));
    if (i >= s.size()) break;
    size_t subpart = 1;
    sequence_at(s, i, &subpart);
    i += subpart;
    ++n;
  }
  return n;
}

}  // namespace bw::tokenizer
