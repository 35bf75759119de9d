#include "schedule/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
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

// Dry-runs `s` with sends that block until their receive is posted (validate.h's kRendezvous),
// and whenever every device is stuck while some SEND waits for a RECV its peer has not posted
// yet, moves that RECV up to the peer's current position. The peer never ran past that position,
// so the run so far is unchanged and it continues from where it stalled. Stops quietly when stuck
// for any other reason (an invalid compute order, which validate() reports). A worklist: each
// device runs until it blocks on an action that has not happened, which wakes it when it does.
class ReceivePoster {
 public:
  explicit ReceivePoster(Schedule& s) : s_(s), C_(s.num_chunks), M_(s.num_microbatches) {}

  void run() {
    const int P = s_.num_devices;
    const size_t n = static_cast<size_t>(s_.num_microbatches) * C_;
    std::array<int8_t, kNumSlotKinds> not_yet;
    not_yet.fill(kNotYet);
    done_.assign(n, not_yet);
    next_.assign(P, 0);
    prev_.resize(C_);
    next_of_.resize(C_);
    prev_device_.resize(C_);
    next_device_.resize(C_);
    for (int c = 0; c < C_; ++c) {
      prev_[c] = s_.prev_chunk(c);
      next_of_[c] = s_.next_chunk(c);
      prev_device_[c] = prev_[c] >= 0 ? s_.chunk_device[prev_[c]] : -1;
      next_device_[c] = next_of_[c] >= 0 ? s_.chunk_device[next_of_[c]] : -1;
    }
    for (int d = P - 1; d >= 0; --d) work_.push_back(d);
    while (true) {
      while (!work_.empty()) {
        const int d = work_.back();
        work_.pop_back();
        advance(d);
      }
      if (!move_receives()) return;
    }
  }

 private:
  // Chunk-major: a device walks its few chunks over rising microbatches, so its next slots share
  // cache lines (measured faster than microbatch-major at large sizes).
  size_t key(const Action& a) const { return static_cast<size_t>(a.chunk) * M_ + a.microbatch; }
  // done_ per (chunk, microbatch) and kind: kNotYet, kWaited (not yet, and its consumer device is
  // blocked on it) or kHappened. One byte each, so the whole state stays in cache.
  static constexpr int8_t kNotYet = 0, kWaited = 1, kHappened = 2;
  bool happened(const Action& a) const {
    return done_[key(a)][static_cast<int>(a.kind)] == kHappened;
  }
  // The device that can be blocked on `a`: the one consuming what it makes (for a RECV, the
  // device whose SEND waits for it). Unique per action, so no waiter needs storing.
  int consumer(const Action& a) const {
    const int c = a.chunk;
    switch (a.kind) {
      case ActionKind::F:
      case ActionKind::SEND_F:
      case ActionKind::RECV_B:
        return next_device_[c];
      case ActionKind::B:
      case ActionKind::I:
      case ActionKind::SEND_B:
      case ActionKind::RECV_F:
        return prev_device_[c];
      default:
        return -1;
    }
  }
  bool done(int d) const { return next_[d] >= static_cast<int>(s_.actions[d].size()); }
  const Action& head(int d) const { return s_.actions[d][next_[d]]; }

  // The RECV a SEND needs posted (blocking sends).
  static std::optional<Action> receive_for(const Schedule& s, const Action& a) {
    if (a.kind == ActionKind::SEND_F && s.next_chunk(a.chunk) >= 0)
      return Action{ActionKind::RECV_F, s.next_chunk(a.chunk), a.microbatch};
    if (a.kind == ActionKind::SEND_B && s.prev_chunk(a.chunk) >= 0)
      return Action{ActionKind::RECV_B, s.prev_chunk(a.chunk), a.microbatch};
    return std::nullopt;
  }

