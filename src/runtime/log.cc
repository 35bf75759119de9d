#include "runtime/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/core.h>

#include "core/error.h"

namespace bw::runtime {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("BW_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kWarn;
  try {
    return parse_log_level(env);
  } catch (const ConfigError&) {
    return LogLevel::kWarn;
  }
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

std::mutex& mu() {
  static std::mutex m;
  return m;
}

std::string& prefix() {
  static std::string p = "[coordinator]";
  return p;
}

}  // namespace

void set_log_level(LogLevel level) { level_ref() = static_cast<int>(level); }

LogLevel parse_log_level(const std::string& name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  throw ConfigError(
      fmt::format("unknown log level '{}'; choose one of error, warn, info, debug", name));
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= level_ref().load(); }

void set_log_prefix(int generation, int rank) {
  std::lock_guard<std::mutex> lock(mu());
  prefix() = fmt::format("[g{} r{}]", generation, rank);
}

void set_log_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu());
  prefix() = fmt::format("[{}]", name);
}

void log_line(LogLevel level, const std::string& message) {
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(mu());
  // The logger is the one place in the runtime that writes to the terminal (stderr, one line).
  fmt::print(stderr, "{} {}: {}\n", prefix(), kNames[static_cast<int>(level)], message);
}

}  // namespace bw::runtime
