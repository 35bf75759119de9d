#include "schedule/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "schedule/grid.h"

namespace bw::schedule {

namespace {

using detail::Mark;

constexpr int kNone = -1;
constexpr int kNever = INT_MAX;

// Thrown inside the validator and turned into a DryRun by check().
struct Failure {
  std::string problem;
  std::string grid;
};

bool is_backward(ActionKind k) { return k == ActionKind::B || k == ActionKind::I; }

class Validator {
 public:
  Validator(const Schedule& s, const ValidateOptions& o) : s_(s), opt_(o) {}

  DryRun run() {
    check_shape();
    index_actions();
    check_completeness();
    lowered_ = s_.is_lowered();
    if (lowered_) check_comm();
    return dry_run();
  }

 private:
  size_t at(int c, int m) const { return static_cast<size_t>(c) * M_ + m; }
  int dev(int c) const { return s_.chunk_device[c]; }

  [[noreturn]] void fail_at(std::string problem, Mark mark) const {
    throw Failure{std::move(problem), detail::position_grid(s_, mark, opt_.grid_rows)};
  }
  [[noreturn]] void fail(std::string problem) const { throw Failure{std::move(problem), ""}; }

  // 1. Shape: sizes, ranges, placement, stages.
  void check_shape() {
    if (s_.num_devices < 1) fail(fmt::format("schedule has {} devices", s_.num_devices));
    if (static_cast<int>(s_.actions.size()) != s_.num_devices)
      fail(fmt::format("schedule has {} action lists for {} devices", s_.actions.size(),
                       s_.num_devices));
    if (s_.num_chunks < 1) fail(fmt::format("schedule has {} chunks", s_.num_chunks));
    if (s_.num_microbatches < 1)
      fail(fmt::format("schedule has {} microbatches", s_.num_microbatches));
    if (static_cast<int>(s_.chunk_device.size()) != s_.num_chunks)
      fail(fmt::format("placement lists {} chunks, the schedule has {}", s_.chunk_device.size(),
                       s_.num_chunks));
    for (int c = 0; c < s_.num_chunks; ++c)
      if (s_.chunk_device[c] < 0 || s_.chunk_device[c] >= s_.num_devices)
        fail(fmt::format("chunk {} is placed on device {}, outside [0, {})", c, s_.chunk_device[c],
                         s_.num_devices));
    if (!s_.chunk_stage.empty()) {
      if (static_cast<int>(s_.chunk_stage.size()) != s_.num_chunks)
        fail(fmt::format("chunk_stage lists {} chunks, the schedule has {}", s_.chunk_stage.size(),
                         s_.num_chunks));
      for (int c = 0; c < s_.num_chunks; ++c)
        if (s_.chunk_stage[c] < 0)
          fail(fmt::format("chunk {} holds stage {}", c, s_.chunk_stage[c]));
    }
    const int last_stage = s_.num_stages() - 1;
    for (int c = 0; c < s_.num_chunks; ++c) {
      if (s_.prev_chunk(c) < 0 && s_.stage_of(c) != 0)
        fail(fmt::format("chunk {} holds stage {} but chunk {} before it does not hold stage {}", c,
                         s_.stage_of(c), c - 1, s_.stage_of(c) - 1));
      if (s_.next_chunk(c) < 0 && s_.stage_of(c) != last_stage)
        fail(fmt::format("chunk {} holds stage {} but no chunk after it holds stage {}", c,
                         s_.stage_of(c), s_.stage_of(c) + 1));
    }
    C_ = s_.num_chunks;
    M_ = s_.num_microbatches;
    for (int d = 0; d < s_.num_devices; ++d) {
      const auto& list = s_.actions[d];
      for (int k = 0; k < static_cast<int>(list.size()); ++k) {
        const Action& a = list[k];
        if (a.chunk < 0 || a.chunk >= C_)
          fail_at(fmt::format("device {} position {}: {} names chunk {}, outside [0, {})", d, k,
                              to_string(a), a.chunk, C_),
                  {d, k});
        if (a.microbatch < 0 || a.microbatch >= M_)
          fail_at(fmt::format("device {} position {}: {} names microbatch {}, outside [0, {})", d,
                              k, to_string(a), a.microbatch, M_),
                  {d, k});
        if (dev(a.chunk) != d)
          fail_at(
              fmt::format("device {} position {}: {} belongs to device {}, which holds chunk {}", d,
                          k, to_string(a), dev(a.chunk), a.chunk),
              {d, k});
      }
    }
  }

