// A pre-tokenizer regex on PCRE2 (8-bit, UTF and UCP, JIT-compiled where the library has a JIT),
// compiled from the Oniguruma form in a tokenizer.json (pattern.h) and iterated the way
// `tokenizers` iterates Oniguruma's matches: leftmost-first, and an empty match right where the
// previous match ended is skipped (the search moves on one character).
//
// Subjects must be valid UTF-8 (the tokenizer repairs its input first, utf8.h), so matching
// skips PCRE2's own UTF check, which would otherwise rescan the subject on every call.
//
// Thread-safety: a Regex is immutable and shared by all threads; each thread matches through its
// own MatchScratch.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace bw::tokenizer {

class Regex;

// Per-thread matching state for one Regex: match data, and a JIT stack that grows to 64 MiB.
class MatchScratch {
 public:
  explicit MatchScratch(const Regex& re);
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

 private:
  friend class Regex;
  pcre2_real_match_data_8* data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* stack_ = nullptr;
};

class Regex {
 public:
  // `pattern` in Oniguruma syntax, or a literal string when `literal`; ConfigError naming
  // `where` if PCRE2 refuses it.
  Regex(std::string_view pattern, bool literal, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(start, end) for each match in `subject`, in order.
  template <class Fn>
  void for_each_match(std::string_view subject, MatchScratch& s, Fn&& fn) const {
    size_t at = 0;
    size_t last_match_end = std::string_view::npos;
    while (at <= subject.size()) {
      size_t start = 0, end = 0;
      if (!find(subject, at, s, &start, &end)) return;
      if (start == end && end == last_match_end) {  // the onig crate's FindMatches rule
        at = at < subject.size() ? next_char(subject, at) : subject.size() + 1;
        continue;
      }
      fn(start, end);
      at = end;
      last_match_end = end;
    }
  }

  bool jit() const { return jit_; }
  const std::string& source() const { return source_; }

 private:
  friend class MatchScratch;
  bool find(std::string_view subject, size_t at, MatchScratch& s, size_t* start, size_t* end) const;
  static size_t next_char(std::string_view s, size_t at);

  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string source_;  // as given, for messages
  std::string where_;
};

}  // namespace bw::tokenizer
