#include "core/json.h"

#include <cmath>

#include <fmt/format.h>

#include "core/file_io.h"

namespace bw::json {

Json read_file(const std::string& path) {
  return parse(io::read_file(path, io::kMaxJsonBytes, "JSON file"), path);
}

Json parse(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(fmt::format("'{}' is not valid JSON: {}", where, e.what()));
  } catch (const Json::exception& e) {  // out_of_range.406: a number too large for a double
    throw ConfigError(fmt::format("'{}' is not usable JSON: {}", where, e.what()));
  }
}

void write_file(const std::string& path, const Json& doc) {
  io::write_file(path, doc.dump(2) + "\n", "JSON file");
}

static const Json& field(const Json& obj, const std::string& key, const std::string& where) {
  if (!obj.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  auto it = obj.find(key);
  if (it == obj.end()) throw ConfigError(fmt::format("{}: missing field '{}'", where, key));
  return *it;
}

double get_number(const Json& obj, const std::string& key, const std::string& where) {
  const Json& v = field(obj, key, where);
  if (!v.is_number())
    throw ConfigError(fmt::format("{}: field '{}' must be a number, got {}", where, key,
                                  v.type_name()));
  double d = v.get<double>();
  if (!std::isfinite(d))
    throw ConfigError(fmt::format("{}: field '{}' must be finite", where, key));
  return d;
}

double get_non_negative(const Json& obj, const std::string& key, const std::string& where) {
  double d = get_number(obj, key, where);
  if (d < 0) throw ConfigError(fmt::format("{}: field '{}' must be >= 0, got {}", where, key, d));
  return d;
}

long long get_int(const Json& obj, const std::string& key, const std::string& where) {
  double d = get_number(obj, key, where);
  if (d != std::floor(d))
    throw ConfigError(fmt::format("{}: field '{}' must be an integer, got {}", where, key, d));
  if (std::fabs(d) > kMaxExactInt)
    throw ConfigError(fmt::format("{}: field '{}' = {} is out of range (|value| <= 2^53)", where,
                                  key, d));
  return static_cast<long long>(d);
}

long long get_int_in(const Json& obj, const std::string& key, const std::string& where,
                     long long lo, long long hi) {
  const long long v = get_int(obj, key, where);
  if (v < lo || v > hi)
    throw ConfigError(fmt::format("{}: field '{}' = {} is out of range [{}, {}]", where, key, v,
                                  lo, hi));
  return v;
}

std::string get_string(const Json& obj, const std::string& key, const std::string& where) {
  const Json& v = field(obj, key, where);
  if (!v.is_string())
    throw ConfigError(fmt::format("{}: field '{}' must be a string, got {}", where, key,
                                  v.type_name()));
  return v.get<std::string>();
}

}  // namespace bw::json