  // Position of every action in its device's list; duplicates are errors.
  void index_actions() {
    const size_t n = static_cast<size_t>(C_) * M_;
    for (auto& v : pos_) v.assign(n, kNone);
    for (int d = 0; d < s_.num_devices; ++d) {
      const auto& list = s_.actions[d];
      for (int k = 0; k < static_cast<int>(list.size()); ++k) {
        const Action& a = list[k];
        int& slot = pos_[static_cast<int>(a.kind)][at(a.chunk, a.microbatch)];
        if (slot != kNone)
          fail_at(fmt::format("device {}: {} appears twice (positions {} and {})", d, to_string(a),
                              slot, k),
                  {d, k});
        slot = k;
      }
    }
  }

  int pos(ActionKind k, int c, int m) const { return pos_[static_cast<int>(k)][at(c, m)]; }
  // Position of the backward that produces chunk c's input gradient (B or I).
  int backward_pos(int c, int m) const {
    const int b = pos(ActionKind::B, c, m);
    return b != kNone ? b : pos(ActionKind::I, c, m);
  }

  // 2. Each microbatch runs through exactly one replica, each chunk F once and B (or I, W) once.
  void check_completeness() {
    std::vector<int> first_chunks;
    for (int c = 0; c < C_; ++c)
      if (s_.prev_chunk(c) < 0) first_chunks.push_back(c);
    for (int m = 0; m < M_; ++m) {
      int start = kNone;
      for (int c : first_chunks) {
        if (pos(ActionKind::F, c, m) == kNone) continue;
        if (start != kNone)
          fail_at(fmt::format("microbatch {} enters two replicas (F on chunks {} and {}); it "
                              "must go through one",
                              m, start, c),
                  {dev(c), pos(ActionKind::F, c, m)});
        start = c;
      }
      if (start == kNone) {
        fail(fmt::format("microbatch {} never runs: no F of it on {}", m,
                         first_chunks.size() == 1 ? fmt::format("chunk {}", first_chunks[0])
                                                  : std::string("any replica's first chunk")));
      }
      std::vector<char> on_route(C_, 0);
      for (int c = start; c >= 0; c = s_.next_chunk(c)) on_route[c] = 1;
      for (int c = 0; c < C_; ++c) {
        const int f = pos(ActionKind::F, c, m), b = pos(ActionKind::B, c, m);
        const int i = pos(ActionKind::I, c, m), w = pos(ActionKind::W, c, m);
        const Action fa{ActionKind::F, c, m};
        if (!on_route[c]) {
          for (auto k : {ActionKind::F, ActionKind::B, ActionKind::I, ActionKind::W})
            if (int p = pos(k, c, m); p != kNone)
              fail_at(fmt::format("microbatch {} goes through the replica starting at chunk {}, "
                                  "but {} runs it on chunk {} of another replica",
                                  m, start, to_string(Action{k, c, m}), c),
                      {dev(c), p});
          continue;
        }
        if (f == kNone)
          fail(
              fmt::format("{} is missing: microbatch {} never runs forward on chunk {} "
                          "(device {})",
                          to_string(fa), m, c, dev(c)));
        if (b != kNone && (i != kNone || w != kNone))
          fail_at(fmt::format("chunk {} microbatch {} runs both a full backward {} and a split "
                              "one (I/W)",
                              c, m, to_string(Action{ActionKind::B, c, m})),
                  {dev(c), b});
        if (b == kNone && i == kNone)
          fail(
              fmt::format("{} is missing: microbatch {} never runs backward (B, or I and W) on "
                          "chunk {} (device {})",
                          to_string(Action{ActionKind::B, c, m}), m, c, dev(c)));
        if (i != kNone && w == kNone)
          fail_at(fmt::format("{} has no W: the split backward needs its weight part",
                              to_string(Action{ActionKind::I, c, m})),
                  {dev(c), i});
        if (w != kNone && i == kNone)
          fail_at(fmt::format("{} has no I before it", to_string(Action{ActionKind::W, c, m})),
                  {dev(c), w});
        const int back = b != kNone ? b : i;
        if (back < f)
          fail_at(fmt::format("{} comes before its forward {} on device {}",
                              to_string(s_.actions[dev(c)][back]), to_string(fa), dev(c)),
                  {dev(c), back});
        if (w != kNone && w < i)
          fail_at(fmt::format("{} comes before {} on device {}: W needs I first",
                              to_string(Action{ActionKind::W, c, m}),
                              to_string(Action{ActionKind::I, c, m}), dev(c)),
                  {dev(c), w});
      }
    }
  }

