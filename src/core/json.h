// JSON helpers on top of nlohmann::json that turn missing fields and wrong types into
// ConfigError messages naming where in the document the problem is.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bw::json {

using Json = nlohmann::json;

// Reads and parses a JSON file; a missing file or a parse error is a ConfigError naming the path.
Json read_file(const std::string& path);

// Writes `doc` to `path` with two-space indentation; failure to open is a ConfigError.
void write_file(const std::string& path, const Json& doc);

// obj[key] as a number; `where` names the object in messages ("layer 3").
double get_number(const Json& obj, const std::string& key, const std::string& where);
// Like get_number, and requires the value to be >= 0.
double get_non_negative(const Json& obj, const std::string& key, const std::string& where);
// obj[key] as an integer (a JSON number with no fractional part).
long long get_int(const Json& obj, const std::string& key, const std::string& where);
std::string get_string(const Json& obj, const std::string& key, const std::string& where);

}  // namespace bw::json
