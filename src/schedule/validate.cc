#include "schedule/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <optional>

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
    check_chunk_actions();
    lowered_ = s_.is_lowered();
    if (lowered_) check_comm();
    prev_of_.resize(C_);
    next_of_.resize(C_);
    prev_device_.resize(C_);
    next_device_.resize(C_);
    for (int c = 0; c < C_; ++c) {
      prev_of_[c] = s_.prev_chunk(c);
      next_of_[c] = s_.next_chunk(c);
      prev_device_[c] = prev_of_[c] >= 0 ? dev(prev_of_[c]) : -1;
      next_device_[c] = next_of_[c] >= 0 ? dev(next_of_[c]) : -1;
    }
    return dry_run();
  }

 private:
  // Chunk-major: a device walks its few chunks over rising microbatches, so its next slots share
  // cache lines (measured faster than microbatch-major at large sizes).
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
    // The position index is filled in the same pass (index_actions() reports a duplicate after
    // every shape check passed, as if it ran as a pass of its own).
    std::array<int, kNumSlotKinds> none;
    none.fill(kNone);
    pos_.assign(static_cast<size_t>(C_) * M_, none);
    // Locals, so the stores into the table need not reload them.
    std::array<int, kNumSlotKinds>* const pos = pos_.data();
    const int* const device = s_.chunk_device.data();
    const auto C = static_cast<unsigned>(C_), M = static_cast<unsigned>(M_);
    bool chunk_actions = false;
    for (int d = 0; d < s_.num_devices; ++d) {
      const Action* const list = s_.actions[d].data();
      const int n = static_cast<int>(s_.actions[d].size());
      for (int k = 0; k < n; ++k) {
        const Action& a = list[k];
        if (a.kind == ActionKind::OVERLAP_F_B) {
          if (k + 2 >= n || !is_compute(list[k + 1].kind) || !is_compute(list[k + 2].kind))
            fail_at(fmt::format("device {} position {}: OVERLAP_F_B must be followed by the two "
                                "compute actions it pairs",
                                d, k),
                    {d, k});
          check_pair(list[k + 1], list[k + 2], d, k);
          continue;
        }
        if (static_cast<unsigned>(a.chunk) >= C)
          fail_at(fmt::format("device {} position {}: {} names chunk {}, outside [0, {})", d, k,
                              to_string(a), a.chunk, C_),
                  {d, k});
        if (is_chunk_action(a.kind)) {
          chunk_actions = true;
          if (device[a.chunk] != d)
            fail_at(fmt::format("device {} position {}: {} belongs to device {}, which holds "
                                "chunk {}",
                                d, k, to_string(a), dev(a.chunk), a.chunk),
                    {d, k});
          continue;
        }
        if (static_cast<unsigned>(a.microbatch) >= M)
          fail_at(fmt::format("device {} position {}: {} names microbatch {}, outside [0, {})", d,
                              k, to_string(a), a.microbatch, M_),
                  {d, k});
        if (device[a.chunk] != d)
          fail_at(
              fmt::format("device {} position {}: {} belongs to device {}, which holds chunk {}", d,
                          k, to_string(a), dev(a.chunk), a.chunk),
              {d, k});
        int& slot = pos[static_cast<size_t>(a.chunk) * M + a.microbatch][static_cast<int>(a.kind)];
        if (slot == kNone) {
          slot = k;
        } else if (!duplicate_) {
          duplicate_ = Duplicate{d, slot, k};
        }
      }
    }
    has_chunk_actions_ = chunk_actions;
  }

  // Position of every action in its device's list (filled by check_shape); duplicates are
  // errors, the first one in list order reported.
  void index_actions() const {
    if (!duplicate_) return;
    const auto [d, first, k] = *duplicate_;
    fail_at(fmt::format("device {}: {} appears twice (positions {} and {})", d,
                        to_string(s_.actions[d][k]), first, k),
            {d, k});
  }

  int pos(ActionKind k, int c, int m) const { return pos_[at(c, m)][static_cast<int>(k)]; }
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

  // An overlapped pair runs both of its actions at once, so neither may consume the other.
  void check_pair(const Action& x, const Action& y, int d, int k) const {
    auto consumes = [&](const Action& b, const Action& a) {
      if (a.microbatch != b.microbatch) return false;
      switch (b.kind) {
        case ActionKind::F:
          return a.kind == ActionKind::F && a.chunk == s_.prev_chunk(b.chunk);
        case ActionKind::B:
        case ActionKind::I:
          return (a.kind == ActionKind::F && a.chunk == b.chunk) ||
                 (is_backward(a.kind) && a.chunk == s_.next_chunk(b.chunk));
        case ActionKind::W:
          return a.kind == ActionKind::I && a.chunk == b.chunk;
        default:
          return false;
      }
    };
    if (consumes(y, x) || consumes(x, y))
      fail_at(fmt::format("device {} position {}: ({};{})OVERLAP_F_B pairs an action with one it "
                          "depends on, but a pair runs both at once; run them one after the other",
                          d, k, to_string(x), to_string(y)),
              {d, k});
  }

  // 2b. Chunk actions, by PyTorch's runtime rules. A chunk that has any UNSHARD or RESHARD on its
  // device is FSDP-sharded: it starts sharded, UNSHARD needs it sharded, every compute on it needs
  // it unsharded, RESHARD needs it unsharded and computed on since (the all-gather is waited for
  // at the first compute), and no UNSHARD goes unused. REDUCE_GRAD runs at most once per chunk,
  // after every backward that makes its weight gradients (B or W).
  void check_chunk_actions() {
    if (!has_chunk_actions_) return;
    enum State : int8_t { kSharded, kFetched, kUsed };
    std::vector<int8_t> fsdp(C_, 0), state(C_, kSharded), reduced(C_, 0);
    std::vector<int> grads_total(C_, 0), grads_seen(C_, 0), fetched_at(C_, -1);
    for (const auto& list : s_.actions)
      for (const Action& a : list) {
        if (a.kind == ActionKind::UNSHARD || a.kind == ActionKind::RESHARD) fsdp[a.chunk] = 1;
        if (a.kind == ActionKind::B || a.kind == ActionKind::W) ++grads_total[a.chunk];
      }
    for (int d = 0; d < s_.num_devices; ++d) {
      const auto& list = s_.actions[d];
      for (int k = 0; k < static_cast<int>(list.size()); ++k) {
        const Action& a = list[k];
        const int c = a.chunk;
        switch (a.kind) {
          case ActionKind::UNSHARD:
            if (state[c] != kSharded)
              fail_at(fmt::format("device {} position {}: {} but chunk {} is already unsharded "
                                  "(UNSHARD twice without a RESHARD between)",
                                  d, k, to_string(a), c),
                      {d, k});
            state[c] = kFetched;
            fetched_at[c] = k;
            break;
          case ActionKind::RESHARD:
            if (state[c] != kUsed)
              fail_at(
                  fmt::format("device {} position {}: {} but chunk {} {}", d, k, to_string(a), c,
                              state[c] == kSharded ? "is not unsharded"
                                                   : "has not computed since its UNSHARD"),
                  {d, k});
            state[c] = kSharded;
            break;
          case ActionKind::REDUCE_GRAD:
            if (reduced[c])
              fail_at(fmt::format("device {} position {}: {} appears twice", d, k, to_string(a)),
                      {d, k});
            if (grads_seen[c] != grads_total[c])
              fail_at(fmt::format("device {} position {}: {} comes before the last backward of "
                                  "chunk {} ({} of its {} B/W actions done); move it after them",
                                  d, k, to_string(a), c, grads_seen[c], grads_total[c]),
                      {d, k});
            reduced[c] = 1;
            break;
          case ActionKind::F:
          case ActionKind::B:
          case ActionKind::I:
          case ActionKind::W:
            if (a.kind == ActionKind::B || a.kind == ActionKind::W) ++grads_seen[c];
            if (!fsdp[c]) break;
            if (state[c] == kSharded)
              fail_at(fmt::format("device {} position {}: {} computes on chunk {} while it is "
                                  "sharded; put {}UNSHARD before it",
                                  d, k, to_string(a), c, c),
                      {d, k});
            state[c] = kUsed;
            break;
          default:
            break;
        }
      }
    }
    for (int c = 0; c < C_; ++c)
      if (state[c] == kFetched)
        fail_at(fmt::format("{}UNSHARD on device {} is never used: no compute of chunk {} follows "
                            "it",
                            c, dev(c), c),
                {dev(c), fetched_at[c]});
  }

  // 3. Lowered schedules: every cross-device hand-off has its SEND after the producer and its RECV
  // before the consumer; local hand-offs have none.
  // check_comm()'s failure for the SEND/RECV `kind` of (c, m) at position p (or kNone).
  [[noreturn]] void report_comm(ActionKind kind, int c, int m, bool needed, int after, int before,
                                const char* what, int p) const {
    const Action a{kind, c, m};
    if (!needed) fail_at(fmt::format("{} is not needed: {}", to_string(a), what), {dev(c), p});
    if (p == kNone) fail(fmt::format("{} is missing on device {}: {}", to_string(a), dev(c), what));
    if (after != kNone && p < after)
      fail_at(fmt::format("{} comes before the compute that produces its tensor ({})", to_string(a),
                          to_string(s_.actions[dev(c)][after])),
              {dev(c), p});
    fail_at(fmt::format("{} comes after the compute that consumes its tensor ({})", to_string(a),
                        to_string(s_.actions[dev(c)][before])),
            {dev(c), p});
  }

  void check_comm() {
    auto expect = [&](ActionKind kind, int c, int m, bool needed, int after, int before,
                      const char* what) {
      const int p = pos(kind, c, m);
      // The common case in line: present where it belongs, or absent and not needed.
      if (needed ? p != kNone && (after == kNone || p >= after) && (before == kNone || p <= before)
                 : p == kNone)
        return;
      report_comm(kind, c, m, needed, after, before, what, p);
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

  // 4. Dry run. Semantically one action per device per step, an action running at the first step
  // its device is free and everything it needs happened at an earlier step. Computed as a
  // worklist (each device runs until it blocks on an event; the event wakes it), which gives the
  // same steps in time linear in the number of actions.
  DryRun dry_run() {
    // The position arrays become the step arrays (only B's is still needed, by backward_of).
    full_backward_.resize(pos_.size());
    for (size_t i = 0; i < pos_.size(); ++i)
      full_backward_[i] = pos_[i][static_cast<int>(ActionKind::B)] != kNone;
    pos_ = {};
    // Fast pass (one byte of state per action) unless steps are asked for; on a deadlock, run
    // again with steps, recording each action's, for the grid.
    if (run_workers(opt_.count_steps ? kSteps : kFast) ||
        (!opt_.count_steps && run_workers(kRecord))) {
      DryRun out;
      out.steps = opt_.count_steps ? steps_ : -1;
      return out;
    }
    std::vector<int> stuck;
    for (int d = 0; d < s_.num_devices; ++d)
      if (next_[d] < static_cast<int>(s_.actions[d].size())) stuck.push_back(d);
    std::string why;
    for (int d : stuck) {
      if (!why.empty()) why += "; ";
      why +=
          fmt::format("device {} waits at {} for {}", d, to_string(head(d)), waits_for(head(d), d));
      if (why.size() > 600) {
        why += "; ...";
        break;
      }
    }
    throw Failure{fmt::format("deadlock under {} semantics after {} steps: {}",
                              semantics_name(opt_.semantics), steps_, why),
                  detail::step_grid(s_, step_of_, next_, opt_.grid_rows, stuck.front())};
  }

  // Runs every device as far as it goes; true when all finished.
  enum Mode { kFast, kSteps, kRecord };
  bool run_workers(Mode mode) {
    const int P = s_.num_devices;
    const size_t n = static_cast<size_t>(C_) * M_;
    fast_ = mode == kFast;
    if (fast_) {
      std::array<int8_t, kNumSlotKinds> not_yet;
      not_yet.fill(kNotYet);
      state_.assign(n, not_yet);
    } else {
      state_ = {};
      std::array<int, kNumSlotKinds> never;
      never.fill(kNever);
      done_.assign(n, never);
    }
    next_.assign(P, 0);
    free_.assign(P, 0);
    steps_ = 0;
    record_ = mode == kRecord;
    if (record_) {
      step_of_.resize(P);
      for (int d = 0; d < P; ++d) step_of_[d].assign(s_.actions[d].size(), -1);
    }
    work_.clear();
    for (int d = P - 1; d >= 0; --d) work_.push_back(d);
    while (!work_.empty()) {
      const int d = work_.back();
      work_.pop_back();
      advance(d);
    }
    for (int d = 0; d < P; ++d)
      if (next_[d] < static_cast<int>(s_.actions[d].size())) return false;
    return true;
  }

  const Action& head(int d) const { return s_.actions[d][next_[d]]; }
  bool at_head(int d, const Action& a) const {
    return next_[d] < static_cast<int>(s_.actions[d].size()) && head(d) == a;
  }
  size_t key(const Action& a) const { return at(a.chunk, a.microbatch); }
  // Step at which `a` ran, or kNever (a negative value -1-d means device d waits for it).
  int stamp(const Action& a) const {
    const int v = done_[key(a)][static_cast<int>(a.kind)];
    return v < 0 ? kNever : v;
  }

  // The backward (B or I) that produces chunk c's input gradient for microbatch m.
  Action backward_of(int c, int m) const {
    return full_backward_[at(c, m)] ? Action{ActionKind::B, c, m} : Action{ActionKind::I, c, m};
  }

  // The actions `a` on device d needs to have happened (at most two).
  int needs(const Action& a, int d, Action* out) const {
    const int c = a.chunk, m = a.microbatch;
    const bool rendezvous = opt_.semantics == CommSemantics::kRendezvous;
    int n = 0;
    switch (a.kind) {
      case ActionKind::F: {
        const int p = s_.prev_chunk(c);
        if (p < 0) break;
        if (dev(p) == d || !lowered_) {
          out[n++] = {ActionKind::F, p, m};
        } else {
          out[n++] = {ActionKind::RECV_F, c, m};
          out[n++] = {ActionKind::SEND_F, p, m};
        }
        break;
      }
      case ActionKind::B:
      case ActionKind::I: {
        out[n++] = {ActionKind::F, c, m};
        const int nx = s_.next_chunk(c);
        if (nx < 0) break;
        if (dev(nx) == d || !lowered_) {
          out[n++] = backward_of(nx, m);
        } else {
          out[n++] = {ActionKind::RECV_B, c, m};
          out[n++] = {ActionKind::SEND_B, nx, m};
        }
        break;
      }
      case ActionKind::W:
        out[n++] = {ActionKind::I, c, m};
        break;
      case ActionKind::SEND_F:
        out[n++] = {ActionKind::F, c, m};
        if (rendezvous) out[n++] = {ActionKind::RECV_F, s_.next_chunk(c), m};
        break;
      case ActionKind::SEND_B:
        out[n++] = backward_of(c, m);
        if (rendezvous) out[n++] = {ActionKind::RECV_B, s_.prev_chunk(c), m};
        break;
      default:  // RECV_F, RECV_B, chunk actions, markers: need nothing
        break;
    }
    return n;
  }

  // The device that can be blocked waiting for `a` once the shape checks passed: the one that
  // consumes what `a` makes (for a RECV, the device whose blocking SEND waits for it). Same-device
  // waits cannot happen then (each action follows what it needs on its own device).
  int consumer(const Action& a) const {
    const int c = a.chunk;
    switch (a.kind) {
      case ActionKind::F:
      case ActionKind::SEND_F:
      case ActionKind::RECV_B:
        return next_device_[c];
      default:  // B, I, SEND_B, RECV_F
        return prev_device_[c];
    }
  }

  // The action that must run in the same step as `a` under synchronous semantics, if any.
  std::optional<Action> partner(const Action& a) const {
    if (opt_.semantics != CommSemantics::kSynchronous) return std::nullopt;
    const int c = a.chunk, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::SEND_F:
        return Action{ActionKind::RECV_F, s_.next_chunk(c), m};
      case ActionKind::SEND_B:
        return Action{ActionKind::RECV_B, s_.prev_chunk(c), m};
      case ActionKind::RECV_F:
        return Action{ActionKind::SEND_F, s_.prev_chunk(c), m};
      case ActionKind::RECV_B:
        return Action{ActionKind::SEND_B, s_.next_chunk(c), m};
      default:
        return std::nullopt;
    }
  }

  // Earliest step device d could run `a`, its next action, or -1 when something it needs has not
  // happened (then, if asked, d is registered to be woken when it does).
  int earliest(const Action& a, int d, bool wait) {
    Action dep[4];
    const int n = needs(a, d, dep);
    if (fast_) {
      for (int i = 0; i < n; ++i) {
        int8_t& st = state_[key(dep[i])][static_cast<int>(dep[i].kind)];
        if (st != kHappened) {
          if (wait) st = kWaited;
          return -1;
        }
      }
      return 0;
    }
    int t = free_[d];
    for (int i = 0; i < n; ++i) {
      const int st = stamp(dep[i]);
      if (st == kNever) {
        if (wait) done_[key(dep[i])][static_cast<int>(dep[i].kind)] = -1 - d;
        return -1;
      }
      t = std::max(t, st + 1);
    }
    return t;
  }

  void run_head(int d, int t) {
    const Action& a = head(d);
    if (!has_slot(a.kind)) {  // a chunk action or a pair marker: a step of its own, no state
      if (!fast_) {
        if (record_) step_of_[d][next_[d]] = t;
        free_[d] = t + 1;
        steps_ = std::max(steps_, t + 1);
      }
      ++next_[d];
      return;
    }
    if (fast_) {
      int8_t& st = state_[key(a)][static_cast<int>(a.kind)];
      if (st == kWaited) work_.push_back(consumer(a));
      st = kHappened;
      ++next_[d];
      return;
    }
    int& slot = done_[key(a)][static_cast<int>(a.kind)];
    if (slot < 0) work_.push_back(-1 - slot);  // wake the device waiting for it
    slot = t;
    if (record_) step_of_[d][next_[d]] = t;
    ++next_[d];
    free_[d] = t + 1;
    steps_ = std::max(steps_, t + 1);
  }

  // The fast pass without synchronous pairs, for device d: earliest() and run_head() in line,
  // up to its next pair marker (this loop is most of the validator's time at large sizes). False
  // when d blocked. Its list, position and tables are locals: GCC lets a byte-sized store alias
  // any memory, so through members every state update would reload them all.
  bool advance_fast(int d) {
    const Action* list = s_.actions[d].data();
    const int n = static_cast<int>(s_.actions[d].size());
    std::array<int8_t, kNumSlotKinds>* const state = state_.data();
    const int* const device = s_.chunk_device.data();
    const int* const prev = prev_of_.data();
    const int* const next = next_of_.data();
    const char* const full = full_backward_.data();
    const size_t M = static_cast<size_t>(M_);
    const bool lowered = lowered_;
    const bool rendezvous = opt_.semantics == CommSemantics::kRendezvous;
    auto st = [&](ActionKind kind, int c, int m) -> int8_t& {
      return state[static_cast<size_t>(c) * M + m][static_cast<int>(kind)];
    };
    // The backward (B or I) that produces chunk c's input gradient for microbatch m.
    auto backward = [&](int c, int m) -> int8_t& {
      const size_t i = static_cast<size_t>(c) * M + m;
      return state[i][static_cast<int>(full[i] ? ActionKind::B : ActionKind::I)];
    };
    int k = next_[d];
    for (; k < n; ++k) {
      const Action a = list[k];
      const int c = a.chunk, m = a.microbatch;
      // What `a` needs, in needs()'s order (the first one missing is the one waited for).
      int8_t* dep[3];
      int nd = 0;
      switch (a.kind) {
        case ActionKind::F: {
          const int p = prev[c];
          if (p < 0) break;
          if (device[p] == d || !lowered) {
            dep[nd++] = &st(ActionKind::F, p, m);
          } else {
            dep[nd++] = &st(ActionKind::RECV_F, c, m);
            dep[nd++] = &st(ActionKind::SEND_F, p, m);
          }
          break;
        }
        case ActionKind::B:
        case ActionKind::I: {
          dep[nd++] = &st(ActionKind::F, c, m);
          const int nx = next[c];
          if (nx < 0) break;
          if (device[nx] == d || !lowered) {
            dep[nd++] = &backward(nx, m);
          } else {
            dep[nd++] = &st(ActionKind::RECV_B, c, m);
            dep[nd++] = &st(ActionKind::SEND_B, nx, m);
          }
          break;
        }
        case ActionKind::W:
          dep[nd++] = &st(ActionKind::I, c, m);
          break;
        case ActionKind::SEND_F:
          dep[nd++] = &st(ActionKind::F, c, m);
          if (rendezvous) dep[nd++] = &st(ActionKind::RECV_F, next[c], m);
          break;
        case ActionKind::SEND_B:
          dep[nd++] = &backward(c, m);
          if (rendezvous) dep[nd++] = &st(ActionKind::RECV_B, prev[c], m);
          break;
        case ActionKind::OVERLAP_F_B:
          next_[d] = k;
          return true;
        default:  // RECV_F, RECV_B, chunk actions: need nothing
          break;
      }
      for (int i = 0; i < nd; ++i) {
        if (*dep[i] != kHappened) {
          *dep[i] = kWaited;
          next_[d] = k;
          return false;
        }
      }
      if (has_slot(a.kind)) {
        int8_t& self = st(a.kind, c, m);
        if (self == kWaited) work_.push_back(consumer(a));
        self = kHappened;
      }
    }
    next_[d] = k;
    return true;
  }

  void advance(int d) {
    const int n = static_cast<int>(s_.actions[d].size());
    const bool fast_single = fast_ && opt_.semantics != CommSemantics::kSynchronous;
    while (next_[d] < n) {
      if (fast_single && (!advance_fast(d) || next_[d] >= n)) return;
      const Action a = head(d);
      if (a.kind == ActionKind::OVERLAP_F_B) {
        // A pair runs at once: both ready, then the marker and both actions in one step.
        const auto& list = s_.actions[d];
        const int tx = earliest(list[next_[d] + 1], d, true);
        if (tx < 0) return;
        const int ty = earliest(list[next_[d] + 2], d, true);
        if (ty < 0) return;
        const int t = std::max({tx, ty, fast_ ? 0 : free_[d]});
        for (int i = 0; i < 3; ++i) run_head(d, t);
        continue;
      }
      const int t = earliest(a, d, true);
      if (t < 0) return;
      if (auto other = partner(a)) {
        // Both ends of a synchronous transfer run in one step, once both are at their device's
        // head and ready; whichever arrives second runs the pair.
        const int peer = dev(other->chunk);
        if (!at_head(peer, *other)) return;
        const int tp = earliest(*other, peer, false);
        if (tp < 0) return;
        const int both = std::max(t, tp);
        run_head(peer, both);
        run_head(d, both);
        work_.push_back(peer);
        continue;
      }
      run_head(d, t);
    }
  }

  // After a stepped dry run: whether everything `a` needs has happened.
  bool ready_now(const Action& a, int d) const {
    Action dep[4];
    const int n = needs(a, d, dep);
    for (int i = 0; i < n; ++i)
      if (stamp(dep[i]) == kNever) return false;
    return true;
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
      case ActionKind::OVERLAP_F_B: {
        const auto& list = s_.actions[d];
        const Action& x = list[next_[d] + 1];
        const Action& y = list[next_[d] + 2];
        const Action& waiting = ready_now(x, d) ? y : x;
        return fmt::format("{} of its pair ({};{}): {}", to_string(waiting), to_string(x),
                           to_string(y), waits_for(waiting, d));
      }
      default:  // chunk actions never wait
        return "nothing";
    }
    return "?";
  }

  const Schedule& s_;
  ValidateOptions opt_;
  int C_ = 0, M_ = 0;
  bool lowered_ = false;
  bool has_chunk_actions_ = false;
  struct Duplicate {
    int device, first, second;  // positions in the device's list
  };
  std::optional<Duplicate> duplicate_;  // the first action found twice (check_shape)  // any
                                        // UNSHARD, RESHARD or REDUCE_GRAD (found by check_shape)
  // Per (chunk, microbatch), by ActionKind (one cache line for all kinds of a slot):
  std::vector<std::array<int, kNumSlotKinds>> pos_;  // position in its device's list, or kNone
  std::vector<std::array<int, kNumSlotKinds>>
      done_;                                    // dry-run step it ran at, kNever, or -1-d (d waits)
  std::vector<char> full_backward_;             // a B (not I/W) runs for this slot
  std::vector<int> prev_of_, next_of_;          // per chunk: Schedule::prev_chunk, next_chunk
  std::vector<int> prev_device_, next_device_;  // per chunk: their devices (-1: none)
  // Fast pass: one byte per slot and kind instead of a step.
  static constexpr int8_t kNotYet = 0, kWaited = 1, kHappened = 2;
  std::vector<std::array<int8_t, kNumSlotKinds>> state_;
  bool fast_ = false;
  int steps_ = 0;
  bool record_ = false;
  std::vector<int> next_;  // per device: index of its next action
  std::vector<int> free_;  // per device: first step at which it can run that action
  std::vector<std::vector<int>> step_of_;
  std::vector<int> work_;
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
