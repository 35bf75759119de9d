// GPT-2's byte-to-character table (openai/gpt-2 encoder.py, `bytes_to_unicode`), which the
// ByteLevel pre-tokenizer and decoder of Hugging Face `tokenizers` use: every byte maps to one
// printable character (printable Latin-1 bytes to themselves, the other 68 to U+0100..U+0143), so
// vocabulary entries are strings of these characters. The encoder works on raw bytes and only
// converts vocabulary strings back to bytes when a tokenizer.json is read.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bw::tokenizer {

// The character (a code point below U+0144) byte `b` maps to.
char32_t byte_to_char(uint8_t b);

// The raw bytes a vocabulary string stands for; nullopt when it holds a character outside the
// table (an added token such as "<|endoftext|>" is all table characters; "<s>" is too).
std::optional<std::string> chars_to_bytes(std::string_view token);

// The vocabulary string (UTF-8) of raw bytes.
std::string bytes_to_chars(std::string_view bytes);

}  // namespace bw::tokenizer
