// What every fuzz target checks: a parser given arbitrary bytes either returns or throws
// ConfigError (bad input, exit 2). Any other exception (a nlohmann type error, std::out_of_range,
// InternalError), a crash, a leak, undefined behaviour (the targets build with ASan and UBSan)
// or a run past the memory limit is a finding (docs/fuzzing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace bw::fuzz {

inline std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Splits the input at lines that are exactly "%%": the first part, then the others (each one
// item, e.g. a `section.key=value` override).
inline std::vector<std::string> parts(const std::string& input) {
  std::vector<std::string> out(1);
  size_t pos = 0;
  while (pos <= input.size()) {
    size_t eol = input.find('\n', pos);
    if (eol == std::string::npos) eol = input.size();
    std::string_view line(input.data() + pos, eol - pos);
    if (line == "%%") {
      out.emplace_back();
    } else {
      out.back().append(line);
      if (eol < input.size()) out.back() += '\n';
    }
    pos = eol + 1;
  }
  return out;
}

}  // namespace bw::fuzz

// The body runs `stmt`; ConfigError is the one expected failure.
#define BW_FUZZ_EXPECT_CONFIG_ERRORS(stmt) \
  try {                                    \
    stmt;                                  \
  } catch (const ::bw::ConfigError&) {     \
  }
