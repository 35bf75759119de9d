// Point-to-point and collective communication for workers, behind a small interface (after
// Gloo's split of algorithms from transport): the executor and gradient sync see only Transport;
// make_gloo_transport() backs it with c10d's ProcessGroupGloo over a store prefix.
//
// Invariants: every wait has a deadline (the transport's timeout); a lost peer, a closed
// connection or a timeout surfaces as bw::CommError naming the operation and the peer, never as
// a hang. A tensor handed to isend/irecv must stay alive and untouched until its Request is
// waited (the Request holds a reference).
//
// Out-of-band abort (docs/elastic.md "Quiescing"): Gloo notices a dead peer only on the
// connection it reads, and a stopped peer never closes its connections, so every transport of a
// generation shares an AbortSignal. abort() (from the worker's watcher thread, when the
// coordinator publishes the generation's abort key) makes every pending and future wait throw
// CommError at once: pending sends and receives through c10d's Work::abort(), collectives by
// waiting in short slices and checking the signal, joins by waiting for the rendezvous in a
// helper thread. An aborted group is never used again; drop it with discard_in_background(),
// since destroying a Gloo group with a blocked operation blocks until that operation fails.
//
// Thread-safety: one Transport is used by one thread; AbortSignal is thread-safe.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace c10d {
class Store;
class Work;
}  // namespace c10d

namespace bw::runtime {

class AbortSignal {
 public:
  AbortSignal();
  ~AbortSignal();
  void abort();
  bool aborted() const { return aborted_.load(); }
  // Pending point-to-point work to abort; removed once waited.
  void add(const c10::intrusive_ptr<c10d::Work>& work);
  void remove(const c10::intrusive_ptr<c10d::Work>& work);
  // Runs `fn` on abort (at once when already aborted): an NCCL group's abort(), which releases
  // kernels blocked on a dead peer (ncclCommAbort). Kept until the signal is destroyed.
  void on_abort(std::function<void()> fn);

 private:
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_;
  std::vector<std::function<void()>> hooks_;
};

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer completes; CommError on timeout or a lost peer.
  virtual void wait() = 0;
  // Whether the transfer is known to be complete, without blocking (false when not yet, or
  // not known); a later wait() is still required. Tracing uses it to time sends.
  virtual bool completed() { return false; }
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
  // `output` (size() * input.numel() values) gets every rank's `input`, in rank order; blocking.
  // The default builds it from allreduce_sum over zeros (exact but for the sign of zeros).
  virtual void allgather(const torch::Tensor& input, const torch::Tensor& output);
};

// A ProcessGroupGloo of `size` ranks on the keys of `store` under `prefix` (e.g. "g0/world"),
// connecting over `hostname` (loopback for local runs). Construction waits for all ranks to join
// (within `timeout`, or until `abort` fires).
std::unique_ptr<Transport> make_gloo_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& prefix, int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               const std::string& hostname = "127.0.0.1",
                                               std::shared_ptr<AbortSignal> abort = nullptr);

// The c10d backend behind a transport (cluster.backend).
enum class BackendKind { kGloo, kNccl };
// "gloo" | "nccl"; ConfigError otherwise.
BackendKind parse_backend(const std::string& name);

struct TransportOptions {
  BackendKind backend = BackendKind::kGloo;
  std::chrono::milliseconds timeout{120000};
  std::string hostname = "127.0.0.1";  // the address the group's connections use
  std::shared_ptr<AbortSignal> abort;  // may be null
  int gpu = -1;                        // the CUDA device of an NCCL group (runtime/device.h)
};

// The one place a transport is made: a group of `size` ranks on the keys of `store` under
// `prefix`, over options.backend. Either backend takes tensors on any device: Gloo stages CUDA
// tensors through host memory, NCCL host tensors through options.gpu. ConfigError for NCCL in a
// build without CUDA (docs/runtime.md "Device and backend").
std::unique_ptr<Transport> make_transport(const TransportOptions& options,
                                          const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::string& prefix, int rank, int size);

// How a generation makes its groups: (store prefix, rank in the group, group size). Tests pass a
// factory that wraps the transports to fail on cue.
using TransportFactory =
    std::function<std::unique_ptr<Transport>(const std::string& prefix, int rank, int size)>;

// How a thread waits for a collective: it polls for up to `spin` (yielding the core between
// polls), then sleeps until the collective completes. Sleeping costs a wake-up when the peer's
// data arrives (several scheduler latencies per collective: the caller, c10d's worker thread,
// Gloo's I/O thread); polling keeps the core, so it pays only where the core is this worker's
// own. Process-wide; 0 (the initial value) sleeps at once. Point-to-point waits always sleep: a
// stage may wait a whole bubble for its input.
void set_collective_spin(std::chrono::microseconds spin);
// train.spin_wait_us resolved on a host: `configured` when >= 0; else (auto) kAutoSpinUs when
// the host's workers and their intra-op threads fit its cores, and 0 when they share cores.
inline constexpr int64_t kAutoSpinUs = 2000;
int64_t resolve_collective_spin_us(int64_t configured, int workers_per_host, int threads_per_worker,
                                   int cores);

// Destroys transports on a detached thread (a blocked Gloo group blocks its destructor until
// the blocked operation fails).
void discard_in_background(std::vector<std::unique_ptr<Transport>> transports);

}  // namespace bw::runtime
