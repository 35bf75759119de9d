// BW_CHECK: an always-on invariant check (unlike assert, it survives Release builds).
//
//   BW_CHECK(chunk < num_chunks, "chunk {} out of range [0, {})", chunk, num_chunks);
//
// On failure it throws bw::InternalError carrying file:line, the condition and the formatted
// values. Use it for invariants of breakwater's own code; bad user input is a ConfigError.
#pragma once

#include <fmt/format.h>

#include "core/error.h"

namespace bw::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& message);

}  // namespace bw::detail

#define BW_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      ::bw::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                                \
  } while (0)
