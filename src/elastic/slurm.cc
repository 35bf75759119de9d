#include "elastic/slurm.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace bw::elastic {

std::string first_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const auto open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.empty() || entry.find(']') != std::string::npos) {
      throw ConfigError(fmt::format("SLURM_JOB_NODELIST '{}' has no first host", nodelist));
    }
    return entry;
  }
  const auto close = entry.find(']', open);
  if (open == 0 || close == std::string::npos) {
    throw ConfigError(fmt::format("SLURM_JOB_NODELIST '{}' is not a Slurm host list", nodelist));
  }
  // The first number of the first range keeps its zero padding: "07-09" -> "07".
  const std::string ranges = entry.substr(open + 1, close - open - 1);
  const auto stop = ranges.find_first_of(",-");
  const std::string first = ranges.substr(0, stop);
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
    throw ConfigError(fmt::format("SLURM_JOB_NODELIST '{}' is not a Slurm host list", nodelist));
  }
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

SlurmDefaults slurm_defaults() {
  SlurmDefaults out;
  const char* name = std::getenv("SLURMD_NODENAME");
  if (name && *name) out.node_name = name;
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (!list || !*list) list = std::getenv("SLURM_NODELIST");
  if (list && *list) {
    int port = kDefaultCoordinatorPort;
    if (const char* p = std::getenv("BW_COORDINATOR_PORT"); p && *p) port = std::atoi(p);
    out.coordinator = fmt::format("{}:{}", first_host(list), port);
  }
  return out;
}

}  // namespace bw::elastic
