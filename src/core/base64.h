// Base64 (RFC 4648 section 4, the standard alphabet with '=' padding), as etcd's v3 JSON gateway
// carries keys and values (proto3 `bytes` fields in JSON). Decoding is strict: only the standard
// alphabet, the length a multiple of 4, padding only at the end and its unused bits zero, so every
// byte string has exactly one accepted encoding.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bw {

std::string base64_encode(std::string_view bytes);
// The bytes, or nullopt when `text` is not canonical base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace bw
