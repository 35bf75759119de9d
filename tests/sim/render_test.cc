#include "sim/render.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "schedule/generate.h"
#include "trace_nesting.h"

namespace bw::sim {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(Render, ChromeTraceHasATrackPerDeviceASliceperComputeAndFlows) {
  const auto s = schedule::lower(
      schedule::generate({.kind = "hanayo", .devices = 4, .microbatches = 4, .waves = 1}));
  const auto r = simulate(s, stage_costs(s, {.output_bytes = 1e6}));
  const auto doc = nlohmann::json::parse(chrome_trace(s, r));
  int slices = 0, flows_start = 0, flows_end = 0, devices = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X" && e["tid"].get<int>() < 4) ++slices;
    if (ph == "s") ++flows_start;
    if (ph == "f") ++flows_end;
    if (ph == "M" && e["name"] == "thread_name" &&
        e["args"]["name"].get<std::string>().rfind("device", 0) == 0)
      ++devices;
  }
  EXPECT_EQ(devices, 4);
  EXPECT_EQ(slices, 8 * 4 * 2);  // 8 chunks x 4 microbatches x (F, B)
  EXPECT_EQ(flows_start, static_cast<int>(r.transfers.size()));
  EXPECT_EQ(flows_end, flows_start);
  EXPECT_GT(flows_start, 0);
  EXPECT_DOUBLE_EQ(doc["otherData"]["makespan_ms"].get<double>(), r.makespan_ms);
}

// Every track of the simulator's trace nests (Chrome's format; tests/sim/trace_nesting.h): the
// devices' compute, and the links' transfers, which overlap on a link whose latency outlasts the
// serialisation of the next transfer, over every kind and lowered or not.
TEST(Render, ChromeTraceTracksNestForEveryKind) {
  const LinkModel link{.latency_ms = 0.7, .bandwidth_gbps = 8};  // 1 MB: 0.125 ms on the wire
  for (const auto& kind : schedule::schedule_kinds()) {
    for (const bool lowered : {false, true}) {
      SCOPED_TRACE(fmt::format("{}{}", kind, lowered ? ", lowered" : ""));
      const int devices = 4;
      auto s = schedule::generate({.kind = kind, .devices = devices, .microbatches = 8});
      if (lowered) s = schedule::lower(s);
      const auto r = simulate(s, stage_costs(s, {.output_bytes = 1e6}, link));
      const auto doc = nlohmann::json::parse(chrome_trace(s, r));
      EXPECT_TRUE(testing::tracks_nest(doc));
      // Each transfer is a slice on one of its link's tracks.
      std::map<std::string, int> on_links;
      std::map<std::pair<int, int>, std::string> names;
      for (const auto& e : doc["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name")
          names[{e["pid"], e["tid"]}] = e["args"]["name"];
      int slices = 0;
      for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] != "X" || e["tid"].get<int>() < devices) continue;
        const std::string track = names.at({e["pid"], e["tid"]});
        ++slices;
        ++on_links[track.substr(0, track.find(" #"))];
      }
      EXPECT_EQ(slices, static_cast<int>(r.transfers.size()));
      std::map<std::string, int> want;
      for (const auto& x : r.transfers)
        ++want[fmt::format("link {}->{}", x.src_device, x.dst_device)];
      EXPECT_EQ(on_links, want);
    }
  }
}

TEST(Render, SvgDrawsABoxPerComputeAndALegend) {
  const auto s = schedule::generate({.kind = "zb-h1", .devices = 3, .microbatches = 4});
  const auto r = simulate(s, stage_costs(s, {}));
  const std::string svg = svg_timeline(s, r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<title>"), 3 * 4 * 3);  // F, I, W per device and microbatch
  EXPECT_NE(svg.find("backward, weights (W)"), std::string::npos);
  EXPECT_NE(svg.find("zb-h1"), std::string::npos);
}

TEST(Render, AsciiShowsEveryDeviceAndIdleSlots) {
  const auto s = schedule::generate({.kind = "1f1b", .devices = 3, .microbatches = 4});
  const auto r = simulate(s, stage_costs(s, {}));
  const std::string text = ascii_timeline(s, r);
  EXPECT_EQ(text,
            "dev 0 | F0 F1 F2 .  .  .  .  B0--- F3 B1--- .  B2--- .  B3---\n"
            "dev 1 | .  F0 F1 .  .  B0--- F2 B1--- F3 B2--- .  B3--- .  .\n"
            "dev 2 | .  .  F0 B0--- F1 B1--- F2 B2--- F3 B3--- .  .  .  .\n");
}

}  // namespace
}  // namespace bw::sim
