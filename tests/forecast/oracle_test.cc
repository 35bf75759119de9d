// The replay engine against a brute-force oracle that walks one step (and one checkpoint) at a
// time, over a grid of step times, costs and random failure traces.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>

#include "forecast/replay.h"

namespace bw::forecast {
namespace {

struct Tally {
  double useful = 0, lost = 0, checkpoint = 0, down = 0, stalled = 0;
};

// Failures only, constant step time T. `k` > 0: restart semantics (checkpoint every k steps
// costing C; a failure loses the steps since the last checkpoint); k == 0: breakwater
// semantics (a failure loses the interrupted step). Failures during a recovery extend it to
// max(end, failure + R). `whole`: a failure is noticed at the end of the interrupted step.
Tally oracle(const std::vector<double>& failures, double D, double T, double R, int k, double C,
             bool whole) {
  Tally y;
  double t = 0, pending = 0;
  int in_cycle = 0;
  std::size_t fi = 0;
  while (t < D) {
    const bool ckpt = k > 0 && in_cycle == k;
    const double end = t + (ckpt ? C : T);
    const double nf = fi < failures.size() ? failures[fi] : INFINITY;
    if (end <= nf && end <= D) {
      if (ckpt) {
        y.checkpoint += C;
        y.useful += pending;
        pending = 0;
        in_cycle = 0;
      } else if (k > 0) {
        pending += T;
        ++in_cycle;
      } else {
        y.useful += T;
      }
      t = end;
      continue;
    }
    if (nf < D && nf < end) {
      double start = nf;  // when the recovery starts
      if (ckpt) {
        y.checkpoint += nf - t;
      } else if (whole && nf > t) {
        y.lost += std::min(end, D) - t;
        start = end;
      } else {
        y.lost += nf - t;
      }
      if (k > 0) {
        y.lost += pending;
        pending = 0;
        in_cycle = 0;
      }
      double rec_end = start + R;
      ++fi;
      while (fi < failures.size() && failures[fi] < rec_end) {
        rec_end = std::max(rec_end, failures[fi] + R);
        ++fi;
      }
      y.down += std::max(0.0, std::min(rec_end, D) - std::min(start, D));
      t = rec_end;
      continue;
    }
    // The window ends inside this activity.
    if (ckpt) {
      y.checkpoint += D - t;
    } else {
      y.useful += D - t;
    }
    y.useful += pending;
    break;
  }
  return y;
}

struct Case {
  double T, R, C, rate_per_hour;
  int k;
  bool whole;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "T=" << c.T << " ms, R=" << c.R << " ms, C=" << c.C << " ms every " << c.k << " steps, "
      << c.rate_per_hour << " failures/h" << (c.whole ? ", whole-step loss" : "");
}

class ReplayVsOracle : public ::testing::TestWithParam<Case> {};

TEST_P(ReplayVsOracle, SameAccounting) {
  const Case c = GetParam();
  const double D = 6 * 3600e3;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(c.rate_per_hour / 3600e3);
    std::vector<double> failures;
    // Integer milliseconds, as traces have; some land exactly on step boundaries.
    for (double t = std::round(gap(rng)); t < D; t += std::round(gap(rng)) + 1) {
      failures.push_back(t);
    }
    if (seed % 4 == 0) failures.push_back(3 * c.T);  // exactly on a step boundary
    std::sort(failures.begin(), failures.end());
    failures.erase(std::unique(failures.begin(), failures.end()), failures.end());
    std::string text;
    const int nodes = static_cast<int>(failures.size()) + 2;
    for (int n = 1; n <= nodes; ++n) text += fmt::format("0,add,node{}\n", n);
    for (std::size_t i = 0; i < failures.size(); ++i) {
      text += fmt::format("{:.0f},remove,node{}\n", failures[i], i + 1);
    }
    const auto trace = parse_trace(text, "oracle");
    PolicyCosts costs;
    costs.breakwater.fixed_reconfigure_ms = c.R;
    costs.restart.restart_ms = c.R;
    costs.restart.checkpoint_ms = c.C;
    costs.restart.checkpoint_every_steps = c.k;
    ConstantModel model(c.T, 1);
    ReplayOptions o;
    o.duration_ms = D;
    o.whole_step_loss = c.whole;
    const auto kind = c.k > 0 ? PolicyKind::kRestart : PolicyKind::kBreakwater;
    const auto r = replay(trace, kind, costs, model, o);
    const Tally want = oracle(failures, D, c.T, c.R, c.k, c.C, c.whole);
    const double down = r.time.reconfigure_ms + r.time.restart_ms;
    const double tol = 1e-6 * D;
    EXPECT_NEAR(r.time.useful_ms, want.useful, tol) << "seed " << seed;
    EXPECT_NEAR(r.time.lost_ms, want.lost, tol) << "seed " << seed;
    EXPECT_NEAR(r.time.checkpoint_ms, want.checkpoint, tol) << "seed " << seed;
    EXPECT_NEAR(down, want.down, tol) << "seed " << seed;
    EXPECT_NEAR(r.time.total_ms(), D, tol) << "seed " << seed;
    if (::testing::Test::HasFailure()) return;  // the first failing seed is enough
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, ReplayVsOracle,
    ::testing::Values(Case{1000, 2000, 0, 6, 0, false}, Case{1000, 2000, 0, 6, 0, true},
                      Case{25000, 2000, 0, 6, 0, false}, Case{25000, 2000, 0, 60, 0, true},
                      Case{700, 30000, 0, 120, 0, false}, Case{1000, 3000, 500, 6, 2, false},
                      Case{1000, 3000, 500, 6, 2, true}, Case{33000, 76000, 15800, 6, 10, false},
                      Case{33000, 76000, 15800, 6, 10, true}, Case{250, 9000, 4000, 60, 7, false},
                      Case{4000, 1000, 100, 30, 1, true}));

}  // namespace
}  // namespace bw::forecast