  // Runs device d until it blocks on an action that has not happened. On locals: GCC lets a
  // byte-sized store alias any memory, so through members every state update would reload the list,
  // the table and the placement.
  void advance(int d) {
    const Action* const list = s_.actions[d].data();
    const int n = static_cast<int>(s_.actions[d].size());
    std::array<int8_t, kNumSlotKinds>* const done = done_.data();
    const int* const device = s_.chunk_device.data();
    const int* const prev = prev_.data();
    const int* const next = next_of_.data();
    const size_t M = static_cast<size_t>(M_);
    const bool split = has_split_;
    auto st = [&](ActionKind kind, int c, int m) -> int8_t& {
      return done[static_cast<size_t>(c) * M + m][static_cast<int>(kind)];
    };
    int k = next_[d];
    for (; k < n; ++k) {
      const Action a = list[k];
      const int c = a.chunk, m = a.microbatch;
      int8_t* need = nullptr;  // what `a` waits for, if it has not happened
      switch (a.kind) {
        case ActionKind::F: {
          const int p = prev[c];
          if (p >= 0) need = &st(device[p] == d ? ActionKind::F : ActionKind::SEND_F, p, m);
          break;
        }
        case ActionKind::B:
        case ActionKind::I: {
          const int nx = next[c];
          if (nx < 0) break;
          if (device[nx] == d) {
            if (st(ActionKind::B, nx, m) == kHappened || st(ActionKind::I, nx, m) == kHappened)
              break;
            // B and I never both exist for one chunk and microbatch (validate() checks it);
            // the one that will run is the one in the list, so wait for either.
            if (split) {
              st(ActionKind::I, nx, m) = kWaited;
              st(ActionKind::B, nx, m) = kWaited;
            } else {
              st(ActionKind::B, nx, m) = kWaited;
            }
            next_[d] = k;
            return;
          }
          need = &st(ActionKind::SEND_B, nx, m);
          break;
        }
        case ActionKind::SEND_F: {
          const int nx = next[c];
          if (nx >= 0) need = &st(ActionKind::RECV_F, nx, m);
          break;
        }
        case ActionKind::SEND_B: {
          const int p = prev[c];
          if (p >= 0) need = &st(ActionKind::RECV_B, p, m);
          break;
        }
        case ActionKind::W:
        case ActionKind::RECV_F:
        case ActionKind::RECV_B:
          break;
        default:
          continue;  // chunk actions and pair markers need nothing here
      }
      if (need && *need != kHappened) {
        *need = kWaited;
        next_[d] = k;
        return;
      }
      int8_t& slot = st(a.kind, c, m);
      if (slot == kWaited) work_.push_back(consumer(a));
      slot = kHappened;
    }
    next_[d] = k;
  }

  // Everyone is stuck: post early the receives that blocked sends wait for. False if none.
  bool move_receives() {
    bool moved = false;
    for (int d = 0; d < s_.num_devices; ++d) {
      if (done(d)) continue;
      auto want = receive_for(s_, head(d));
      if (!want || happened(*want)) continue;
      const int peer = s_.chunk_device[want->chunk];
      auto& list = s_.actions[peer];
      const int n = static_cast<int>(list.size());
      int from = next_[peer];
      while (from < n && !(list[from].kind == want->kind && list[from].chunk == want->chunk &&
                           list[from].microbatch == want->microbatch))
        ++from;
      if (from == n) continue;  // missing, or behind: validate() will say
      // Never inside an overlapped pair: if the peer stands in one, post before its marker (it
      // has run the marker and maybe the first compute; the receive then counts as posted).
      int at = next_[peer];
      while (at > 0 && at > next_[peer] - 2 &&
             (list[at - 1].kind == ActionKind::OVERLAP_F_B ||
              (at >= 2 && list[at - 2].kind == ActionKind::OVERLAP_F_B)))
        --at;
      // Move it up to `at` (std::rotate by one, which the library does element by element).
      const Action moving = list[from];
      std::copy_backward(list.begin() + at, list.begin() + from, list.begin() + from + 1);
      list[at] = moving;
      if (at < next_[peer]) {
        int8_t& slot = done_[key(*want)][static_cast<int>(want->kind)];
        if (slot == kWaited) work_.push_back(consumer(*want));
        slot = kHappened;
        ++next_[peer];
      }
      work_.push_back(peer);
      moved = true;
    }
    return moved;
  }

 public:
  bool has_split_ = false;

 private:
  Schedule& s_;
  int C_, M_;
  std::vector<std::array<int8_t, kNumSlotKinds>> done_;  // per (chunk, microbatch), by ActionKind
  std::vector<int> next_;
  std::vector<int> prev_, next_of_;             // per chunk: Schedule::prev_chunk, next_chunk
  std::vector<int> prev_device_, next_device_;  // per chunk: their devices (-1: none)
  std::vector<int> work_;
};

void post_receives_in_time(Schedule& s, bool has_split_backward) {
  ReceivePoster poster(s);
  poster.has_split_ = has_split_backward;
  poster.run();
}

}  // namespace

