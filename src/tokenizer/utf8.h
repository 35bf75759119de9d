// UTF-8 validation and lossy repair. The tokenizer encodes text, and Hugging Face `tokenizers`
// only ever sees valid UTF-8 (a Python str or a Rust String cannot hold anything else). Input
// bytes that are not valid UTF-8 are therefore first repaired the way Rust's
// `String::from_utf8_lossy` and Python's `bytes.decode("utf-8", "replace")` repair them: each
// maximal subpart of an ill-formed sequence (Unicode 15, section 3.9, "U+FFFD Substitution of
// Maximal Subparts") becomes one U+FFFD. Decoding uses the same repair on its output bytes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bw::tokenizer {

// The length of the longest valid UTF-8 prefix of `s` (s.size() when all of it is valid).
size_t valid_utf8_prefix(std::string_view s);

// `s` with every maximal ill-formed subpart replaced by U+FFFD (EF BF BD).
std::string repair_utf8(std::string_view s);

// Number of maximal ill-formed subparts in `s` (the U+FFFD that repair_utf8 writes).
size_t count_invalid_utf8(std::string_view s);

}  // namespace bw::tokenizer
