// Internal: text grids of a schedule for validator messages (after PyTorch pipelining's
// `_format_pipeline_order`): one column per device, one row per list position or dry-run step,
// the offending cell marked `>3F1<`.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace bw::schedule::detail {

struct Mark {
  int device = -1;
  int index = -1;  // position in that device's list
};

// Rows are list positions around `mark` (at most `rows` of them), columns the devices around it.
std::string position_grid(const Schedule& s, Mark mark, int rows);

// Rows are dry-run steps: cell (t, d) is the action device d ran at step t. `step_of[d][k]` is the
// step at which action k of device d ran (-1: not run). Shows the last `rows` steps that ran and
// then one row "stuck" with each unfinished device's next action marked.
std::string step_grid(const Schedule& s, const std::vector<std::vector<int>>& step_of,
                      const std::vector<int>& next_index, int rows, int focus_device);

}  // namespace bw::schedule::detail
