// Added tokens (tokenizer.json "added_tokens": special tokens such as <|endoftext|>, and tokens a
// user added) and how `tokenizers` splits them out of the text before pre-tokenization
// (tokenizer/added_vocabulary.rs): first the tokens with normalized = false over the whole text,
// then those with normalized = true over each remaining piece. Each pass takes leftmost-longest
// matches; a single_word token matches only between non-word characters, lstrip and rstrip
// absorb the whitespace beside it. With no normalizer (the only kind supported) the second pass
// sees the same text, so only the order of the two passes matters.
//
// Thread-safety: immutable after construction; split() runs on many threads, each with its own
// MatchScratch for the word-character regex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace bw::tokenizer {

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  // Calls text(piece) for each stretch of ordinary text (never empty) and token(id) for each
  // added token, in order.
  template <class TextFn, class TokenFn>
  void split(std::string_view text, MatchScratch* word, TextFn&& on_text,
             TokenFn&& on_token) const {
    if (text.empty()) return;
    if (tries_[0].empty() && tries_[1].empty()) {
      on_text(text);
      return;
    }
    pass(
        0, text, word, [&](std::string_view piece) { pass(1, piece, word, on_text, on_token); },
        on_token);
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const Regex& word_regex() const { return *word_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ of a token ending here
  };
  struct Match {
    size_t start, end;
    int32_t token;
  };

  // One pass over `s` with trie `t`: the text between the matches goes to on_text.
  template <class TextFn, class TokenFn>
  void pass(int t, std::string_view s, MatchScratch* word, TextFn&& on_text,
            TokenFn&& on_token) const {
    if (s.empty()) return;
    if (tries_[t].empty()) {
      on_text(s);
      return;
    }
    size_t start_offset = 0;
    size_t at = 0;
    Match m;
    while (next_match(t, s, at, &m)) {
      at = m.end;
      const AddedToken& tok = tokens_[m.token];
      size_t start = m.start, stop = m.end;
      if (tok.single_word) {
        const bool start_space = start == 0 || !ends_with_word(s.substr(0, start), word);
        const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop), word);
        if (!start_space || !stop_space) continue;
      }
      if (tok.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
      if (tok.rstrip) stop += leading_space_end(s.substr(stop));
      if (start_offset < start) on_text(s.substr(start_offset, start - start_offset));
      on_token(tok.id);
      start_offset = stop;
    }
    if (start_offset < s.size()) on_text(s.substr(start_offset));
  }

  bool next_match(int t, std::string_view s, size_t from, Match* m) const;
  bool ends_with_word(std::string_view s, MatchScratch* word) const;
  bool starts_with_word(std::string_view s, MatchScratch* word) const;
  static size_t trailing_space_start(std::string_view s);  // start of the trailing \s* run
  static size_t leading_space_end(std::string_view s);     // end of the leading \s* run

  std::vector<AddedToken> tokens_;
  std::vector<Node> tries_[2];  // [0]: normalized = false, [1]: normalized = true
  bool first_byte_[2][256] = {};
  std::unique_ptr<Regex> word_;  // one character of Rust regex's Unicode \w
};

}  // namespace bw::tokenizer
