#include "forecast/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "core/check.h"
#include "core/error.h"

namespace bw::forecast {

double TimeBreakdown::total_ms() const {
  return useful_ms + redundant_ms + lost_ms + checkpoint_ms + reconfigure_ms + restart_ms +
         rebalance_ms + stalled_ms;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Where a run stands `x` ms after it started: cycles of k steps then one checkpoint.
struct RunPosition {
  double steps = 0;                  // completed steps
  double covered_steps = 0;          // steps covered by a completed checkpoint of this run
  bool any_checkpoint = false;       // a checkpoint of this run has completed
  double step_elapsed_ms = 0;        // elapsed part of the in-flight step
  double checkpoint_elapsed_ms = 0;  // elapsed part of an in-flight checkpoint
  double checkpoint_done_ms = 0;     // time in completed checkpoints
};

// Step and checkpoint boundaries are computed by division; snap values within a relative 1e-9 of
// a boundary onto it so a change scheduled for a boundary lands exactly there.
double snap_floor(double v) { return std::floor(v + 1e-9); }

RunPosition locate_cycles(double T, int k, double C, double x) {
  RunPosition pos;
  if (k > 0) {
    const double cycle = k * T + C;
    const double c = snap_floor(x / cycle);
    const double r = std::max(0.0, x - c * cycle);
    pos.covered_steps = c * k;
    pos.any_checkpoint = c >= 1;
    pos.checkpoint_done_ms = c * C;
    const double s = snap_floor(r / T);
    if (s < k) {
      pos.steps = c * k + s;
      pos.step_elapsed_ms = std::max(0.0, r - s * T);
    } else {
      pos.steps = c * k + k;
      pos.checkpoint_elapsed_ms = std::max(0.0, r - k * T);
    }
  } else {
    pos.steps = snap_floor(x / T);
    pos.step_elapsed_ms = std::max(0.0, x - pos.steps * T);
  }
  return pos;
}

// `lead`: the lengths (in steps) of the first checkpoint cycles of the run when they differ from
// k (a checkpoint right after a restart's first step; cycles aligned to the total step count).
RunPosition locate(const RunParams& p, const std::vector<int>& lead, double x) {
  const double T = p.step_ms;
  const double C = p.checkpoint_ms;
  RunPosition done;  // the lead cycles already completed
  for (const int s : lead) {
    const double cycle = s * T + C;
    if (snap_floor(x / cycle) < 1) {
      RunPosition pos = locate_cycles(T, s, C, x);
      pos.steps = std::min(pos.steps, static_cast<double>(s));
      pos.covered_steps = 0;
      pos.any_checkpoint = done.any_checkpoint;
      pos.checkpoint_done_ms = 0;
      pos.steps += done.steps;
      pos.covered_steps = done.covered_steps;
      pos.checkpoint_done_ms = done.checkpoint_done_ms;
      return pos;
    }
    x = std::max(0.0, x - cycle);
    done.steps += s;
    done.covered_steps += s;
    done.any_checkpoint = true;
    done.checkpoint_done_ms += C;
  }
  RunPosition pos = locate_cycles(T, p.checkpoint_every_steps, C, x);
  pos.steps += done.steps;
  pos.covered_steps += done.covered_steps;
  pos.any_checkpoint = pos.any_checkpoint || done.any_checkpoint;
  pos.checkpoint_done_ms += done.checkpoint_done_ms;
  return pos;
}

class Engine {
 public:
  Engine(Policy& policy, ThroughputModel& model, const ReplayOptions& options)
      : policy_(policy), model_(model), options_(options) {
    result_.policy = policy.kind();
  }

  ReplayResult run(const Trace& given) {
    double end = options_.duration_ms;
    if (end <= 0) end = given.events.empty() ? 0 : given.events.back().time_ms;
    // The window is the given trace's; booting moves joins within it (or past its end).
    Trace delayed;
    if (options_.join_boot_ms != 0) delayed = delay_joins(given, options_.join_boot_ms);
    const auto& ev = options_.join_boot_ms != 0 ? delayed.events : given.events;
    if (!(end > 0)) {
      throw ConfigError(
          "nothing to replay: the trace is empty or ends at time 0; give a duration (--hours)");
    }
    result_.duration_ms = end;
    // Initial membership: every event at the first timestamp.
    std::size_t i = 0;
    const double t0 = ev.empty() ? 0 : std::min(ev.front().time_ms, end);
    std::vector<std::string> initial;
    while (i < ev.size() && ev[i].time_ms == ev.front().time_ms) {
      apply_membership(ev[i]);
      if (ev[i].kind == EventKind::kAdd) {
        initial.push_back(ev[i].node);
      } else {
        std::erase(initial, ev[i].node);
      }
      ++i;
    }
    policy_.on_start(initial);
    if (t0 > 0) {
      result_.time.stalled_ms += t0;
      segment(0, t0, 0.0);
    }
    if (options_.startup_ms > 0) {
      // Cold start: the instances boot, then the system starts up on them.
      Reaction r = nodes() > 0 ? policy_.on_cold_start(nodes()) : Reaction{};
      if (r.no_op) r.downtime_ms = 0;
      start_recovery(t0, 0.0, r, options_.startup_ms);
    } else {
      resume(t0);
    }
    while (true) {
      const double te = i < ev.size() ? ev[i].time_ms : kInf;
      const double ti = internal_time();
      const double t = std::min(te, ti);
      if (t >= end) break;
      if (ti <= te) {
        on_internal(ti);
      } else {
        // Simultaneous events are one change (a burst is detected and handled together).
        std::size_t j = i;
        while (j < ev.size() && ev[j].time_ms == te) ++j;
        on_events(ev, i, j);
        i = j;
      }
    }
    finish(end);
    BW_CHECK(std::abs(result_.time.total_ms() - end) <= 1e-6 * std::max(1.0, end),
             "time accounting {} ms != duration {} ms", result_.time.total_ms(), end);
    return std::move(result_);
  }

 private:
  enum class Mode { kRunning, kRecovering, kStalled };

  struct Carry {  // committed steps not covered by any checkpoint yet
    double useful_ms = 0, redundant_ms = 0, samples = 0, steps = 0;
  };

  void apply_membership(const TraceEvent& e) {
    if (e.kind == EventKind::kAdd) {
      if (!live_.insert(e.node).second) {
        throw ConfigError(
            fmt::format("trace adds {} at {:.0f} ms but it is already live", e.node, e.time_ms));
      }
    } else if (live_.erase(e.node) == 0) {
      throw ConfigError(
          fmt::format("trace removes {} at {:.0f} ms but it is not live", e.node, e.time_ms));
    }
  }
  int nodes() const { return static_cast<int>(live_.size()); }

  double internal_time() const {
    if (mode_ == Mode::kRunning) return std::min(pending_ ? pending_time_ : kInf, through_end_);
    if (mode_ == Mode::kRecovering) return rec_end_;
    return kInf;
  }

  // `n`: nodes during the span (-1: the current membership).
  void segment(double a, double b, double rate, int n = -1) {
    if (!options_.record_timeline || b <= a) return;
    if (n < 0) n = nodes();
    auto& tl = result_.timeline;
    if (!tl.empty() && tl.back().end_ms == a && tl.back().samples_per_s == rate &&
        tl.back().nodes == n) {
      tl.back().end_ms = b;
      return;
    }
    tl.push_back({a, b, rate, n});
  }

  // Tries to start training at t on the current membership. `checkpointed`: the run that
  // trained through the restart already took the checkpoint that follows a failure.
  void resume(double t, bool checkpointed = false) {
    policy_.on_resumed(nodes());
    auto p = nodes() > 0 ? policy_.run_params(nodes()) : std::nullopt;
    if (p) {
      BW_CHECK(p->step_ms > 0, "policy returned step time {} ms", p->step_ms);
      if (checkpointed) p->checkpoint_after_first_step = false;
      mode_ = Mode::kRunning;
      run_ = *p;
      run_nodes_ = nodes();
      set_lead(run_.checkpoint_after_first_step);
    } else {
      mode_ = Mode::kStalled;
    }
    mode_start_ = t;
    pre_start_ = t;
  }

  // The first checkpoint cycles of a run starting now (see locate).
  void set_lead(bool checkpoint_after_first_step) {
    lead_.clear();
    const int k = run_.checkpoint_every_steps;
    if (k <= 0) return;
    auto g = static_cast<long long>(std::llround(std::floor(steps_all_ + 1e-9)));
    if (checkpoint_after_first_step) {
      lead_.push_back(1);
      ++g;
    }
    if (run_.align_checkpoints && g % k != 0) lead_.push_back(static_cast<int>(k - g % k));
  }

  void keep_steps(double steps) {
    const double T = run_.step_ms;
    const double useful = steps * T * run_.useful_share;
    const double redundant = steps * T - useful;
    const double samples = steps * model_.samples_per_step();
    result_.time.useful_ms += useful;
    result_.time.redundant_ms += redundant;
    result_.samples += samples;
    result_.steps += steps;
    steps_all_ += steps;
    carry_.useful_ms += useful;
    carry_.redundant_ms += redundant;
    carry_.samples += samples;
    carry_.steps += steps;
  }

  // Ends the running span at t with `rollback`; returns the elapsed part of the in-flight step.
  double end_run(double t, Rollback rollback) {
    if (pre_start_ < mode_start_) {  // the rest of a failed checkpoint (train_through)
      result_.time.checkpoint_ms += std::min(t, mode_start_) - pre_start_;
      segment(pre_start_, std::min(t, mode_start_), 0.0, run_nodes_);
      if (t <= mode_start_) {
        if (rollback == Rollback::kCheckpoint) roll_back_carry();
        return -1.0;
      }
    }
    const auto pos = locate(run_, lead_, t - mode_start_);
    const double T = run_.step_ms;
    segment(mode_start_, t, model_.samples_per_step() / T * 1e3, run_nodes_);
    result_.time.checkpoint_ms += pos.checkpoint_done_ms + pos.checkpoint_elapsed_ms;
    // A checkpoint completed in this span covers everything before it, earlier spans included.
    if (pos.any_checkpoint) carry_ = {};
    keep_steps(pos.covered_steps);
    if (pos.any_checkpoint) carry_ = {};
    keep_steps(pos.steps - pos.covered_steps);
    if (rollback == Rollback::kCheckpoint) {
      if (t < shadow_end_) {  // the abandoned run's last checkpoint fails too
        carry_.useful_ms += shadow_.useful_ms;
        carry_.redundant_ms += shadow_.redundant_ms;
        carry_.samples += shadow_.samples;
        carry_.steps += shadow_.steps;
      }
      shadow_ = {};
      shadow_end_ = -kInf;
      roll_back_carry();
    }
    BW_CHECK(rollback != Rollback::kNone || pos.step_elapsed_ms < 1e-6 * T,
             "a change without rollback must land on a step boundary ({} ms into a step)",
             pos.step_elapsed_ms);
    result_.time.lost_ms += pos.step_elapsed_ms;
    return pos.checkpoint_elapsed_ms > 0 ? -1.0 : pos.step_elapsed_ms;
  }

  // Back to the last completed checkpoint: every step it does not cover is lost.
  void roll_back_carry() {
    result_.time.useful_ms -= carry_.useful_ms;
    result_.time.redundant_ms -= carry_.redundant_ms;
    result_.samples -= carry_.samples;
    result_.steps -= carry_.steps;
    result_.time.lost_ms += carry_.useful_ms + carry_.redundant_ms;
    carry_ = {};
  }

  // A failure while training through a restart (Reaction::train_through): the steps since the
  // last completed checkpoint are lost, the step in flight goes on (a checkpoint in flight has
  // failed but still runs to its end), and the first step completed from now on is
  // checkpointed. The run is split at the start of the step in flight, or after the checkpoint.
  void split_run_through(double t) {
    if (t >= shadow_end_) {  // the abandoned run's last checkpoint completed before this failure
      shadow_ = {};
      shadow_end_ = -kInf;
    }
    double start = t;
    if (t > mode_start_) {
      const auto pos = locate(run_, lead_, t - mode_start_);
      if (pos.checkpoint_elapsed_ms > 0) {
        start = t + (run_.checkpoint_ms - pos.checkpoint_elapsed_ms);
      } else {
        t -= pos.step_elapsed_ms;
        start = t;
      }
    } else {
      start = mode_start_;  // still in the rest of a failed checkpoint
    }
    end_run(t, Rollback::kCheckpoint);
    pre_start_ = t;
    mode_start_ = start;
    set_lead(true);
  }

  // The end of the restart a run trained through: the run is abandoned and training resumes
  // on the new membership. A checkpoint in flight is written to its end beside the new run:
  // the steps it covers are lost only if a failure comes before that end.
  void end_run_through(double t) {
    bool stepped = false;
    double checkpoint_left_ms = 0;
    if (t > mode_start_) {
      const auto pos = locate(run_, lead_, t - mode_start_);
      stepped = pos.steps >= 1;
      if (pos.checkpoint_elapsed_ms > 0) {
        checkpoint_left_ms = run_.checkpoint_ms - pos.checkpoint_elapsed_ms;
      }
    }
    end_run(t, Rollback::kStep);
    if (checkpoint_left_ms > 0) {
      shadow_ = carry_;
      shadow_end_ = t + checkpoint_left_ms;
      carry_ = {};
    }
    through_end_ = kInf;
    resume(t, stepped);
  }

  // The next step (or checkpoint) boundary at or after t while running.
  double next_boundary(double t) const {
    if (t < mode_start_) return mode_start_;
    const auto pos = locate(run_, lead_, t - mode_start_);
    if (pos.checkpoint_elapsed_ms > 0) return t + (run_.checkpoint_ms - pos.checkpoint_elapsed_ms);
    if (pos.step_elapsed_ms == 0) return t;
    return t + (run_.step_ms - pos.step_elapsed_ms);
  }

  void count(const Reaction& r) {
    switch (r.cause) {
      case Cause::kReconfigure:
        ++result_.reconfigurations;
        break;
      case Cause::kRestart:
        ++result_.restarts;
        break;
      case Cause::kRebalance:
        ++result_.rebalances;
        break;
    }
  }

  void start_recovery(double t, double tail_ms, const Reaction& r, double boot_ms = 0) {
    mode_ = Mode::kRecovering;
    mode_start_ = t;
    boot_end_ = t + boot_ms;
    tail_end_ = boot_end_ + tail_ms;
    ckpt_end_ = tail_end_ + r.checkpoint_ms;
    rec_end_ = ckpt_end_ + r.downtime_ms;
    cause_ = r.cause;
    ckpt_resets_carry_ = r.checkpoint_ms > 0;
  }

  // Accounts the recovery's phases over [mode_start_, t).
  void account_recovery(double t) {
    auto clip = [&](double a, double b) {
      return std::max(0.0, std::min(b, t) - std::max(a, mode_start_));
    };
    result_.time.stalled_ms += clip(mode_start_, boot_end_);
    result_.time.lost_ms += clip(boot_end_, tail_end_);
    result_.time.checkpoint_ms += clip(tail_end_, ckpt_end_);
    const double down = clip(ckpt_end_, rec_end_);
    switch (cause_) {
      case Cause::kReconfigure:
        result_.time.reconfigure_ms += down;
        break;
      case Cause::kRestart:
        result_.time.restart_ms += down;
        break;
      case Cause::kRebalance:
        result_.time.rebalance_ms += down;
        break;
    }
    if (ckpt_resets_carry_ && t >= ckpt_end_) carry_ = {};
    segment(mode_start_, t, 0.0);
  }

  void on_internal(double t) {
    if (mode_ == Mode::kRunning && through_end_ <= t) {
      end_run_through(t);
      return;
    }
    if (mode_ == Mode::kRunning) {
      BW_CHECK(pending_, "internal event while running without a pending change");
      const Reaction r = *pending_;
      pending_.reset();
      end_run(t, Rollback::kNone);
      start_recovery(t, 0.0, r);
      return;
    }
    BW_CHECK(mode_ == Mode::kRecovering, "internal event in mode {}", static_cast<int>(mode_));
    account_recovery(t);
    resume(t);
  }

  // The strongest of two reactions to changes handled together.
  static Reaction merge(const Reaction& a, const Reaction& b) {
    if (a.no_op) return b;
    if (b.no_op) return a;
    Reaction m = a;
    m.downtime_ms = std::max(a.downtime_ms, b.downtime_ms);
    m.checkpoint_ms = std::max(a.checkpoint_ms, b.checkpoint_ms);
    if (a.cause == Cause::kRestart || b.cause == Cause::kRestart) {
      m.cause = Cause::kRestart;
    } else if (b.downtime_ms > a.downtime_ms) {
      m.cause = b.cause;
    }
    m.rollback = std::max(a.rollback, b.rollback);  // kNone < kStep < kCheckpoint
    m.at_step_boundary = a.at_step_boundary && b.at_step_boundary;
    m.train_through = (a.train_through || b.train_through) && m.rollback != Rollback::kNone;
    m.rendezvous = a.rendezvous || b.rendezvous;
    return m;
  }

  void on_events(const std::vector<TraceEvent>& ev, std::size_t from, std::size_t to) {
    const double t = ev[from].time_ms;
    std::optional<Reaction> r;
    for (std::size_t k = from; k < to; ++k) {
      const auto& e = ev[k];
      const int before = nodes();
      apply_membership(e);
      if (e.kind == EventKind::kAdd) {
        ++result_.joins;
        result_.join_times_ms.push_back(t);
      } else {
        ++result_.failures;
        result_.failure_times_ms.push_back(t);
      }
      const Reaction one =
          policy_.on_change(Change{e.kind, e.node, before, nodes(), mode_ == Mode::kRunning});
      r = r ? merge(*r, one) : one;
    }
    react(t, *r);
  }

  void react(double t, const Reaction& r) {
    if (r.no_op) return;
    const bool runnable = nodes() > 0 && policy_.run_params(nodes()).has_value();
    switch (mode_) {
      case Mode::kRunning: {
        if (through_end_ < kInf) {
          // Training through a restart: a failure rolls back again; any change extends it,
          // except a join that joins the rendezvous (Reaction::rendezvous).
          if (r.rendezvous && r.rollback == Rollback::kNone) return;
          count(r);
          if (r.rollback == Rollback::kCheckpoint) split_run_through(t);
          through_end_ = std::max(through_end_, t + r.downtime_ms);
          return;
        }
        if (r.at_step_boundary && r.rollback == Rollback::kNone) {
          Reaction slowed = r;
          if (r.slowdown > 1) {
            // The rest of the step runs slower; the replay ends the step at its nominal boundary
            // and counts the extra time as downtime of the reaction's cause.
            slowed.downtime_ms += (next_boundary(t) - t) * (r.slowdown - 1);
          }
          if (pending_) {
            *pending_ = merge(*pending_, slowed);
          } else {
            pending_ = slowed;
            pending_time_ = next_boundary(t);
            count(r);
          }
          if (pending_time_ <= t) on_internal(t);
          return;
        }
        Reaction merged = r;
        if (pending_) {  // a join waiting for the boundary is folded into this recovery
          merged = merge(*pending_, r);
          pending_.reset();
        } else if (runnable) {
          count(merged);
        }
        if (merged.train_through) {
          if (merged.rollback == Rollback::kCheckpoint) split_run_through(t);
          through_end_ = t + merged.downtime_ms;
          return;
        }
        const double T = run_.step_ms;
        const double elapsed = end_run(t, merged.rollback);
        const double tail =
            options_.whole_step_loss && merged.rollback != Rollback::kNone && elapsed > 0
                ? T - elapsed
                : 0.0;
        merged.checkpoint_ms = 0;
        // With nothing to recover to, only the wasted tail remains before stalling.
        if (!runnable) merged.downtime_ms = 0;
        start_recovery(t, tail, merged);
        return;
      }
      case Mode::kRecovering: {
        if (r.rendezvous && r.rollback == Rollback::kNone) return;  // joins the rendezvous
        account_recovery(t);
        count(r);
        const double old_end = rec_end_;
        // The wasted tail of an interrupted step (whole-step accounting) stays lost time.
        const double tail = std::max(0.0, tail_end_ - t);
        // A restart in progress stays a restart; otherwise the latest change decides.
        const Cause cause =
            cause_ == Cause::kRestart || r.cause == Cause::kRestart ? Cause::kRestart : r.cause;
        start_recovery(t, tail, Reaction{cause, 0.0, 0.0, r.rollback, false});
        rec_end_ = std::max({old_end, rec_end_, t + r.downtime_ms});
        return;
      }
      case Mode::kStalled: {
        if (runnable || r.rendezvous) {
          result_.time.stalled_ms += t - mode_start_;
          segment(mode_start_, t, 0.0);
          count(r);
          start_recovery(t, 0.0, Reaction{r.cause, r.downtime_ms, 0.0, r.rollback, false});
        }
        return;
      }
    }
  }

  void finish(double end) {
    switch (mode_) {
      case Mode::kRunning: {
        const double elapsed = end_run(end, Rollback::kStep);
        if (elapsed > 0) {
          // The step in flight at the end counts for its elapsed part.
          result_.time.lost_ms -= elapsed;
          keep_steps(elapsed / run_.step_ms);
        }
        break;
      }
      case Mode::kRecovering:
        account_recovery(end);
        break;
      case Mode::kStalled:
        result_.time.stalled_ms += end - mode_start_;
        segment(mode_start_, end, 0.0);
        break;
    }
  }

  Policy& policy_;
  ThroughputModel& model_;
  ReplayOptions options_;
  ReplayResult result_;
  std::unordered_set<std::string> live_;
  Mode mode_ = Mode::kStalled;
  double mode_start_ = 0;
  RunParams run_;
  int run_nodes_ = 0;
  std::optional<Reaction> pending_;
  double pending_time_ = 0;
  double tail_end_ = 0, ckpt_end_ = 0, rec_end_ = 0;
  Cause cause_ = Cause::kReconfigure;
  bool ckpt_resets_carry_ = false;
  Carry carry_;
  std::vector<int> lead_;  // first checkpoint cycles of the current run (see locate)
  double steps_all_ = 0;   // steps completed since the start, rolled-back ones included
  double boot_end_ = 0;    // end of the instances' boot in a cold start (stalled time)
  // Training through a restart (Reaction::train_through): the restart's end, and the start of
  // the rest of a failed checkpoint that the run's continuation begins with (checkpoint time
  // [pre_start_, mode_start_)).
  double through_end_ = kInf;
  double pre_start_ = 0;
  // The steps that the abandoned run's last checkpoint covers, lost if a failure comes before
  // shadow_end_, when that checkpoint completes.
  Carry shadow_;
  double shadow_end_ = -kInf;
};

}  // namespace

ReplayResult replay(const Trace& trace, Policy& policy, ThroughputModel& model,
                    const ReplayOptions& options) {
  Engine engine(policy, model, options);
  return engine.run(trace);
}

ReplayResult replay(const Trace& trace, PolicyKind kind, const PolicyCosts& costs,
                    ThroughputModel& model, const ReplayOptions& options) {
  auto policy = make_policy(kind, costs, model);
  return replay(trace, *policy, model, options);
}

}  // namespace bw::forecast