Schedule lower(const Schedule& compute_only, const LowerOptions& options) {
  if (compute_only.is_lowered())
    throw ConfigError(fmt::format(
        "schedule '{}' already holds SEND/RECV actions; lower() takes a compute-only schedule",
        compute_only.kind));
  if (options.recv_lookahead < 0)
    throw ConfigError(fmt::format("recv lookahead must be >= 0 (got {})", options.recv_lookahead));
  Schedule out;
  out.kind = compute_only.kind;
  out.num_devices = compute_only.num_devices;
  out.num_chunks = compute_only.num_chunks;
  out.num_microbatches = compute_only.num_microbatches;
  out.chunk_device = compute_only.chunk_device;
  out.chunk_stage = compute_only.chunk_stage;
  out.actions.resize(compute_only.actions.size());
  const int L = options.recv_lookahead;
  // A unit is what the device runs as one: a compute action, or an OVERLAP_F_B marker with its
  // pair. The RECVs of unit u are posted before unit max(0, u - L); the SENDs of a unit follow
  // its end (for a pair, after both, as PyTorch places them). Chunk actions (UNSHARD, ...) stay
  // where they are.
  struct Unit {
    int begin, end;  // positions [begin, end) in the input list
  };
  std::vector<Unit> units;
  const int C = compute_only.num_chunks;
  constexpr uint8_t kPrevAway = 1, kNextAway = 2;
  std::vector<uint8_t> away(std::max(C, 0));
  bool split = false;  // any I or W (Schedule::has_split_backward, found on the way)
  for (int d = 0; d < compute_only.num_devices; ++d) {
    const auto& in = compute_only.actions[d];
    const int n = static_cast<int>(in.size());
    units.clear();
    for (int k = 0; k < n; ++k) {
      if (in[k].kind == ActionKind::OVERLAP_F_B) {
        if (k + 2 >= n || !is_compute(in[k + 1].kind) || !is_compute(in[k + 2].kind))
          throw ConfigError(fmt::format(
              "device {} position {}: OVERLAP_F_B must be followed by its two compute actions", d,
              k));
        for (int j = k + 1; j <= k + 2; ++j)
          split = split || in[j].kind == ActionKind::I || in[j].kind == ActionKind::W;
        units.push_back({k, k + 3});
        k += 2;
      } else if (is_compute(in[k].kind)) {
        units.push_back({k, k + 1});
        split = split || in[k].kind == ActionKind::I || in[k].kind == ActionKind::W;
      }
    }
    const int U = static_cast<int>(units.size());
    // Per chunk, whether its previous / next chunk sits on another device than d: recv_for()
    // and send_after() as a table (they run for every compute action).
    for (int c = 0; c < C; ++c) {
      const int p = compute_only.prev_chunk(c), nx = compute_only.next_chunk(c);
      away[c] =
          static_cast<uint8_t>((p >= 0 && compute_only.chunk_device[p] != d ? kPrevAway : 0) |
                               (nx >= 0 && compute_only.chunk_device[nx] != d ? kNextAway : 0));
    }
    auto post_recvs_of = [&](int u, std::vector<Action>& list) {
      for (int k = units[u].begin; k < units[u].end; ++k) {
        const Action& a = in[k];
        if (static_cast<unsigned>(a.chunk) >= static_cast<unsigned>(C)) {
          if (auto r = recv_for(compute_only, d, a)) list.push_back(*r);
        } else if (a.kind == ActionKind::F) {
          if (away[a.chunk] & kPrevAway)
            list.push_back({ActionKind::RECV_F, a.chunk, a.microbatch});
        } else if (a.kind == ActionKind::B || a.kind == ActionKind::I) {
          if (away[a.chunk] & kNextAway)
            list.push_back({ActionKind::RECV_B, a.chunk, a.microbatch});
        }
      }
    };
    auto send_after_unit = [&](int u, std::vector<Action>& list) {
      for (int k = units[u].begin; k < units[u].end; ++k) {
        const Action& a = in[k];
        if (static_cast<unsigned>(a.chunk) >= static_cast<unsigned>(C)) {
          if (auto send = send_after(compute_only, d, a)) list.push_back(*send);
        } else if (a.kind == ActionKind::F) {
          if (away[a.chunk] & kNextAway)
            list.push_back({ActionKind::SEND_F, a.chunk, a.microbatch});
        } else if (a.kind == ActionKind::B || a.kind == ActionKind::I) {
          if (away[a.chunk] & kPrevAway)
            list.push_back({ActionKind::SEND_B, a.chunk, a.microbatch});
        }
      }
    };
    auto& list = out.actions[d];
    list.reserve(static_cast<size_t>(n) * 3);
    int u = 0;
    for (int k = 0; k < n; ++k) {
      if (u < U && k == units[u].begin) {
        if (u == 0)
          for (int v = 0; v < std::min(U, L); ++v) post_recvs_of(v, list);
        if (u + L < U) post_recvs_of(u + L, list);
      }
      list.push_back(in[k]);
      if (u < U && k + 1 == units[u].end) {
        send_after_unit(u, list);
        ++u;
      }
    }
  }
  if (options.receives_in_time) post_receives_in_time(out, split);
  return out;
}

Schedule lower(const Schedule& compute_only) { return lower(compute_only, LowerOptions{}); }

Schedule strip_comm(const Schedule& s) {
  Schedule out = s;
  for (auto& list : out.actions)
    std::erase_if(list, [](const Action& a) {
      return !is_compute(a.kind) && a.kind != ActionKind::OVERLAP_F_B;
    });
  return out;
}

}  // namespace bw::schedule
