// Base64 against RFC 4648's test vectors (section 10), a bit-by-bit reference encoder on random
// bytes of every length up to 64, and the strict decoder's refusals (wrong alphabet, length,
// padding in the middle, non-zero unused bits).
#include "core/base64.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace bw {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(base64_encode(plain), coded) << plain;
    EXPECT_EQ(base64_decode(coded), plain) << coded;
  }
}

// The definition read literally: the bit string in groups of 6, padded with zero bits, then '='
// up to a multiple of 4 characters.
std::string reference_encode(const std::string& bytes) {
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bits;
  for (unsigned char c : bytes) {
    for (int b = 7; b >= 0; --b) bits += ((c >> b) & 1) ? '1' : '0';
  }
  while (bits.size() % 6 != 0) bits += '0';
  std::string out;
  for (size_t i = 0; i < bits.size(); i += 6)
    out += alphabet[std::stoi(bits.substr(i, 6), nullptr, 2)];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

TEST(Base64, RandomBytesMatchTheReferenceAndRoundTrip) {
  std::mt19937 rng(11);
  for (int len = 0; len <= 64; ++len) {
    for (int trial = 0; trial < 8; ++trial) {
      std::string bytes(len, '\0');
      for (auto& c : bytes) c = static_cast<char>(rng() & 0xff);
      const std::string coded = base64_encode(bytes);
      ASSERT_EQ(coded, reference_encode(bytes)) << "length " << len;
      ASSERT_EQ(base64_decode(coded), bytes) << coded;
    }
  }
}

TEST(Base64, RefusesWhatIsNotCanonical) {
  for (const char* bad : {"Zg=", "Zg", "Z===", "====", "Zm9v=Zg=", "Zm-v", "Zm_v", "Zm9v\n",
                          "Zh==", "Zm9=", "Z g=", "Zm8=Zm8="}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace bw
