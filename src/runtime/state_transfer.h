// State transfer between generations (docs/elastic.md "State transfer"): the layer ranges that
// move into a new plan are sent from a surviving replica to the workers that now need them, in
// the flat per-layer wire format (model_state.h LayerState), and installed only once complete.
//
// Every copy is posted at once: copy i uses tags 2i (the flat state) and 2i + 1 (the AdamW step).
// A lost peer or an abort surfaces as CommError from the transport; nothing is installed then,
// so the worker's state is as it was before the transfer.
//
// Thread-safety: one thread, with the transport's own rules.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "runtime/comm.h"
#include "runtime/layout.h"
#include "runtime/model_state.h"

namespace bw::runtime {

// One layer range that moves: [begin, end) of the layer's flat parameters, from worker `from` to
// worker `to` (worker ids, not ranks).
struct LayerCopy {
  int layer = 0;
  int from = 0, to = 0;
  int64_t begin = 0, end = 0;
};

// What a worker received: per layer, pieces (first flat index, state).
using ReceivedPieces = std::map<int, std::vector<std::pair<int64_t, LayerState>>>;

struct TransferResult {
  ReceivedPieces received;
  int64_t bytes_in = 0;
  double ms = 0.0;
};

// Posts this worker's sends and receives of `copies` over `world` (whose rank r is worker
// workers[r]), calls `posted` (a fault point) once everything is posted, then waits for all.
TransferResult transfer_state(const ModelState& state, Transport& world,
                              const std::vector<LayerCopy>& copies, int self,
                              const std::vector<int>& workers,
                              const std::function<void()>& posted = {});

// Puts every layer of `mine` into the form the layout runs it in on `rank`: whole, or the rank's
// shard of a segmented layer, from what `state` holds and what was received.
void install(ModelState& state, const RunLayout& layout, int rank, const std::vector<int>& mine,
             const ReceivedPieces& received);

}  // namespace bw::runtime
