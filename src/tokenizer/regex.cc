#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "core/check.h"
#include "core/error.h"
#include "tokenizer/pattern.h"

namespace bw::tokenizer {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, std::string_view where)
    : source_(pattern), where_(where) {
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern, where);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                        &err, &offset, nullptr);
  if (code_ == nullptr) {
    throw ConfigError(
        fmt::format("{}: PCRE2 cannot compile the regex /{}/ (as /{}/): {} at "
                    "offset {}",
                    where, pattern, translated, pcre2_message(err), offset));
  }
  // Without a JIT (a library built without one, or a platform it does not support) matching
  // falls back to the interpreter: slower, same matches.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

MatchScratch::MatchScratch(const Regex& re) {
  data_ = pcre2_match_data_create_from_pattern(re.code_, nullptr);
  context_ = pcre2_match_context_create(nullptr);
  BW_CHECK(data_ != nullptr && context_ != nullptr, "PCRE2 match data allocation failed");
  if (re.jit_) {
    stack_ = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    BW_CHECK(stack_ != nullptr, "PCRE2 JIT stack allocation failed");
    pcre2_jit_stack_assign(context_, nullptr, stack_);
  }
  // The interpreter (no JIT, or the JIT's stack exhausted) may backtrack far on long pieces
  // (a megabyte of spaces before a letter); allow it 1 GiB of heap rather than PCRE2's 20 MB.
  pcre2_set_heap_limit(context_, 1024 * 1024);
  pcre2_set_match_limit(context_, 1u << 31);
}

MatchScratch::~MatchScratch() {
  pcre2_jit_stack_free(stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(data_);
}

bool Regex::find(std::string_view subject, size_t at, MatchScratch& s, size_t* start,
                 size_t* end) const {
  const auto* p = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = jit_
               ? pcre2_jit_match(code_, p, subject.size(), at, 0, s.data_, s.context_)
               : pcre2_match(code_, p, subject.size(), at, PCRE2_NO_UTF_CHECK, s.data_, s.context_);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
    // The JIT ran out of stack on a pathological piece; the interpreter keeps its backtracking
    // frames on the heap.
    rc = pcre2_match(code_, p, subject.size(), at, PCRE2_NO_UTF_CHECK, s.data_, s.context_);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    throw ConfigError(fmt::format(
        "{}: the regex /{}/ failed on a text of {} bytes at offset {}: {} (PCRE2 error {})", where_,
        source_, subject.size(), at, pcre2_message(rc), rc));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data_);
  *start = ov[0];
  *end = ov[1];
  return true;
}

size_t Regex::next_char(std::string_view s, size_t at) {
  ++at;
  while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
  return at;
}

}  // namespace bw::tokenizer
