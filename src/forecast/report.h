// Presenting replay results: a table per policy for people, JSON for programs, and an SVG of
// throughput over time with failures and joins marked and the policies overlaid.
//
// Pure functions of ReplayResult: they return text and never print (the cli does).
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "forecast/replay.h"

namespace bw::forecast {

// One block per policy: useful-work fraction, samples, steps, time by cause (hours and share),
// reconfigurations by cause.
std::string format_tables(const std::vector<ReplayResult>& results);

json::Json to_json(const ReplayResult& result);
// Every cost parameter, so that a run's JSON says what it assumed.
json::Json to_json(const PolicyCosts& costs);
json::Json to_json(const std::vector<ReplayResult>& results);

struct SvgOptions {
  int width = 960;
  int height = 420;
  std::string title;
};

// Training throughput (samples/s, averaged over 3-pixel bins; work later rolled back is not
// subtracted) against hours, one line per policy, failures as
// red ticks and joins as green ticks under the axis. Valid standalone SVG 1.1.
std::string render_svg(const std::vector<ReplayResult>& results, const SvgOptions& options);

}  // namespace bw::forecast
