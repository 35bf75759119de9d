// The schedule validator: proves a schedule (generated or loaded) is complete and runs.
//
// After PyTorch pipelining's `_validate_schedule` and `_simulate_comms_compute`. Checks, in order:
//  1. shape: placement in range, chunk stages consistent, every action's chunk and microbatch in
//     range and on the device that holds its chunk;
//  2. completeness: each microbatch goes through exactly one replica (schedule.h) and on each of
//     its chunks runs F once and either B once or I and W once (I before W); no action twice;
//  3. communication (lowered schedules only): every cross-device hand-off has exactly one SEND
//     after its producer and one RECV before its consumer, a local hand-off has none, and every
//     SEND has its RECV;
//  4. a dry run: devices advance one action per step when its inputs are there, under the chosen
//     semantics, until all lists are done (else: deadlock).
// On failure it throws ScheduleError whose message says what is wrong and prints the step x device
// grid with the offending action marked `>..<`.
//
// Dry-run semantics for lowered schedules:
//   kAsync       the runtime's: SEND is an isend (never blocks), RECV posts an irecv (never
//                blocks), a compute waits until its RECV was posted and the matching SEND ran.
//   kRendezvous  stricter: additionally a SEND blocks until the peer has posted the RECV.
//   kSynchronous strictest: SEND and RECV both block until they meet (MPI_Ssend/MPI_Recv).
// Compute-only schedules have no communication: a compute waits for its producers to finish.
#pragma once

#include <string>

#include "core/error.h"
#include "schedule/schedule.h"

namespace bw::schedule {

class ScheduleError : public ConfigError {
 public:
  ScheduleError(const std::string& what, std::string grid)
      : ConfigError(grid.empty() ? what : what + "\n" + grid),
        problem_(what),
        grid_(std::move(grid)) {}
  const std::string& problem() const { return problem_; }  // one line
  const std::string& grid() const { return grid_; }        // the marked grid ("" if none)

 private:
  std::string problem_;
  std::string grid_;
};

enum class CommSemantics { kAsync, kRendezvous, kSynchronous };

struct ValidateOptions {
  CommSemantics semantics = CommSemantics::kAsync;
  int grid_rows = 24;        // rows of the grid printed around the failure
  bool count_steps = false;  // fill DryRun::steps (a slower dry run that keeps every step)
};

struct DryRun {
  bool ok = true;
  int steps = -1;       // with count_steps: steps the dry run took (unit-time makespan)
  std::string problem;  // empty when ok
  std::string grid;
};

void validate(const Schedule& s, const ValidateOptions& options);
void validate(const Schedule& s);
// Like validate() but returns the outcome instead of throwing.
DryRun check(const Schedule& s, const ValidateOptions& options = {});

std::string_view semantics_name(CommSemantics s);

}  // namespace bw::schedule
