// Step time by node count, per policy, from a CSV file (`breakwater simulate --step-table`).
//
// Published comparisons measure each system's throughput at every node count (Oobleck's SOSP'23
// artifact lists samples/s for 15-30 nodes, per model and system); a single step time for all
// node counts and all policies cannot reproduce them. Format, one row a line after a header:
//
//   policy,nodes,step_ms          or          policy,nodes,samples_per_s
//   breakwater,30,22246.0                     breakwater,30,368.2457947
//
// `policy` is breakwater, restart or redundant. With samples_per_s the step time is
// samples_per_step / rate; a rate of 0 means the model does not fit (the system runs out of
// memory) on that many nodes. Lines starting with '#' and blank lines are skipped. Counts
// between rows take the next lower row (TableModel). Errors name the file, line and fix.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "forecast/policies.h"

namespace bw::forecast {

struct StepTable {
  // Step time (ms) by node count, per policy; +infinity: does not fit.
  std::map<PolicyKind, std::map<int, double>> step_ms;
  bool has(PolicyKind kind) const { return step_ms.count(kind) > 0; }
};

// `samples_per_step` converts samples_per_s rows (ignored for step_ms rows; must be > 0 then).
StepTable parse_step_table(std::string_view text, std::string_view source, double samples_per_step);
StepTable read_step_table(const std::string& path, double samples_per_step);

}  // namespace bw::forecast
