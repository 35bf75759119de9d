#include "core/json.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace bw::json {

Json read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open '{}' for reading", path));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return Json::parse(buf.str());
  } catch (const Json::parse_error& e) {
    throw ConfigError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

void write_file(const std::string& path, const Json& doc) {
  std::ofstream out(path);
  if (!out) throw ConfigError(fmt::format("cannot open '{}' for writing", path));
  out << doc.dump(2) << '\n';
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
  return static_cast<long long>(d);
}

std::string get_string(const Json& obj, const std::string& key, const std::string& where) {
  const Json& v = field(obj, key, where);
  if (!v.is_string())
    throw ConfigError(fmt::format("{}: field '{}' must be a string, got {}", where, key,
                                  v.type_name()));
  return v.get<std::string>();
}

}  // namespace bw::json
