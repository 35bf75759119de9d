// Prints docs/schedules.md's table: bubble ratio and peak activation memory of every kind at
// P = 4, 8, 16 and B = P, 2P, 4P with T_B = 2 T_F (uniform chunks, free links), as Markdown.
//   build/bench/sim/bw_schedule_table > table.md
#include <fmt/format.h>

#include <algorithm>

#include "schedule/generate.h"
#include "sim/timeline.h"

int main() {
  using namespace bw;
  struct Row {
    std::string label;
    schedule::ScheduleSpec spec;
  };
  fmt::print(
      "| schedule | P | B | bubble | 1F1B bubble | peak memory (max over devices, M_a) |"
      " device 0 / last (M_a) |\n|---|---|---|---|---|---|---|\n");
  for (int P : {4, 8, 16})
    for (int B : {P, 2 * P, 4 * P}) {
      std::vector<Row> rows = {
          {"gpipe", {.kind = "gpipe", .devices = P, .microbatches = B}},
          {"1f1b", {.kind = "1f1b", .devices = P, .microbatches = B}},
          {"interleaved v=2",
           {.kind = "interleaved", .devices = P, .microbatches = B, .chunks_per_device = 2}},
          {"chimera", {.kind = "chimera", .devices = P, .microbatches = B}},
          {"hanayo W=1", {.kind = "hanayo", .devices = P, .microbatches = B, .waves = 1}},
          {"hanayo W=2", {.kind = "hanayo", .devices = P, .microbatches = B, .waves = 2}},
          {"hanayo W=4", {.kind = "hanayo", .devices = P, .microbatches = B, .waves = 4}},
          {"zb-h1", {.kind = "zb-h1", .devices = P, .microbatches = B}},
          {"zb-v", {.kind = "zb-v", .devices = P, .microbatches = B}},
      };
      const double onef1b = (P - 1.0) / (B + P - 1.0);
      for (const auto& row : rows) {
        const auto s = schedule::lower(schedule::generate(row.spec));
        schedule::validate(s, {.semantics = schedule::CommSemantics::kRendezvous});
        const auto r = sim::simulate(s, sim::stage_costs(s, {.forward_ms = 1, .backward_ms = 2}),
                                     {.timeline = false});
        const auto& u = r.peak_activation_units;
        fmt::print("| {} | {} | {} | {:.1f}% | {:.1f}% | {:.3g} | {:.3g} / {:.3g} |\n", row.label,
                   P, B, 100 * r.overall_bubble_ratio, 100 * onef1b,
                   *std::max_element(u.begin(), u.end()), u.front(), u.back());
      }
    }
}
