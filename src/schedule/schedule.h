// A schedule: one ordered action list per device of one pipeline, plus the chunk placement.
//
// Invariants (checked by validate(), not by construction): chunk_device has num_chunks entries in
// [0, num_devices); actions has num_devices lists; chunks are numbered in model order (chunk 0
// holds the first layers). The runtime executes these lists exactly as given.
//
// Model order and duplicated weights. `chunk_stage[c]` names the model stage (contiguous range of
// layers) chunk c holds; empty means chunk c holds stage c, which is every schedule except
// Chimera. Chunk c+1 consumes chunk c's output exactly when chunk_stage[c+1] == chunk_stage[c]+1
// (prev_chunk / next_chunk below). A run of chunks covering stages 0..S-1 is a *replica*; Chimera
// has two (chunks 0..P-1 run down the devices, chunks P..2P-1 run back up, with duplicated
// weights), and each microbatch goes through exactly one replica (the one whose first chunk runs
// its F). All other schedules have one replica and every microbatch visits every chunk.
//
// Contract with the runtime for lowered lists (lower.h inserts the communication):
//  - When consecutive chunks c, c+1 sit on the SAME device (Hanayo's turn points, ZB-V's fold) no
//    send/recv is inserted: the hand-off is local.
//  - Otherwise, on the device of chunk c: `RECV_F c m` comes before `F c m` (it receives chunk
//    c-1's output) and `SEND_F c m` after it (to the device of chunk c+1); `RECV_B c m` comes
//    before the backward of chunk c (B, or I when the backward is split; it receives the gradient
//    from chunk c+1) and `SEND_B c m` after it (to the device of chunk c-1). W never communicates.
//  - The runtime posts an irecv at each RECV action and waits for it at the compute that consumes
//    the tensor; sends are isends. Every generated schedule completes under that semantics; the
//    validator also checks the stricter "a send blocks until its receive is posted" (validate.h),
//    which the lowering's early receives satisfy for every generator (docs/schedules.md).
#pragma once

#include <string>
#include <vector>

#include "schedule/action.h"

namespace bw::schedule {

struct Schedule {
  std::string kind;  // "gpipe", "1f1b", "hanayo", ... or "custom"
  int num_devices = 0;
  int num_chunks = 0;
  int num_microbatches = 0;
  std::vector<int> chunk_device;             // chunk -> device
  std::vector<std::vector<Action>> actions;  // device -> ordered actions
  std::vector<int> chunk_stage;              // chunk -> model stage; empty: chunk c is stage c

  // Chunks held by device d, in model order.
  std::vector<int> chunks_of(int device) const;

  int stage_of(int chunk) const { return chunk_stage.empty() ? chunk : chunk_stage[chunk]; }
  // Number of distinct model stages (num_chunks without duplicated weights).
  int num_stages() const;
  // The chunk whose output chunk c consumes in its forward, or -1 when c holds stage 0.
  // (Inline: the lowering, validator and simulator ask once per action.)
  int prev_chunk(int chunk) const {
    if (chunk <= 0) return -1;
    if (chunk_stage.empty()) return chunk - 1;
    return chunk_stage[chunk] == chunk_stage[chunk - 1] + 1 ? chunk - 1 : -1;
  }
  // The chunk that consumes chunk c's output, or -1 when c holds the last stage.
  int next_chunk(int chunk) const {
    if (chunk + 1 >= num_chunks) return -1;
    if (chunk_stage.empty()) return chunk + 1;
    return chunk_stage[chunk + 1] == chunk_stage[chunk] + 1 ? chunk + 1 : -1;
  }
  // True when any list holds a SEND/RECV (the schedule has been lowered).
  bool is_lowered() const;
  // True when the backward is split into I and W anywhere.
  bool has_split_backward() const;
  long long num_actions() const;
};

}  // namespace bw::schedule