  // 3. Lowered schedules: every cross-device hand-off has its SEND after the producer and its RECV
  // before the consumer; local hand-offs have none.
  void check_comm() {
    auto expect = [&](ActionKind kind, int c, int m, bool needed, int after, int before,
                      const char* what) {
      const int p = pos(kind, c, m);
      const Action a{kind, c, m};
      if (!needed) {
        if (p != kNone)
          fail_at(fmt::format("{} is not needed: {}", to_string(a), what), {dev(c), p});
        return;
      }
      if (p == kNone)
        fail(fmt::format("{} is missing on device {}: {}", to_string(a), dev(c), what));
      if (after != kNone && p < after)
        fail_at(fmt::format("{} comes before the compute that produces its tensor ({})",
                            to_string(a), to_string(s_.actions[dev(c)][after])),
                {dev(c), p});
      if (before != kNone && p > before)
        fail_at(fmt::format("{} comes after the compute that consumes its tensor ({})",
                            to_string(a), to_string(s_.actions[dev(c)][before])),
                {dev(c), p});
    };
    for (int m = 0; m < M_; ++m) {
      for (int c = 0; c < C_; ++c) {
        const bool runs = pos(ActionKind::F, c, m) != kNone;
        const int n = s_.next_chunk(c), p = s_.prev_chunk(c);
        const bool send_down = runs && n >= 0 && dev(n) != dev(c);
        const bool recv_up = runs && p >= 0 && dev(p) != dev(c);
        const int f = pos(ActionKind::F, c, m), back = runs ? backward_pos(c, m) : kNone;
        expect(ActionKind::SEND_F, c, m, send_down, f, kNone,
               send_down ? "chunk's output goes to the next chunk's device"
                         : "no other device consumes this chunk's output");
        expect(ActionKind::RECV_F, c, m, recv_up, kNone, f,
               recv_up ? "the forward's input comes from the previous chunk's device"
                       : "the forward's input is not made on another device");
        expect(ActionKind::SEND_B, c, m, recv_up, back, kNone,
               recv_up ? "the input gradient goes back to the previous chunk's device"
                       : "no other device needs this chunk's input gradient");
        expect(ActionKind::RECV_B, c, m, send_down, kNone, back,
               send_down ? "the output gradient comes from the next chunk's device"
                         : "the output gradient is not made on another device");
      }
    }
  }

  // 4. Dry run, one action per device per step; what happened at step t is visible from t+1.
  DryRun dry_run() {
    const int P = s_.num_devices;
    const size_t n = static_cast<size_t>(C_) * M_;
    for (auto& v : done_) v.assign(n, kNever);
    std::vector<int> next(P, 0);
    std::vector<std::vector<int>> step_of(P);
    long long remaining = 0;
    for (int d = 0; d < P; ++d) {
      step_of[d].assign(s_.actions[d].size(), -1);
      remaining += static_cast<long long>(s_.actions[d].size());
    }
    std::vector<int> active;
    for (int d = 0; d < P; ++d)
      if (!s_.actions[d].empty()) active.push_back(d);
    std::vector<int> runs;
    int t = 0;
    while (remaining > 0) {
      runs.clear();
      for (int d : active)
        if (ready(s_.actions[d][next[d]], d, t, next)) runs.push_back(d);
      if (runs.empty()) {
        int focus = active.empty() ? 0 : active.front();
        std::string why;
        for (int d : active) {
          if (!why.empty()) why += "; ";
          why += fmt::format("device {} waits at {} for {}", d, to_string(s_.actions[d][next[d]]),
                             waits_for(s_.actions[d][next[d]], d));
          if (why.size() > 600) {
            why += "; ...";
            break;
          }
        }
        throw Failure{fmt::format("deadlock under {} semantics after {} steps: {}",
                                  semantics_name(opt_.semantics), t, why),
                      detail::step_grid(s_, step_of, next, opt_.grid_rows, focus)};
      }
      for (int d : runs) {
        const Action& a = s_.actions[d][next[d]];
        done_[static_cast<int>(a.kind)][at(a.chunk, a.microbatch)] = t;
        step_of[d][next[d]] = t;
        ++next[d];
        --remaining;
      }
      std::erase_if(active,
                    [&](int d) { return next[d] == static_cast<int>(s_.actions[d].size()); });
      ++t;
    }
    DryRun out;
    out.steps = t;
    return out;
  }

  bool happened(ActionKind k, int c, int m, int t) const {
    return done_[static_cast<int>(k)][at(c, m)] < t;
  }
  bool backward_happened(int c, int m, int t) const {
    return happened(ActionKind::B, c, m, t) || happened(ActionKind::I, c, m, t);
  }
  // True when device `peer`'s next action (at the start of this step) is `a`.
  bool at_head(int peer, const Action& a, const std::vector<int>& next) const {
    const auto& list = s_.actions[peer];
    return next[peer] < static_cast<int>(list.size()) && list[next[peer]] == a;
  }

