// Making a c10d Gloo group without exposing Gloo: the only file that includes
// ProcessGroupGloo.hpp (with the declarations in gloo_decl/, see its README) is
// gloo_backend.cc. Everything else uses the group as a c10d::Backend.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace bw::runtime {

// Turns PyTorch's flight recorder off for this process (TORCH_FR_BUFFER_SIZE=0, unless the
// environment sets it), before the first group reads it. In LibTorch 2.11 every Gloo operation
// records itself there, and the recorder inserts into a map of process groups before taking its
// lock, so two groups of one process enqueuing from two threads at once corrupt that map (a
// SIGSEGV in FlightRecorder::recordWithResetEnabled, seen with ranks as threads). It also saves
// a traceback capture per operation. make_gloo_backend calls it; the NCCL transport sets the
// same variable (nccl_transport.h).
void disable_flight_recorder();

// A ProcessGroupGloo of `size` ranks over `store` (already prefixed), connecting over
// `hostname`, with one worker thread. Blocks until every rank has joined or `timeout` passes
// (c10d's own error then).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& hostname);

}  // namespace bw::runtime
