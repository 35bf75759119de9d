#include "elastic/rebalance.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "core/check.h"

namespace bw::elastic {

Split fit_split(const std::vector<PipelineSpeed>& pipelines) {
  const size_t n = pipelines.size();
  Split out;
  int total = 0;
  std::vector<double> factor(n), fixed(n), per(n);
  for (size_t p = 0; p < n; ++p) {
    const auto& s = pipelines[p];
    BW_CHECK(s.microbatches >= 1, "pipeline {} has {} microbatches", p, s.microbatches);
    total += s.microbatches;
    fixed[p] = s.fixed_ms;
    per[p] = s.per_microbatch_ms;
    if (!(fixed[p] + per[p] * s.microbatches > 0)) {  // no usable estimate: proportional
      fixed[p] = 0;
      per[p] = 1;
    }
    factor[p] = std::max(s.measured_ms, 0.0) / (fixed[p] + per[p] * s.microbatches);
    out.current_ms = std::max(out.current_ms, s.measured_ms);
  }
  auto time = [&](size_t p, int m) { return factor[p] * (fixed[p] + per[p] * m); };
  // One microbatch each, then each further one to the pipeline that is fastest with it.
  out.microbatches.assign(n, 1);
  using Entry = std::pair<double, size_t>;  // (time with one more, pipeline): least first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  for (size_t p = 0; p < n; ++p) next.emplace(time(p, 2), p);
  for (int given = static_cast<int>(n); given < total; ++given) {
    const auto [t, p] = next.top();
    next.pop();
    ++out.microbatches[p];
    next.emplace(time(p, out.microbatches[p] + 1), p);
  }
  for (size_t p = 0; p < n; ++p)
    out.predicted_ms = std::max(out.predicted_ms, time(p, out.microbatches[p]));
  return out;
}

std::optional<Split> worth_rebalancing(const std::vector<PipelineSpeed>& pipelines,
                                       double min_gain) {
  if (pipelines.size() < 2) return std::nullopt;
  auto split = fit_split(pipelines);
  bool changed = false;
  for (size_t p = 0; p < pipelines.size(); ++p)
    changed = changed || split.microbatches[p] != pipelines[p].microbatches;
  if (!changed || split.gain() < min_gain) return std::nullopt;
  return split;
}

std::optional<Split> RebalanceJudge::judge(const std::vector<PipelineSpeed>& pipelines,
                                           double min_gain) {
  std::vector<int> now;
  double slowest = 0;
  for (const auto& s : pipelines) {
    now.push_back(s.microbatches);
    slowest = std::max(slowest, s.measured_ms);
  }
  measured_ms_[now] = slowest;
  auto split = worth_rebalancing(pipelines, min_gain);
  if (split) {
    auto it = measured_ms_.find(split->microbatches);
    if (it != measured_ms_.end() && it->second * (1 + min_gain) > slowest) {
      return std::nullopt;  // measured before, and not faster by the margin
    }
  }
  return split;
}

}  // namespace bw::elastic
