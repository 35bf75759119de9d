// Store keys of one generation, shared by the coordinator and its workers. Everything a
// generation publishes lives under "g{generation}/", so a new generation never reads stale keys.
#pragma once

#include <fmt/format.h>

#include <string>

namespace bw::elastic::keys {

inline std::string config(int g) { return fmt::format("g{}/config", g); }  // TOML
inline std::string layout(int g) { return fmt::format("g{}/layout", g); }  // JSON
inline std::string start(int g) { return fmt::format("g{}/start", g); }    // JSON
inline std::string metrics(int g, int step, int rank) {
  return fmt::format("g{}/metrics/{}/{}", g, step, rank);  // StepReport
}
// JSON {"kind": "config" | "other", "message": what()} of the exception that ended the rank.
inline std::string error(int g, int rank) { return fmt::format("g{}/error/{}", g, rank); }
inline constexpr const char* kConfigError = "config";
inline std::string heartbeat(int g, int rank) {
  return fmt::format("g{}/heartbeat/{}", g, rank);  // counter
}
inline std::string done(int g, int rank) { return fmt::format("g{}/done/{}", g, rank); }

}  // namespace bw::elastic::keys
