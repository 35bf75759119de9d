// The runtime's small logger: one line per message on stderr, prefixed "[g{generation} r{rank}]",
// filtered by the level from BW_LOG_LEVEL (error, warn, info, debug; default warn) or
// set_log_level(). Library code logs here instead of printing.
//
// Thread-safety: log lines are written whole under a mutex.
#pragma once

#include <fmt/format.h>

#include <string>

namespace bw::runtime {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
// Parses "error" | "warn" | "info" | "debug"; ConfigError otherwise.
LogLevel parse_log_level(const std::string& name);
bool log_enabled(LogLevel level);
void set_log_prefix(int generation, int rank);
void set_log_name(const std::string& name);  // prefix "[name]" (an agent, the coordinator)
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace bw::runtime
