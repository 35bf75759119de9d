// Point-to-point and collective communication for workers, behind a small interface (after
// Gloo's split of algorithms from transport): the executor and gradient sync see only Transport;
// make_gloo_transport() backs it with c10d's ProcessGroupGloo over a store prefix.
//
// Invariants: every wait has a deadline (the transport's timeout); a lost peer, a closed
// connection or a timeout surfaces as bw::CommError naming the operation and the peer, never as
// a hang. A tensor handed to isend/irecv must stay alive and untouched until its Request is
// waited (the Request holds a reference).
//
// Thread-safety: one Transport is used by one thread.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace c10d {
class Store;
}

namespace bw::runtime {

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer completes; CommError on timeout or a lost peer.
  virtual void wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::unique_ptr<Request> isend(const torch::Tensor& tensor, int dst, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(const torch::Tensor& tensor, int src, int tag) = 0;
  // In-place sum over the group, blocking; CommError on timeout or a lost peer.
  virtual void allreduce_sum(const torch::Tensor& tensor) = 0;
};

// A ProcessGroupGloo of `size` ranks on the keys of `store` under `prefix` (e.g. "g0/world"),
// connecting over `hostname` (loopback for local runs). Construction waits for all ranks to join
// (within `timeout`).
std::unique_ptr<Transport> make_gloo_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               const std::string& hostname = "127.0.0.1");

}  // namespace bw::runtime
