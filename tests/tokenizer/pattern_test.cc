// Oniguruma-to-PCRE2 translation and match iteration: \s is White_Space (U+180E is not space),
// categories get the code points of newer Unicode versions, constructs without an exact form are
// refused, empty matches iterate as the onig crate iterates them, and long pathological pieces
// (megabytes of spaces, the backtracking case of Llama 3's \s*[\r\n]+) match without failing.
#include "tokenizer/pattern.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace bw::tokenizer {
namespace {

std::vector<std::string> pieces(const Regex& re, const std::string& s) {
  MatchScratch scratch(re);
  std::vector<std::string> out;
  size_t prev = 0;
  re.for_each_match(s, scratch, [&](size_t a, size_t b) {
    if (prev < a) out.push_back("~" + s.substr(prev, a - prev));  // a gap
    out.push_back(s.substr(a, b - a));
    prev = b;
  });
  if (prev < s.size()) out.push_back("~" + s.substr(prev));
  return out;
}

std::string error_of(const std::string& pattern) {
  try {
    onig_to_pcre2(pattern, "test");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Pattern, TranslatesEscapesAndAddsNewerCodePoints) {
  EXPECT_EQ(onig_to_pcre2(R"(\s+(?!\S))", "t"), R"(\p{White_Space}+(?!\P{White_Space}))");
  const std::string cls = onig_to_pcre2(R"([^\s\p{L}\p{N}])", "t");
  EXPECT_EQ(cls.rfind(R"([^\p{White_Space}\p{L}\x{)", 0), 0u) << cls;
  EXPECT_NE(cls.find(R"(\x{1E030}-\x{1E06D})"), std::string::npos) << cls;  // Unicode 15
  EXPECT_EQ(onig_to_pcre2(R"(\pL)", "t").substr(0, 6), R"([\p{L})");
  EXPECT_EQ(onig_to_pcre2(R"(\p{Han}\Q\s\E[\]a])", "t"), R"(\p{Han}\Q\s\E[\]a])");
  EXPECT_EQ(onig_to_pcre2("(?m:.)(?i)x", "t"), "(?s:.)(?i)x");
  EXPECT_EQ(onig_to_pcre2(R"(\h)", "t"), "[0-9a-fA-F]");
  EXPECT_EQ(onig_to_pcre2(R"([[:alpha:]\d])", "t").substr(0, 16), R"([[:alpha:]\p{Nd})");
}

TEST(Pattern, RefusesWhatHasNoExactForm) {
  EXPECT_NE(error_of("[a[b]]").find("nested bracket class"), std::string::npos);
  EXPECT_NE(error_of(R"([^\W])").find(R"(\W inside a bracket class)"), std::string::npos);
  EXPECT_NE(error_of(R"([\P{L}x])").find(R"(\P{L} inside a bracket class)"), std::string::npos);
  EXPECT_NE(error_of("[a-z&&[^c]]").find("class intersection &&"), std::string::npos);
  EXPECT_NE(error_of("[abc").find("unterminated"), std::string::npos);
  EXPECT_NE(error_of("[abc").find("supported:"), std::string::npos);
  EXPECT_EQ(error_of(R"([\P{Han}])"), "(no error)");  // no delta, nothing to subtract
  try {
    Regex("(", false, "tok.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tok.json: PCRE2 cannot compile the regex /(/"),
              std::string::npos)
        << e.what();
  }
}

TEST(Regex, SplitsAsTheGpt2AndLlama3PatternsDo) {
  const Regex gpt2(kGpt2Pattern, false, "t");
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(gpt2, "Hello world's 12345  x\n\n"),
            (V{"Hello", " world", "'s", " 12345", " ", " x", "\n\n"}));
  EXPECT_EQ(pieces(gpt2,
                   "a\xE1\xA0\x8E"
                   "b"),
            (V{"a", "\xE1\xA0\x8E", "b"}));  // U+180E: not \s
  const Regex llama(testing::kLlama3Regex, false, "t");
  EXPECT_EQ(pieces(llama, "I'LL 1234567 x\r\n\r\n  y"),
            (V{"I", "'LL", " ", "123", "456", "7", " x", "\r\n\r\n", " ", " y"}));
  EXPECT_EQ(pieces(llama, "'\xC5\xBF"), (V{"'\xC5\xBF"}));  // 'ſ folds to 's under (?i)
  EXPECT_EQ(pieces(llama, "a\xF0\x9E\x80\xB0"), (V{"a\xF0\x9E\x80\xB0"}));  // U+1E030 is \p{L}
  const Regex lit(".*", true, "t");
  EXPECT_EQ(pieces(lit, "a.*b"), (V{"~a", ".*", "~b"}));
}

TEST(Regex, IteratesEmptyMatchesAsTheOnigCrate) {
  const Regex re("a*", false, "t");
  MatchScratch s(re);
  std::vector<std::pair<size_t, size_t>> got;
  re.for_each_match(std::string_view("baab"), s, [&](size_t a, size_t b) {
    got.push_back({a, b});
  });
  const std::vector<std::pair<size_t, size_t>> want = {{0, 0}, {1, 3}, {4, 4}};
  EXPECT_EQ(got, want);
  std::vector<std::pair<size_t, size_t>> multi;
  const Regex x("x*", false, "t");
  MatchScratch sx(x);
  x.for_each_match(std::string_view("\xC3\xA9"), sx, [&](size_t a, size_t b) {
    multi.push_back({a, b});  // one empty match before and after the two-byte character
  });
  EXPECT_EQ(multi, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {2, 2}}));
}

TEST(Regex, LongPathologicalPiecesMatchWithoutError) {
  const Regex llama(testing::kLlama3Regex, false, "t");
  const Regex gpt2(kGpt2Pattern, false, "t");
  for (const std::string& s :
       {std::string(3'000'000, ' ') + "x", std::string(1'000'000, '\t') + "\n",
        std::string(2'000'000, 'a'), std::string(1'000'000, '7'), std::string(500'000, '!')}) {
    for (const Regex* re : {&llama, &gpt2}) {
      MatchScratch scratch(*re);
      size_t covered = 0;
      re->for_each_match(s, scratch, [&](size_t a, size_t b) { covered += b - a; });
      EXPECT_EQ(covered, s.size()) << re->source().substr(0, 20) << " on " << s.size();
    }
  }
}

}  // namespace
}  // namespace bw::tokenizer
