#include "schedule/fsdp.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace bw::schedule {

namespace {

// Chunks of the next `count` distinct chunks computing from position k on (a pair adds both of
// its chunks, then stops when the window is full, as PyTorch counts it).
std::vector<int> window(const std::vector<Action>& list, size_t k, int count) {
  std::vector<int> out;
  auto add = [&](int c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  for (; k < list.size(); ++k) {
    const Action& a = list[k];
    if (a.kind == ActionKind::OVERLAP_F_B) {
      add(list[k + 1].chunk);
      add(list[k + 2].chunk);
      k += 2;
      if (static_cast<int>(out.size()) >= count) break;
    } else if (is_compute(a.kind)) {
      add(a.chunk);
      if (static_cast<int>(out.size()) == count) break;
    }
  }
  return out;
}

}  // namespace

Schedule add_fsdp_actions(const Schedule& s, const FsdpOptions& o) {
  if (o.max_active_chunks < 1)
    throw ConfigError(fmt::format("FSDP needs at least one unsharded chunk per device (got {})",
                                  o.max_active_chunks));
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (is_comm(a.kind) || is_chunk_action(a.kind))
        throw ConfigError(fmt::format(
            "schedule '{}' already holds {}; FSDP actions are added to a compute-only schedule",
            s.kind, to_string(a)));
  Schedule out = s;
  for (int d = 0; d < s.num_devices; ++d) {
    const auto& in = s.actions[d];
    std::vector<int> grads_left(s.num_chunks, 0);
    for (const Action& a : in)
      if (a.kind == ActionKind::B || a.kind == ActionKind::W) ++grads_left[a.chunk];
    std::vector<Action> list;
    list.reserve(in.size() + 4 * s.num_chunks);
    std::vector<int> active;  // unsharded chunks, ascending
    auto after = [&](const Action& a) {
      if (o.reduce_grad && (a.kind == ActionKind::B || a.kind == ActionKind::W) &&
          --grads_left[a.chunk] == 0)
        list.push_back({ActionKind::REDUCE_GRAD, a.chunk, -1});
    };
    for (size_t k = 0; k < in.size(); ++k) {
      const Action& a = in[k];
      if (o.unshard_reshard && (is_compute(a.kind) || a.kind == ActionKind::OVERLAP_F_B)) {
        const std::vector<int> next = window(in, k, o.max_active_chunks);
        for (auto it = active.begin(); it != active.end();) {
          if (std::find(next.begin(), next.end(), *it) == next.end()) {
            list.push_back({ActionKind::RESHARD, *it, -1});
            it = active.erase(it);
          } else {
            ++it;
          }
        }
        for (int c : next)
          if (!std::binary_search(active.begin(), active.end(), c)) {
            list.push_back({ActionKind::UNSHARD, c, -1});
            active.insert(std::lower_bound(active.begin(), active.end(), c), c);
          }
      }
      if (a.kind == ActionKind::OVERLAP_F_B && k + 2 < in.size()) {
        list.push_back(a);
        list.push_back(in[k + 1]);
        list.push_back(in[k + 2]);
        after(in[k + 1]);
        after(in[k + 2]);
        k += 2;
        continue;
      }
      list.push_back(a);
      after(a);
    }
    for (int c : active) list.push_back({ActionKind::RESHARD, c, -1});
    out.actions[d] = std::move(list);
  }
  return out;
}

}  // namespace bw::schedule
