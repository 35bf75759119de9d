#include "schedule/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>

#include "core/error.h"

namespace bw::schedule {

namespace {

// The RECV a compute action needs on its device, if any.
std::optional<Action> recv_for(const Schedule& s, int device, const Action& a) {
  if (a.kind == ActionKind::F) {
    const int p = s.prev_chunk(a.chunk);
    if (p >= 0 && s.chunk_device[p] != device)
      return Action{ActionKind::RECV_F, a.chunk, a.microbatch};
  } else if (a.kind == ActionKind::B || a.kind == ActionKind::I) {
    const int n = s.next_chunk(a.chunk);
    if (n >= 0 && s.chunk_device[n] != device)
      return Action{ActionKind::RECV_B, a.chunk, a.microbatch};
  }
  return std::nullopt;
}

// The SEND that follows a compute action on its device, if any.
std::optional<Action> send_after(const Schedule& s, int device, const Action& a) {
  if (a.kind == ActionKind::F) {
    const int n = s.next_chunk(a.chunk);
    if (n >= 0 && s.chunk_device[n] != device)
      return Action{ActionKind::SEND_F, a.chunk, a.microbatch};
  } else if (a.kind == ActionKind::B || a.kind == ActionKind::I) {
    const int p = s.prev_chunk(a.chunk);
    if (p >= 0 && s.chunk_device[p] != device)
      return Action{ActionKind::SEND_B, a.chunk, a.microbatch};
  }
  return std::nullopt;
}

// Dry-runs `s` with sends that block until their receive is posted, and whenever every device is
// stuck while some SEND waits for a RECV its peer has not posted yet, moves that RECV up to the
// peer's current position. Those devices never ran past that position, so the run so far is
// unchanged and it continues from where it stalled. Stops quietly when stuck for any other reason
// (an invalid compute order, which validate() reports).
void post_receives_in_time(Schedule& s) {
  const int P = s.num_devices, M = s.num_microbatches;
  constexpr int kNever = INT_MAX;
  const size_t n = static_cast<size_t>(s.num_chunks) * M;
  std::vector<int> done[8];
  for (auto& v : done) v.assign(n, kNever);
  auto at = [M](int c, int m) { return static_cast<size_t>(c) * M + m; };
  auto happened = [&](ActionKind k, int c, int m, int t) {
    return done[static_cast<int>(k)][at(c, m)] < t;
  };
  auto backward = [&](int c, int m, int t) {
    return happened(ActionKind::B, c, m, t) || happened(ActionKind::I, c, m, t);
  };
  // The RECV a blocked SEND waits for (chunk on the receiving side), or nullopt when ready.
  auto blocking_recv = [&](const Action& a, int t) -> std::optional<Action> {
    const int c = a.chunk, m = a.microbatch;
    if (a.kind == ActionKind::SEND_F) {
      const int nx = s.next_chunk(c);
      if (nx < 0 || happened(ActionKind::RECV_F, nx, m, t)) return std::nullopt;
      return Action{ActionKind::RECV_F, nx, m};
    }
    if (a.kind == ActionKind::SEND_B) {
      const int pv = s.prev_chunk(c);
      if (pv < 0 || happened(ActionKind::RECV_B, pv, m, t)) return std::nullopt;
      return Action{ActionKind::RECV_B, pv, m};
    }
    return std::nullopt;
  };
  auto ready = [&](const Action& a, int d, int t) {
    const int c = a.chunk, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::F: {
        const int p = s.prev_chunk(c);
        if (p < 0) return true;
        if (s.chunk_device[p] == d) return happened(ActionKind::F, p, m, t);
        return happened(ActionKind::SEND_F, p, m, t);
      }
      case ActionKind::B:
      case ActionKind::I: {
        const int nx = s.next_chunk(c);
        if (nx < 0) return true;
        if (s.chunk_device[nx] == d) return backward(nx, m, t);
        return happened(ActionKind::SEND_B, nx, m, t);
      }
      case ActionKind::W:
      case ActionKind::RECV_F:
      case ActionKind::RECV_B:
        return true;
      case ActionKind::SEND_F:
      case ActionKind::SEND_B:
        return !blocking_recv(a, t).has_value();
    }
    return false;
  };
  std::vector<int> next(P, 0), runs;
  std::vector<int> active;
  for (int d = 0; d < P; ++d)
    if (!s.actions[d].empty()) active.push_back(d);
  for (int t = 0; !active.empty(); ++t) {
    runs.clear();
    for (int d : active)
      if (ready(s.actions[d][next[d]], d, t)) runs.push_back(d);
    if (runs.empty()) {
      bool moved = false;
      for (int d : active) {
        auto want = blocking_recv(s.actions[d][next[d]], t);
        if (!want) continue;
        const int peer = s.chunk_device[want->chunk];
        auto& list = s.actions[peer];
        auto it = std::find(list.begin() + next[peer], list.end(), *want);
        if (it == list.end()) continue;  // missing or already behind: validate() will say
        std::rotate(list.begin() + next[peer], it, it + 1);
        moved = true;
      }
      if (!moved) return;
      --t;  // re-run this step with the receives in place
      continue;
    }
    for (int d : runs) {
      const Action& a = s.actions[d][next[d]++];
      done[static_cast<int>(a.kind)][at(a.chunk, a.microbatch)] = t;
    }
    std::erase_if(active, [&](int d) { return next[d] == static_cast<int>(s.actions[d].size()); });
  }
}

}  // namespace

Schedule lower(const Schedule& compute_only, const LowerOptions& options) {
  if (compute_only.is_lowered())
    throw ConfigError(fmt::format(
        "schedule '{}' already holds SEND/RECV actions; lower() takes a compute-only schedule",
        compute_only.kind));
  if (options.recv_lookahead < 0)
    throw ConfigError(fmt::format("recv lookahead must be >= 0 (got {})", options.recv_lookahead));
  Schedule out = compute_only;
  const int L = options.recv_lookahead;
  for (int d = 0; d < compute_only.num_devices; ++d) {
    const auto& in = compute_only.actions[d];
    const int n = static_cast<int>(in.size());
    std::vector<std::optional<Action>> recvs(n);
    for (int k = 0; k < n; ++k) recvs[k] = recv_for(compute_only, d, in[k]);
    auto& list = out.actions[d];
    list.clear();
    list.reserve(static_cast<size_t>(n) * 3);
    // The RECV for compute k is posted just before compute max(0, k - L).
    for (int k = 0; k < std::min(n, L); ++k)
      if (recvs[k]) list.push_back(*recvs[k]);
    for (int k = 0; k < n; ++k) {
      if (k + L < n && recvs[k + L]) list.push_back(*recvs[k + L]);
      list.push_back(in[k]);
      if (auto send = send_after(compute_only, d, in[k])) list.push_back(*send);
    }
  }
  if (options.receives_in_time) post_receives_in_time(out);
  return out;
}

Schedule lower(const Schedule& compute_only) { return lower(compute_only, LowerOptions{}); }

Schedule strip_comm(const Schedule& s) {
  Schedule out = s;
  for (auto& list : out.actions)
    std::erase_if(list, [](const Action& a) { return is_comm(a.kind); });
  return out;
}

}  // namespace bw::schedule
