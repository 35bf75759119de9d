// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check value of the
// CRC catalogue) and the fast path against the portable table version on random buffers of every
// length and alignment, split at every point (crc32c_extend must compose).
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace bw {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i), dec[i] = 31 - i;
  // RFC 3720, appendix B.4.
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_EQ(crc32c_hex(0x1u), "00000001");
}

TEST(Crc32c, FastPathEqualsPortableAndComposes) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(300);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= buf.size(); n += 7) {
      const auto* p = buf.data() + offset;
      const uint32_t want = crc32c_extend_portable(0, p, n);
      ASSERT_EQ(crc32c(p, n), want) << "offset " << offset << " length " << n;
      for (size_t cut = 0; cut <= n; cut += 13) {
        ASSERT_EQ(crc32c_extend(crc32c(p, cut), p + cut, n - cut), want)
            << "offset " << offset << " length " << n << " cut " << cut;
      }
    }
  }
}

TEST(Crc32c, CombineEqualsTheCrcOfTheConcatenation) {
  std::mt19937 rng(11);
  std::vector<unsigned char> buf(5000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{100}, size_t{4999},
                     size_t{5000}}) {
    const uint32_t a = crc32c(buf.data(), cut), b = crc32c(buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, buf.size() - cut), crc32c(buf.data(), buf.size()))
        << "cut " << cut;
  }
}

}  // namespace
}  // namespace bw
