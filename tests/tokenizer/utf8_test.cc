// Lossy UTF-8 repair replaces each maximal ill-formed subpart with one U+FFFD, as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do (the cases' expected
// counts are Python's); byte-level tables are a bijection of the 256 bytes.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tokenizer/byte_level.h"

namespace bw::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string times(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8, RepairsMaximalSubpartsAsPythonDoes) {
  struct Case {
    std::string in, out;
  };
  const std::vector<Case> cases = {
      {"\x80", kFffd},
      {"\xC0\xAF", times(kFffd, 2)},          // overlong lead
      {"\xE0\x80\xAF", times(kFffd, 3)},      // overlong three-byte
      {"\xED\xA0\x80", times(kFffd, 3)},      // a surrogate
      {"\xF4\x90\x80\x80", times(kFffd, 4)},  // above U+10FFFF
      {"\xE2\x82", kFffd},                    // truncated
      {"\xF0\x9F\x98", kFffd},                // truncated emoji
      {"a\xF0\x9F\x98"
       "b",
       "a" + kFffd + "b"},
      {"\xF8\x88\x80\x80\x80", times(kFffd, 5)},  // five-byte form
      {"\xE2(\xA1", kFffd + "(" + kFffd},
      {"\xC3", kFffd},
      {"\xF0\x9F\x98\x80\xFF", "\xF0\x9F\x98\x80" + kFffd},
      {"\xE2\x82\xAC\xE2\x82", "\xE2\x82\xAC" + kFffd},
      {"plain ascii", "plain ascii"},
      {"", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(repair_utf8(c.in), c.out) << "input of " << c.in.size() << " bytes";
    size_t replaced = 0;
    for (size_t p = c.out.find(kFffd); p != std::string::npos; p = c.out.find(kFffd, p + 1))
      ++replaced;
    EXPECT_EQ(count_invalid_utf8(c.in), replaced);
    const bool valid = c.in == c.out;
    EXPECT_EQ(valid_utf8_prefix(c.in) == c.in.size(), valid);
    EXPECT_EQ(valid_utf8_prefix(c.out), c.out.size());
  }
  EXPECT_EQ(count_invalid_utf8("\xC0\xAF"
                               "a\xED\xA0\x80"),
            5u);
}

TEST(Utf8, RepairedRandomBytesAreValidAndValidTextIsUntouched) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 3 == 0 ? rng() % 128 : 128 + rng() % 128);
    const std::string r = repair_utf8(s);
    ASSERT_EQ(valid_utf8_prefix(r), r.size());
    EXPECT_EQ(repair_utf8(r), r);
  }
  const std::string text = "naïve 日本語 👩🏿‍🔬 \U0010FFFF \U00010000 \u0800 \u07FF";
  EXPECT_EQ(valid_utf8_prefix(text), text.size());
  EXPECT_EQ(repair_utf8(text), text);
}

TEST(ByteLevel, IsABijectionOfTheBytesOntoPrintableCharacters) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second);
    EXPECT_LT(c, 0x144u);
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(chars_to_bytes(bytes_to_chars(one)), one);
  }
  EXPECT_EQ(bytes_to_chars(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(bytes_to_chars("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(bytes_to_chars("a!~"), "a!~");
  EXPECT_EQ(chars_to_bytes("<|endoftext|>"), "<|endoftext|>");
  EXPECT_EQ(chars_to_bytes("日本"), std::nullopt);      // not table characters
  EXPECT_EQ(chars_to_bytes("\xC5\x83"), "\xAD");        // U+0143, the last table character
  EXPECT_EQ(chars_to_bytes("\xC5\x84"), std::nullopt);  // U+0144, past the table
}

}  // namespace
}  // namespace bw::tokenizer
