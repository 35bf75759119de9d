// Strong integer ids, so that a rank cannot be passed where a chunk is expected.
//
// Each id is a thin wrapper over int with explicit construction, comparison, hashing and fmt
// support. value() gives the raw index for vector subscripts.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>

#include <fmt/format.h>

namespace bw {

template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(int v) : v_(v) {}
  constexpr int value() const { return v_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  int v_ = 0;
};

using Rank = StrongId<struct RankTag>;
using NodeId = StrongId<struct NodeTag>;
using LayerId = StrongId<struct LayerTag>;
using ChunkId = StrongId<struct ChunkTag>;
using MicrobatchId = StrongId<struct MicrobatchTag>;

}  // namespace bw

template <typename Tag>
struct std::hash<bw::StrongId<Tag>> {
  std::size_t operator()(const bw::StrongId<Tag>& id) const noexcept {
    return std::hash<int>{}(id.value());
  }
};

template <typename Tag>
struct fmt::formatter<bw::StrongId<Tag>> : fmt::formatter<int> {
  auto format(const bw::StrongId<Tag>& id, fmt::format_context& ctx) const {
    return fmt::formatter<int>::format(id.value(), ctx);
  }
};
