// The rest of PyTorch's runtime lowering (its `_add_unshard_reshard` and `_add_reduce_grad`), as
// a pass over a compute-only schedule, so `breakwater schedule --fsdp --csv` writes the schedule
// PyTorch's runtime would dump in its `compute_comms` format.
//
// FSDP: walking a device's list, the next `max_active_chunks` distinct chunks that compute from
// here on must be unsharded; before each compute (or OVERLAP_F_B pair) the device reshards the
// active chunks outside that window (ascending chunk order) and unshards the window's chunks
// that are not active (in the order they will compute); at the end it reshards what is left.
// Gradient reduction: `<c>REDUCE_GRAD` right after chunk c's last B or W on its device.
// The result satisfies the validator's chunk-action rules (validate.h). Pure.
#pragma once

#include "schedule/schedule.h"

namespace bw::schedule {

struct FsdpOptions {
  int max_active_chunks = 3;  // PyTorch's max_active_stages
  bool unshard_reshard = true;
  bool reduce_grad = true;
};

// ConfigError when `compute_only` already holds SEND/RECV or chunk actions, or for
// max_active_chunks < 1.
Schedule add_fsdp_actions(const Schedule& compute_only, const FsdpOptions& options = {});

}  // namespace bw::schedule
