// Communication lowering: compute-only schedule -> compute + SEND/RECV schedule.
//
// After PyTorch pipelining's `_add_send_recv`, as a separate pass. For each compute action that
// consumes a tensor made on another device (F of a chunk whose previous chunk is elsewhere; B or I
// of a chunk whose next chunk is elsewhere) a RECV is inserted `recv_lookahead` compute actions
// ahead of it on that device (receives are posted early, so the transfer overlaps the compute
// before it); for each compute action whose result another device consumes, a SEND follows it
// directly. Local hand-offs (consecutive chunks on one device) get nothing. The naming of each
// inserted action follows schedule.h: the RECV names the consuming chunk, the SEND the producing
// one.
//
// With lookahead L a device posts its receives L compute actions ahead of the compute that waits
// for them (L = 0: right before it). Lookahead alone does not make every schedule safe with
// blocking sends (1F1B needs L >= 1, interleaved and Chimera sometimes more), so by default a
// second pass moves individual receives earlier exactly where a blocking send would otherwise
// deadlock; the result satisfies validate.h's kRendezvous semantics whenever the compute order is
// valid.
#pragma once

#include "schedule/schedule.h"

namespace bw::schedule {

struct LowerOptions {
  int recv_lookahead = 1;
  // Then move a receive earlier wherever a send that blocks until its receive is posted would
  // otherwise deadlock (a dry run under validate.h's kRendezvous semantics), so the result runs
  // with blocking sends too. Only receives move; compute order never changes.
  bool receives_in_time = true;
};

// ConfigError when `compute_only` already holds communication actions.
Schedule lower(const Schedule& compute_only, const LowerOptions& options);
Schedule lower(const Schedule& compute_only);

// The compute actions of `s`, in order (undoes lower()).
Schedule strip_comm(const Schedule& s);

}  // namespace bw::schedule
