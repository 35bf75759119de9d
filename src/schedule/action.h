// The action IR: what one device does, one action at a time (after PyTorch's pipelining).
//
// An action is a kind, a chunk and a microbatch. Its text form is `<chunk><KIND><microbatch>`,
// e.g. `3F1` (forward of chunk 3, microbatch 1) or `5SEND_B2`. Compute actions are F, B (full
// backward), I (backward for inputs) and W (backward for weights, zero-bubble schedules);
// communication actions move a chunk's output activation (SEND_F/RECV_F) or its input gradient
// (SEND_B/RECV_B). For SEND_F the chunk is the producer; for RECV_F the chunk is the consumer
// (the chunk whose forward needs the tensor). Likewise SEND_B names the chunk whose backward
// produced the gradient and RECV_B the chunk whose backward consumes it.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace bw::schedule {

enum class ActionKind { F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B };

struct Action {
  ActionKind kind = ActionKind::F;
  int chunk = 0;
  int microbatch = 0;

  auto operator<=>(const Action&) const = default;
};

bool is_compute(ActionKind kind);
bool is_comm(ActionKind kind);
std::string_view kind_name(ActionKind kind);  // "F", "SEND_B", ...
std::optional<ActionKind> parse_kind(std::string_view name);

std::string to_string(const Action& a);  // "3F1"
// Parses "3F1"; nullopt when the text is not an action.
std::optional<Action> parse_action(std::string_view text);

}  // namespace bw::schedule
