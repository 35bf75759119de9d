#include "schedule/grid.h"

#include <fmt/format.h>

#include <algorithm>

namespace bw::schedule::detail {

namespace {

constexpr int kMaxColumns = 12;

// Devices [first, last) to show: all of them, or a window around `focus`.
std::pair<int, int> device_window(int devices, int focus) {
  if (devices <= kMaxColumns) return {0, devices};
  int first = std::clamp(focus - kMaxColumns / 2, 0, devices - kMaxColumns);
  return {first, first + kMaxColumns};
}

std::string render(const std::vector<std::string>& labels,
                   const std::vector<std::vector<std::string>>& cells, int first_device,
                   int last_device, const std::vector<std::string>& notes) {
  size_t width = 6;
  for (const auto& row : cells)
    for (const auto& c : row) width = std::max(width, c.size() + 1);
  size_t label_width = 0;
  for (const auto& l : labels) label_width = std::max(label_width, l.size());
  std::string out = fmt::format("{:>{}} ", "", label_width);
  for (int d = first_device; d < last_device; ++d)
    out += fmt::format("{:<{}}", fmt::format("dev {}", d), width);
  out += '\n';
  for (size_t r = 0; r < cells.size(); ++r) {
    std::string line = fmt::format("{:>{}} ", labels[r], label_width);
    for (const auto& c : cells[r]) line += fmt::format("{:<{}}", c, width);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (!notes[r].empty()) line += "   <-- " + notes[r];
    out += line + '\n';
  }
  return out;
}

}  // namespace

std::string position_grid(const Schedule& s, Mark mark, int rows) {
  const int devices = static_cast<int>(s.actions.size());
  if (devices == 0) return "";
  auto [d0, d1] = device_window(devices, std::max(mark.device, 0));
  size_t longest = 0;
  for (int d = d0; d < d1; ++d) longest = std::max(longest, s.actions[d].size());
  int first = 0, last = static_cast<int>(longest);
  if (last - first > rows) {
    const int center = mark.index >= 0 ? mark.index : 0;
    first = std::clamp(center - rows / 2, 0, std::max(0, last - rows));
    last = std::min(last, first + rows);
  }
  std::vector<std::string> labels, notes;
  std::vector<std::vector<std::string>> cells;
  for (int k = first; k < last; ++k) {
    labels.push_back(fmt::format("pos {}:", k));
    std::vector<std::string> row;
    bool marked = false;
    for (int d = d0; d < d1; ++d) {
      std::string c = k < static_cast<int>(s.actions[d].size()) ? to_string(s.actions[d][k]) : "";
      if (d == mark.device && k == mark.index) {
        c = ">" + c + "<";
        marked = true;
      }
      row.push_back(c);
    }
    cells.push_back(std::move(row));
    notes.push_back(marked ? "here" : "");
  }
  return render(labels, cells, d0, d1, notes);
}

std::string step_grid(const Schedule& s, const std::vector<std::vector<int>>& step_of,
                      const std::vector<int>& next_index, int rows, int focus_device) {
  const int devices = static_cast<int>(s.actions.size());
  if (devices == 0) return "";
  auto [d0, d1] = device_window(devices, std::max(focus_device, 0));
  int last_step = -1;
  for (int d = 0; d < devices; ++d)
    for (int st : step_of[d]) last_step = std::max(last_step, st);
  const int first_step = std::max(0, last_step - rows + 2);
  std::vector<std::string> labels, notes;
  std::vector<std::vector<std::string>> cells;
  const int n_rows = last_step - first_step + 1;
  for (int r = 0; r < n_rows; ++r) {
    labels.push_back(fmt::format("step {}:", first_step + r));
    cells.emplace_back(d1 - d0);
    notes.emplace_back();
  }
  for (int d = d0; d < d1; ++d) {
    const auto& steps = step_of[d];
    // step_of is nondecreasing over the executed prefix: find the first action at first_step.
    auto it = std::lower_bound(steps.begin(), steps.begin() + next_index[d], first_step);
    for (auto k = it - steps.begin(); k < next_index[d]; ++k)
      cells[steps[k] - first_step][d - d0] = to_string(s.actions[d][k]);
  }
  labels.push_back("stuck:");
  std::vector<std::string> stuck;
  for (int d = d0; d < d1; ++d) {
    const int k = next_index[d];
    stuck.push_back(k < static_cast<int>(s.actions[d].size())
                        ? ">" + to_string(s.actions[d][k]) + "<"
                        : "(done)");
  }
  cells.push_back(std::move(stuck));
  notes.push_back("no device can run its next action");
  return render(labels, cells, d0, d1, notes);
}

}  // namespace bw::schedule::detail
