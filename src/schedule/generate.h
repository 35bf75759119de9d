// Schedule generators: every pipeline schedule breakwater runs, as compute-only action lists.
//
//   ScheduleSpec spec{.kind = "hanayo", .devices = 4, .microbatches = 8, .waves = 2};
//   Schedule s = generate(spec);         // F/B (or F/I/W) per device, placement included
//   Schedule lowered = lower(s);         // + SEND/RECV (lower.h), what the runtime executes
//   validate(lowered);                   // throws ScheduleError with the step x device grid
//
// Kinds (one file each, each drawing its small case in its top comment):
//   gpipe        GPipe (Huang et al. 2019): all forwards, then all backwards.
//   1f1b         1F1B / DAPPLE (Fan et al. 2021; PipeDream-Flush).
//   interleaved  Megatron's interleaved 1F1B (Narayanan et al. SC'21), v = chunks_per_device.
//   chimera      Chimera (Li & Hoefler SC'21): two replicas in opposite directions.
//   hanayo       Hanayo wave (Liu et al. SC'23), W = waves.
//   zb-h1, zb-v  Zero Bubble (Qi et al. ICLR'24): backward split into I and W.
// Custom schedules come from CSV (csv.h).
//
// Pure functions, no state, thread-safe.
#pragma once

#include <string>
#include <vector>

#include "schedule/csv.h"
#include "schedule/lower.h"
#include "schedule/schedule.h"
#include "schedule/validate.h"

namespace bw::schedule {

struct ScheduleSpec {
  std::string kind;  // gpipe | 1f1b | interleaved | chimera | hanayo | zb-h1 | zb-v
  int devices = 1;
  int microbatches = 1;
  int chunks_per_device = 2;  // interleaved only (v)
  int waves = 1;              // hanayo only (W)
  int group_size = 0;         // interleaved only: Megatron's microbatch_group_size_per_vp_stage
                              // (microbatches per chunk round); 0 = devices
};

// The kinds generate() accepts, in the order tables list them.
std::vector<std::string> schedule_kinds();

// Compute-only schedule (F/B, or F/I/W for the zero-bubble kinds) with its chunk placement.
// ConfigError (naming the numbers and the fix) for an unknown kind or an invalid combination.
Schedule generate(const ScheduleSpec& spec);

// Checks `spec` without generating: ConfigError when generate() would refuse it.
void check_spec(const ScheduleSpec& spec);

// Number of chunks and their placement for `spec`, without generating the lists (for the planner,
// which partitions layers into chunks before it asks the simulator).
int num_chunks(const ScheduleSpec& spec);
std::vector<int> chunk_placement(const ScheduleSpec& spec);
// Model stage of each chunk (identity except Chimera, whose two replicas share stages).
std::vector<int> chunk_stages(const ScheduleSpec& spec);

}  // namespace bw::schedule
