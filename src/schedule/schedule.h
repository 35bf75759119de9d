// A schedule: one ordered action list per device of one pipeline, plus the chunk placement.
//
// Invariants (checked by validate(), not by construction): chunk_device has num_chunks entries in
// [0, num_devices); actions has num_devices lists; chunks are numbered in model order (chunk 0
// holds the first layers). The runtime executes these lists exactly as given.
#pragma once

#include <string>
#include <vector>

#include "schedule/action.h"

namespace bw::schedule {

struct Schedule {
  std::string kind;                               // "gpipe", "1f1b", "hanayo", ... or "custom"
  int num_devices = 0;
  int num_chunks = 0;
  int num_microbatches = 0;
  std::vector<int> chunk_device;                  // chunk -> device
  std::vector<std::vector<Action>> actions;       // device -> ordered actions

  // Chunks held by device d, in model order.
  std::vector<int> chunks_of(int device) const;
};

}  // namespace bw::schedule
