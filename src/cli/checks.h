// Checks of command-line values, shared by the subcommands: NaN, infinities, negative or zero
// costs, rates, bandwidths and memory sizes are one clear ConfigError naming the flag, the value
// and what it must be, never replaced by a default or passed on to give plausible-looking
// nonsense; a list naming an item twice is refused naming the item, never merged.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace bw::cli {

// finite and > 0
inline void require_positive(double v, std::string_view flag) {
  if (!(std::isfinite(v) && v > 0))
    throw ConfigError(fmt::format("{} must be a finite number > 0, got {}", flag, v));
}

// finite and >= 0
inline void require_non_negative(double v, std::string_view flag) {
  if (!(std::isfinite(v) && v >= 0))
    throw ConfigError(fmt::format("{} must be a finite number >= 0, got {}", flag, v));
}

// finite and in [lo, hi]
inline void require_in(double v, double lo, double hi, std::string_view flag) {
  if (!(std::isfinite(v) && v >= lo && v <= hi))
    throw ConfigError(fmt::format("{} must be in [{}, {}], got {}", flag, lo, hi, v));
}

// Any value given on the command line that reads as NaN ("nan", "-NaN"): options whose NaN
// default means "not given" would otherwise take the default silently.
inline void reject_nan_values(const CLI::App& cmd) {
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->count() == 0) continue;
    for (const std::string& r : opt->results()) {
      char* end = nullptr;
      const double v = std::strtod(r.c_str(), &end);
      if (!r.empty() && end == r.c_str() + r.size() && std::isnan(v))
        throw ConfigError(fmt::format("{} must be a number, got {}", opt->get_name(), r));
    }
  }
}

// an integer count in [lo, hi]
inline void require_count(long long v, long long lo, long long hi, std::string_view flag) {
  if (v < lo || v > hi)
    throw ConfigError(fmt::format("{} must be in [{}, {}], got {}", flag, lo, hi, v));
}

// A list option that names the same item twice (`--policy restart,restart`) is a slip (a typo for
// another item, a pasted list), never merged silently: ConfigError naming the item.
template <class T>
void require_distinct(const std::vector<T>& items, std::string_view flag) {
  std::set<T> seen;
  for (const T& item : items) {
    if (!seen.insert(item).second)
      throw ConfigError(fmt::format("{} names '{}' twice; give each item once", flag, item));
  }
}

}  // namespace bw::cli