  bool ready(const Action& a, int d, int t, const std::vector<int>& next) const {
    const int c = a.chunk, m = a.microbatch;
    const CommSemantics sem = opt_.semantics;
    switch (a.kind) {
      case ActionKind::F: {
        const int p = s_.prev_chunk(c);
        if (p < 0) return true;
        if (dev(p) == d || !lowered_) return happened(ActionKind::F, p, m, t);
        return happened(ActionKind::RECV_F, c, m, t) && happened(ActionKind::SEND_F, p, m, t);
      }
      case ActionKind::B:
      case ActionKind::I: {
        if (!happened(ActionKind::F, c, m, t)) return false;
        const int n = s_.next_chunk(c);
        if (n < 0) return true;
        if (dev(n) == d || !lowered_) return backward_happened(n, m, t);
        return happened(ActionKind::RECV_B, c, m, t) && happened(ActionKind::SEND_B, n, m, t);
      }
      case ActionKind::W:
        return happened(ActionKind::I, c, m, t);
      case ActionKind::SEND_F: {
        if (!happened(ActionKind::F, c, m, t)) return false;
        const int n = s_.next_chunk(c);
        if (sem == CommSemantics::kAsync) return true;
        if (sem == CommSemantics::kRendezvous) return happened(ActionKind::RECV_F, n, m, t);
        return at_head(dev(n), {ActionKind::RECV_F, n, m}, next);
      }
      case ActionKind::SEND_B: {
        if (!backward_happened(c, m, t)) return false;
        const int p = s_.prev_chunk(c);
        if (sem == CommSemantics::kAsync) return true;
        if (sem == CommSemantics::kRendezvous) return happened(ActionKind::RECV_B, p, m, t);
        return at_head(dev(p), {ActionKind::RECV_B, p, m}, next);
      }
      case ActionKind::RECV_F: {
        if (sem != CommSemantics::kSynchronous) return true;
        const int p = s_.prev_chunk(c);
        return at_head(dev(p), {ActionKind::SEND_F, p, m}, next) &&
               happened(ActionKind::F, p, m, t);
      }
      case ActionKind::RECV_B: {
        if (sem != CommSemantics::kSynchronous) return true;
        const int n = s_.next_chunk(c);
        return at_head(dev(n), {ActionKind::SEND_B, n, m}, next) && backward_happened(n, m, t);
      }
    }
    return false;
  }

  // What a blocked action waits for, in words.
  std::string waits_for(const Action& a, int d) const {
    const int c = a.chunk, m = a.microbatch;
    auto on = [&](ActionKind k, int chunk) {
      return fmt::format("{} (device {})", to_string(Action{k, chunk, m}), dev(chunk));
    };
    switch (a.kind) {
      case ActionKind::F: {
        const int p = s_.prev_chunk(c);
        if (dev(p) == d || !lowered_) return on(ActionKind::F, p);
        return on(ActionKind::SEND_F, p);
      }
      case ActionKind::B:
      case ActionKind::I: {
        const int n = s_.next_chunk(c);
        if (dev(n) == d || !lowered_)
          return fmt::format("the backward of chunk {} (device {})", n, dev(n));
        return on(ActionKind::SEND_B, n);
      }
      case ActionKind::W:
        return on(ActionKind::I, c);
      case ActionKind::SEND_F:
        return "its receive " + on(ActionKind::RECV_F, s_.next_chunk(c));
      case ActionKind::SEND_B:
        return "its receive " + on(ActionKind::RECV_B, s_.prev_chunk(c));
      case ActionKind::RECV_F:
        return "its send " + on(ActionKind::SEND_F, s_.prev_chunk(c));
      case ActionKind::RECV_B:
        return "its send " + on(ActionKind::SEND_B, s_.next_chunk(c));
    }
    return "?";
  }

  const Schedule& s_;
  ValidateOptions opt_;
  int C_ = 0, M_ = 0;
  bool lowered_ = false;
  std::vector<int> pos_[8];   // by ActionKind: position in its device's list, or kNone
  std::vector<int> done_[8];  // by ActionKind: dry-run step at which it ran, or kNever
};

}  // namespace

std::string_view semantics_name(CommSemantics s) {
  switch (s) {
    case CommSemantics::kAsync:
      return "async (isend/irecv)";
    case CommSemantics::kRendezvous:
      return "rendezvous (blocking send)";
    case CommSemantics::kSynchronous:
      return "synchronous (blocking send and recv)";
  }
  return "?";
}

DryRun check(const Schedule& s, const ValidateOptions& options) {
  try {
    return Validator(s, options).run();
  } catch (const Failure& f) {
    DryRun out;
    out.ok = false;
    out.problem = fmt::format("schedule '{}' is invalid: {}", s.kind, f.problem);
    out.grid = f.grid;
    return out;
  }
}

void validate(const Schedule& s, const ValidateOptions& options) {
  DryRun r = check(s, options);
  if (!r.ok) throw ScheduleError(r.problem, r.grid);
}

void validate(const Schedule& s) { validate(s, ValidateOptions{}); }

}  // namespace bw::schedule
