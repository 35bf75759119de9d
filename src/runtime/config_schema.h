// The run config's schema: every section and key with its type, a one-line description and how
// to read and write it in a RunConfig. Shared by the TOML reader, the override parser and
// to_toml (config.cc, config_toml.cc), so the three can never disagree about a key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/config.h"

namespace bw::runtime::detail {

enum class Kind { kInt, kFloat, kString, kIntList, kBool };

using Value = std::variant<int64_t, double, std::string, std::vector<int64_t>, bool>;

struct Field {
  std::string key;
  Kind kind;
  std::string comment;
  std::function<void(RunConfig&, const Value&, const std::string& name)> set;
  std::function<Value(const RunConfig&)> get;
};

struct Section {
  std::string name;
  std::vector<Field> fields;
};

const std::vector<Section>& schema();
// The top-level table under which train.out_dir/config.toml records what the run resolved
// ([resolved.model], [resolved.pipeline], ...; runtime/resolved_run.h). A record, not input:
// loading a config skips it, so the saved file loads back as the config it was given.
inline constexpr const char* kResolvedSection = "resolved";
// A value as TOML text that reads back as the same value (a string quoted and escaped).
std::string toml_text(const Value& v);
const char* kind_name(Kind kind);  // "an integer", ...

}  // namespace bw::runtime::detail
