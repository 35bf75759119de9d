// Transport over c10d's ProcessGroupNCCL (cluster.backend = "nccl"), in the CUDA variant only
// (-DBW_CUDA=ON; the CPU build has no definition and make_transport refuses "nccl" there).
//
// Deadlines and aborts are breakwater's own, as on Gloo (comm.h): communicators are created in
// NCCL's non-blocking mode, every wait polls the operation's completion against the transport's
// timeout and the generation's AbortSignal, and the signal's abort calls the group's abort()
// (ncclCommAbort), which releases a kernel blocked on a dead peer. PyTorch's watchdog is told not
// to tear the process down (nccl_environment()): a timeout or a lost peer is a CommError here, and
// the generation is re-planned around it (docs/elastic.md "GPUs").
//
// Each generation makes new groups under its own store prefix; an aborted group is never used
// again. Host tensors handed to it (the gradient norm's float64 pair) travel through a copy on the
// group's GPU.
//
// Thread-safety: as Transport.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm.h"

namespace c10d {
class Store;
}

namespace bw::runtime {

// The environment PyTorch's NCCL backend reads, as breakwater sets it before the first group:
// (name, value). Documented in docs/elastic.md "GPUs".
std::vector<std::pair<std::string, std::string>> nccl_environment();

std::unique_ptr<Transport> make_nccl_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               const TransportOptions& options);

}  // namespace bw::runtime
