#include "elastic/slow_ranks.h"

#include <algorithm>

#include "core/check.h"

namespace bw::elastic {

SlowRanks::SlowRanks(double threshold, int window) : threshold_(threshold), window_(window) {
  BW_CHECK(threshold > 1 && window >= 1, "slow ranks: threshold {} and window {}", threshold,
           window);
}

void SlowRanks::reset(std::vector<double> work) {
  work_ = std::move(work);
  relative_.assign(work_.size(), 0.0);
  over_.assign(work_.size(), 0);
}

bool SlowRanks::judged() const {
  return std::count_if(work_.begin(), work_.end(), [](double w) { return w > 0; }) >= 2;
}

void SlowRanks::add(const std::vector<double>& compute_ms) {
  BW_CHECK(compute_ms.size() == work_.size(), "slow ranks: {} compute times for {} ranks",
           compute_ms.size(), work_.size());
  std::vector<double> speed;
  for (size_t r = 0; r < work_.size(); ++r) {
    if (work_[r] > 0) speed.push_back(compute_ms[r] / work_[r]);
  }
  if (speed.size() < 2) return;
  // The median; with an even count the lower middle one, so that with two ranks the slower is
  // measured against the faster.
  std::nth_element(speed.begin(), speed.begin() + (speed.size() - 1) / 2, speed.end());
  const double median = speed[(speed.size() - 1) / 2];
  for (size_t r = 0; r < work_.size(); ++r) {
    if (work_[r] <= 0 || median <= 0) {
      relative_[r] = 0.0;
      over_[r] = 0;
      continue;
    }
    relative_[r] = compute_ms[r] / work_[r] / median;
    over_[r] = relative_[r] > threshold_ ? over_[r] + 1 : 0;
  }
}

std::vector<int> SlowRanks::slow() const {
  std::vector<int> out;
  for (size_t r = 0; r < over_.size(); ++r) {
    if (over_[r] >= window_) out.push_back(static_cast<int>(r));
  }
  return out;
}

}  // namespace bw::elastic
