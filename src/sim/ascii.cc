#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/render.h"

namespace bw::sim {

std::string ascii_timeline(const schedule::Schedule& s, const SimResult& r, double slot_ms) {
  const int P = s.num_devices;
  bool one_chunk_each = true;
  std::vector<int> held(P, 0);
  for (int c = 0; c < s.num_chunks; ++c)
    if (++held[s.chunk_device[c]] > 1) one_chunk_each = false;
  auto label = [&](const schedule::Action& a) {
    return one_chunk_each ? fmt::format("{}{}", schedule::kind_name(a.kind), a.microbatch)
                          : schedule::to_string(a);
  };
  if (slot_ms <= 0) {
    slot_ms = r.makespan_ms > 0 ? r.makespan_ms : 1;
    for (int d = 0; d < P && d < static_cast<int>(r.timing.size()); ++d)
      for (const auto& t : r.timing[d])
        if (t.end_ms - t.start_ms > 1e-12) slot_ms = std::min(slot_ms, t.end_ms - t.start_ms);
  }
  size_t cell = 2;
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (schedule::is_compute(a.kind)) cell = std::max(cell, label(a).size() + 1);
  const int slots = static_cast<int>(std::lround(r.makespan_ms / slot_ms));
  std::string out;
  for (int d = 0; d < P; ++d) {
    std::string line(static_cast<size_t>(slots) * cell, ' ');
    for (int k = 0; k < slots; ++k) line[k * cell] = '.';
    if (d < static_cast<int>(r.timing.size())) {
      const auto& list = s.actions[d];
      for (size_t k = 0; k < list.size(); ++k) {
        if (!schedule::is_compute(list[k].kind)) continue;
        const auto& t = r.timing[d][k];
        const long a = std::lround(t.start_ms / slot_ms), b = std::lround(t.end_ms / slot_ms);
        for (long x = a; x < b && x < slots; ++x) std::fill_n(line.begin() + x * cell, cell, ' ');
        const std::string text = label(list[k]);
        const size_t width = static_cast<size_t>(std::max(1L, b - a)) * cell;
        std::string box = text;
        box.resize(width > 0 ? width - 1 : 0, b - a > 1 ? '-' : ' ');
        if (a < slots) line.replace(a * cell, std::min(box.size(), line.size() - a * cell), box);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += fmt::format("dev {} | {}\n", d, line);
  }
  return out;
}

}  // namespace bw::sim
