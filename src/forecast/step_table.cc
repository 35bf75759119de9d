#include "forecast/step_table.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace bw::forecast {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

StepTable parse_step_table(std::string_view text, std::string_view source,
                           double samples_per_step) {
  StepTable table;
  bool header_seen = false;
  bool rates = false;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto nl = text.find('\n', pos);
    const std::string_view raw =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    const auto line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto f = split(line);
    auto fail = [&](const std::string& why) {
      return ConfigError(fmt::format("{} line {}: {} in '{}'; expected {}", source, line_no, why,
                                     line,
                                     header_seen ? "`policy,nodes,step_ms` rows"
                                                 : "a header `policy,nodes,step_ms` or "
                                                   "`policy,nodes,samples_per_s`"));
    };
    if (!header_seen) {
      if (f.size() != 3 || f[0] != "policy" || f[1] != "nodes" ||
          (f[2] != "step_ms" && f[2] != "samples_per_s")) {
        throw fail("the first row is not a header");
      }
      rates = f[2] == "samples_per_s";
      if (rates && !(samples_per_step > 0)) {
        throw ConfigError(
            fmt::format("{} gives samples_per_s, which needs the samples per step (got {}); pass "
                        "--samples-per-step or a --costs set for the model",
                        source, samples_per_step));
      }
      header_seen = true;
      continue;
    }
    if (f.size() != 3) throw fail(fmt::format("{} fields, not 3", f.size()));
    PolicyKind kind;
    try {
      kind = parse_policy(std::string(f[0]));
    } catch (const ConfigError& e) {
      throw fail(e.what());
    }
    int nodes = 0;
    const auto [p1, e1] = std::from_chars(f[1].data(), f[1].data() + f[1].size(), nodes);
    if (e1 != std::errc() || p1 != f[1].data() + f[1].size() || nodes <= 0) {
      throw fail(fmt::format("node count '{}' is not a positive integer", f[1]));
    }
    double value = 0;
    try {
      std::size_t used = 0;
      value = std::stod(std::string(f[2]), &used);
      if (used != f[2].size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw fail(fmt::format("'{}' is not a number", f[2]));
    }
    double step_ms = 0;
    if (rates) {
      if (!(value >= 0) || std::isinf(value)) {
        throw fail(fmt::format("rate {} must be >= 0 (0: does not fit)", value));
      }
      step_ms =
          value == 0 ? std::numeric_limits<double>::infinity() : samples_per_step / value * 1e3;
    } else {
      if (!(value > 0)) throw fail(fmt::format("step time {} must be > 0", value));
      step_ms = value;
    }
    if (!table.step_ms[kind].emplace(nodes, step_ms).second) {
      throw fail(fmt::format("{} at {} nodes is listed twice", f[0], nodes));
    }
  }
  if (table.step_ms.empty()) {
    throw ConfigError(
        fmt::format("{} has no rows; expected a header and `policy,nodes,step_ms` rows", source));
  }
  return table;
}

StepTable read_step_table(const std::string& path, double samples_per_step) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot read step table '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_step_table(ss.str(), path, samples_per_step);
}

}  // namespace bw::forecast
