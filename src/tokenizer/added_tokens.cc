#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace bw::tokenizer {
namespace {

// Unicode White_Space, which Rust regex's \s matches.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The code point at s[i] (valid UTF-8) and its length.
char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (s[i + k] & 0x3F);
  *len = n;
  return c;
}

// Start of the last character of a non-empty valid UTF-8 string.
size_t last_char_start(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  // Rust regex's \w: Alphabetic, M, Nd, Pc and Join_Control.
  word_ = std::make_unique<Regex>("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false,
                                  "added tokens");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& tok = tokens_[i];
    if (tok.content.empty()) continue;
    const int t = tok.normalized ? 1 : 0;
    auto& trie = tries_[t];
    if (trie.empty()) trie.emplace_back();
    int32_t node = 0;
    for (char ch : tok.content) {
      const auto b = static_cast<uint8_t>(ch);
      auto& next = trie[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
      if (it == next.end() || it->first != b) {
        const auto child = static_cast<int32_t>(trie.size());
        it = next.insert(it, {b, child});
        trie.emplace_back();
        node = child;
      } else {
        node = it->second;
      }
    }
    trie[node].token = static_cast<int32_t>(i);
    first_byte_[t][static_cast<uint8_t>(tok.content[0])] = true;
  }
}

bool AddedVocabulary::next_match(int t, std::string_view s, size_t from, Match* m) const {
  const auto& trie = tries_[t];
  const bool* first = first_byte_[t];
  for (size_t i = from; i < s.size(); ++i) {
    if (!first[static_cast<uint8_t>(s[i])]) continue;
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < s.size(); ++j) {
      const auto b = static_cast<uint8_t>(s[j]);
      const auto& next = trie[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
      if (it == next.end() || it->first != b) break;
      node = it->second;
      if (trie[node].token >= 0) {
        best = trie[node].token;
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      *m = {i, best_end, best};
      return true;
    }
  }
  return false;
}

bool AddedVocabulary::ends_with_word(std::string_view s, MatchScratch* word) const {
  const size_t i = last_char_start(s);
  bool hit = false;
  word_->for_each_match(s.substr(i), *word, [&](size_t, size_t) { hit = true; });
  return hit;
}

bool AddedVocabulary::starts_with_word(std::string_view s, MatchScratch* word) const {
  size_t len = 0;
  decode_at(s, 0, &len);
  bool hit = false;
  word_->for_each_match(s.substr(0, len), *word, [&](size_t, size_t) { hit = true; });
  return hit;
}

size_t AddedVocabulary::trailing_space_start(std::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    const size_t i = last_char_start(s.substr(0, start));
    size_t len = 0;
    if (!is_white_space(decode_at(s, i, &len))) break;
    start = i;
  }
  return start;
}

size_t AddedVocabulary::leading_space_end(std::string_view s) {
  size_t end = 0;
  while (end < s.size()) {
    size_t len = 0;
    if (!is_white_space(decode_at(s, end, &len))) break;
    end += len;
  }
  return end;
}

}  // namespace bw::tokenizer
