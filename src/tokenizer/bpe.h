// The byte-level BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges and the
// merge loop of `tokenizers`' models/bpe/word.rs. A pre-token (raw bytes) starts as one symbol
// per byte (the id of that byte's character); the adjacent pair with the lowest merge rank is
// merged, the leftmost among equals, until no adjacent pair has a merge. Words of up to
// kLinearMaxSymbols symbols keep their pair ranks in an array and rescan it per merge (fast for
// the short words of prose); longer ones use a min-heap of candidate merges with lazy deletion,
// as `tokenizers` does: O(n log n) on a word of n bytes. Both give the same merges (the heap
// pops the lowest (rank, position) among the pairs that still exist, which is what the scan
// finds).
//
// Thread-safety: a Bpe is immutable after construction; encode_word() may run on many threads,
// each with its own WordScratch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bw::tokenizer {

using TokenId = uint32_t;

// Hash of std::string keys that also looks up std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct BpeMerge {
  TokenId left, right;
  uint32_t rank;
  TokenId merged;
};

// Reusable buffers of one thread's merge loop.
struct WordScratch {
  struct Symbol {
    TokenId id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  std::vector<TokenId> ids;
  std::vector<uint32_t> ranks;
  std::vector<uint64_t> heap;
};

class Bpe {
 public:
  static constexpr size_t kLinearMaxSymbols = 64;

  struct Options {
    bool ignore_merges = false;  // a word that is a vocabulary entry is that entry
    std::optional<TokenId> unk;  // id for bytes without a vocabulary entry (else dropped)
    bool fuse_unk = false;       // consecutive unknown bytes give one unk
  };

  // `vocab`: raw bytes -> id, for entries made only of byte-level characters. `merges` in rank
  // order (a repeated pair keeps its last rank, as `tokenizers` does).
  Bpe(BytesToId vocab, const std::vector<BpeMerge>& merges, Options options);

  // Appends the ids of one pre-token.
  void encode_word(std::string_view word, WordScratch& s, std::vector<TokenId>& out) const;

  // The two merge loops on initial symbols, for tests that compare them.
  void merge_linear(std::vector<TokenId>& ids, WordScratch& s) const;
  void merge_heap(std::vector<TokenId>& ids, WordScratch& s) const;

  size_t num_merges() const { return num_merges_; }

 private:
  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

  // Open-addressing table (pair -> rank, merged id); linear probing, power-of-two size.
  struct Slot {
    uint64_t key = ~uint64_t{0};  // (left << 32) | right; all ones = empty
    uint32_t rank = kNoRank;
    TokenId merged = 0;
  };
  const Slot* find(TokenId left, TokenId right) const {
    const uint64_t key = (uint64_t{left} << 32) | right;
    size_t i = hash(key) & mask_;
    while (true) {
      const Slot& s = table_[i];
      if (s.key == key) return &s;
      if (s.key == ~uint64_t{0}) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }

  void initial_symbols(std::string_view word, std::vector<TokenId>& ids) const;

  BytesToId vocab_;
  std::array<int64_t, 256> byte_id_{};  // -1: the byte has no vocabulary entry
  std::vector<Slot> table_;
  size_t mask_ = 0;
  size_t num_merges_ = 0;
  Options options_;
};

}  // namespace bw::tokenizer
