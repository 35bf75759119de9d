// The action IR: what one device does, one action at a time (after PyTorch's pipelining).
//
// An action is a kind, a chunk and a microbatch. Its text form is `<chunk><KIND><microbatch>`,
// e.g. `3F1` (forward of chunk 3, microbatch 1) or `5SEND_B2`. Compute actions are F, B (full
// backward), I (backward for inputs) and W (backward for weights, zero-bubble schedules);
// communication actions move a chunk's output activation (SEND_F/RECV_F) or its input gradient
// (SEND_B/RECV_B). For SEND_F the chunk is the producer; for RECV_F the chunk is the consumer
// (the chunk whose forward needs the tensor). Likewise SEND_B names the chunk whose backward
// produced the gradient and RECV_B the chunk whose backward consumes it.
//
// The rest of PyTorch's `compute_comms` format (docs/schedules.md "The full CSV format"):
//  - chunk actions, with no microbatch (`microbatch` is -1, text `3UNSHARD`): UNSHARD (all-gather
//    an FSDP-sharded chunk's parameters), RESHARD (free them again), REDUCE_GRAD (reduce the
//    chunk's gradients across data-parallel replicas, after its last backward);
//  - OVERLAP_F_B, a marker with chunk and microbatch -1: the two compute actions after it form one
//    overlapped pair (PyTorch's cell `(a;b)OVERLAP_F_B`), which the simulator runs at once.
#pragma once
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace bw::schedule {

enum class ActionKind { F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD,
                        OVERLAP_F_B };

// Kinds below this one name a (chunk, microbatch); per-slot tables are indexed by them.
inline constexpr int kNumSlotKinds = 8;

struct Action {
  ActionKind kind = ActionKind::F;
  int chunk = 0;
  int microbatch = 0;

  auto operator<=>(const Action&) const = default;
};

bool is_compute(ActionKind kind);  // F, B, I, W
bool is_comm(ActionKind kind);     // SEND_F, RECV_F, SEND_B, RECV_B
// UNSHARD, RESHARD, REDUCE_GRAD: one per chunk, no microbatch.
inline bool is_chunk_action(ActionKind kind) {
  return kind == ActionKind::UNSHARD || kind == ActionKind::RESHARD ||
         kind == ActionKind::REDUCE_GRAD;
}
// Names a (chunk, microbatch): compute and SEND/RECV.
inline bool has_slot(ActionKind kind) { return static_cast<int>(kind) < kNumSlotKinds; }
std::string_view kind_name(ActionKind kind);  // "F", "SEND_B", ...
std::optional<ActionKind> parse_kind(std::string_view name);

std::string to_string(const Action& a);  // "3F1", "3UNSHARD", "OVERLAP_F_B" (the marker alone)
// Parses "3F1" or "3UNSHARD"; nullopt when the text is not an action (also "3UNSHARD1": chunk
// actions take no microbatch). Pairs are cells of the CSV format (csv.h), not actions.
std::optional<Action> parse_action(std::string_view text);

}  // namespace bw::schedule
