#include "schedule/schedule.h"

#include <algorithm>

namespace bw::schedule {

std::vector<int> Schedule::chunks_of(int device) const {
  std::vector<int> out;
  for (int c = 0; c < num_chunks; ++c)
    if (chunk_device[c] == device) out.push_back(c);
  return out;
}

int Schedule::num_stages() const {
  if (chunk_stage.empty()) return num_chunks;
  return chunk_stage.empty() ? 0 : *std::max_element(chunk_stage.begin(), chunk_stage.end()) + 1;
}

bool Schedule::is_lowered() const {
  for (const auto& list : actions)
    for (const auto& a : list)
      if (is_comm(a.kind)) return true;
  return false;
}

bool Schedule::has_split_backward() const {
  for (const auto& list : actions)
    for (const auto& a : list)
      if (a.kind == ActionKind::I || a.kind == ActionKind::W) return true;
  return false;
}

long long Schedule::num_actions() const {
  long long n = 0;
  for (const auto& list : actions) n += static_cast<long long>(list.size());
  return n;
}

}  // namespace bw::schedule
