#include "schedule/action.h"

#include <array>
#include <charconv>

namespace bw::schedule {

namespace {
constexpr std::array<std::string_view, 12> kNames = {
    "F",      "B",      "I",       "W",       "SEND_F",      "RECV_F",
    "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD", "OVERLAP_F_B"};

std::optional<int> parse_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}
}  // namespace

bool is_compute(ActionKind kind) {
  return kind == ActionKind::F || kind == ActionKind::B || kind == ActionKind::I ||
         kind == ActionKind::W;
}

bool is_comm(ActionKind kind) {
  return kind == ActionKind::SEND_F || kind == ActionKind::RECV_F || kind == ActionKind::SEND_B ||
         kind == ActionKind::RECV_B;
}

std::string_view kind_name(ActionKind kind) { return kNames[static_cast<int>(kind)]; }

std::optional<ActionKind> parse_kind(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<ActionKind>(i);
  return std::nullopt;
}

std::string to_string(const Action& a) {
  if (a.kind == ActionKind::OVERLAP_F_B) return std::string(kind_name(a.kind));
  if (is_chunk_action(a.kind)) return std::to_string(a.chunk) + std::string(kind_name(a.kind));
  return std::to_string(a.chunk) + std::string(kind_name(a.kind)) + std::to_string(a.microbatch);
}

std::optional<Action> parse_action(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  size_t j = text.size();
  while (j > i && text[j - 1] >= '0' && text[j - 1] <= '9') --j;
  auto chunk = parse_int(text.substr(0, i));
  auto mb = parse_int(text.substr(j));
  auto kind = parse_kind(text.substr(i, j - i));
  if (chunk && kind && is_chunk_action(*kind)) {  // `3UNSHARD`: no microbatch after the kind
    if (j != text.size()) return std::nullopt;
    return Action{*kind, *chunk, -1};
  }
  if (!chunk || !mb || !kind || !has_slot(*kind)) return std::nullopt;
  return Action{*kind, *chunk, *mb};
}

}  // namespace bw::schedule
