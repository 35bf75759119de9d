// `breakwater train` with elastic.control = "etcd" or "etcd://...": a run on this machine whose
// coordinator is replaceable (docs/elastic.md "A takeover on one machine"). This process starts
// the run's pieces as separate processes, as they would run on separate hosts, and waits for them:
// - the control store: with "etcd", a 3-member etcd on loopback (local_etcd.h), data on tmpfs;
// - the active coordinator (`breakwater coordinator --control URL --run-id ID`, writing
//   train.out_dir/coordinator-0), then, once it leads, elastic.standbys standby coordinators
//   (`--standby`, train.out_dir/coordinator-i); checkpoints go to checkpoint.dir (default
//   train.out_dir), which they share;
// - one agent per node (`breakwater agent --control URL --run-id ID`, log in
//   train.out_dir/agent-N.log), following whichever coordinator leads.
// The coordinators share this terminal: the active one shows the plan and progress, and a standby
// that takes over shows its `recovered` event, the rest of the progress and the summary. Ctrl-C
// is passed on to the coordinators (a checkpoint at the next step boundary). Every child dies with
// this process (PR_SET_PDEATHSIG).
//
// The run's exit status: the largest of the coordinators' statuses, those killed by SIGKILL left
// out (a standby that found the run over exits 0); 3 when every coordinator was killed.
//
// Thread-safety: called from one thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/config.h"

namespace bw::elastic {

struct StandbyLaunch {
  std::string executable;                // breakwater-torch; empty = this executable
  std::vector<std::string> coordinator;  // passed on to every coordinator (--log-level, --quiet)
  bool quiet = false;                    // nothing printed by this process but errors
};

int run_with_standbys(runtime::RunConfig config, const StandbyLaunch& launch);

}  // namespace bw::elastic
