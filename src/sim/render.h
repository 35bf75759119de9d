// Timelines for people and tools: Chrome-trace JSON (Perfetto, chrome://tracing), an SVG drawn
// like the papers' figures, and an ASCII picture (schedule files' top comments, terminals).
//
// All take a schedule and the SimResult of simulating it with SimOptions::timeline on. Pure; they
// return text, the cli writes files.
#pragma once

#include <string>

#include "schedule/schedule.h"
#include "sim/timeline.h"

namespace bw::sim {

// One process, one track per device (F, B, I, W slices coloured by kind; SEND/RECV as instants),
// transfers as flow arrows from the producing slice to the consuming one and as slices on one
// track per link, and a counter track of activation bytes per device. Times in microseconds.
std::string chrome_trace(const schedule::Schedule& s, const SimResult& r);

struct SvgOptions {
  std::string title;       // drawn above the timeline; empty: kind, P, B and the numbers
  double width_px = 1200;  // of the timeline area
  double row_height_px = 26;
};
// One row per device, time left to right, a box per compute action (colour by kind, shade by the
// chunk's position on its device, microbatch number inside), a legend and a time axis.
std::string svg_timeline(const schedule::Schedule& s, const SimResult& r,
                         const SvgOptions& options = {});

// One text row per device, one cell per `slot_ms` of time (the shortest compute when 0). Each
// compute shows `<chunk><KIND><microbatch>` (or `<KIND><microbatch>` when every device holds one
// chunk), padded over the slots it spans; idle slots are `.`.
std::string ascii_timeline(const schedule::Schedule& s, const SimResult& r, double slot_ms = 0);

}  // namespace bw::sim
