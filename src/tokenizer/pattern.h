// Translation of pre-tokenizer regexes from Oniguruma (Ruby syntax, as Hugging Face
// `tokenizers` compiles them) to PCRE2, so that both split every string the same way:
//   - `\s` is Unicode White_Space in Oniguruma; PCRE2's \s also matches U+180E, so it becomes
//     \p{White_Space}. `\d` is \p{Nd}, `\w` is [\p{L}\p{M}\p{Nd}\p{Pc}], `\h` a hex digit.
//   - `\p{X}` of a general category gets the code points Oniguruma's newer Unicode tables add
//     (unicode_delta.h).
//   - Ruby's `(?m)` (dot matches newline) is PCRE2's `(?s)`; `^` and `$` are line anchors in
//     Ruby, so the pattern is compiled with PCRE2_MULTILINE (regex.cc).
// Constructs whose translation would be inexact (a negated escape with a delta inside a
// bracket class, Oniguruma's nested classes and `&&` intersections) are a ConfigError.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace bw::tokenizer {

// The PCRE2 form of an Oniguruma pattern; `where` names it in messages.
std::string onig_to_pcre2(std::string_view pattern, std::string_view where);

}  // namespace bw::tokenizer
