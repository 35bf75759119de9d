// JSON helpers on top of nlohmann::json that turn missing fields and wrong types into
// ConfigError messages naming where in the document the problem is.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bw::json {

using Json = nlohmann::json;

// Reads and parses a JSON file; a missing, non-regular or too large file (io::kMaxJsonBytes), a
// parse error or a number too large for a double is a ConfigError naming the path.
Json read_file(const std::string& path);
// Parses `text` the same way; `where` (a path, a store key) names it in messages.
Json parse(const std::string& text, const std::string& where);

// Writes `doc` to `path` with two-space indentation; any open or write failure is a ConfigError.
void write_file(const std::string& path, const Json& doc);

// obj[key] as a number; `where` names the object in messages ("layer 3").
double get_number(const Json& obj, const std::string& key, const std::string& where);
// Like get_number, and requires the value to be >= 0.
double get_non_negative(const Json& obj, const std::string& key, const std::string& where);
// The largest integer a double holds exactly; get_int refuses larger magnitudes.
inline constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53
// obj[key] as an integer (a JSON number with no fractional part, |value| <= 2^53).
long long get_int(const Json& obj, const std::string& key, const std::string& where);
// get_int, and requires lo <= value <= hi (the message names the range and the limit).
long long get_int_in(const Json& obj, const std::string& key, const std::string& where,
                     long long lo, long long hi);
std::string get_string(const Json& obj, const std::string& key, const std::string& where);

}  // namespace bw::json
