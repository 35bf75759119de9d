// One thread's cache of merged words: pre-token bytes -> ids. Prose repeats its words, so most
// pre-tokens are found here and never reach the merge loop. Open addressing over arenas (no
// allocation per entry); the table starts small (a Session for one short text costs little) and
// doubles while under half full; words of kMaxWordBytes or more are not cached, and when the
// cache holds kMaxEntries words it starts over empty (bounded memory, about 40 MiB at most).
//
// Thread-safety: none; one per Session.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"

namespace bw::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kMaxEntries = size_t{1} << 17;

  WordCache() { reset(kInitialSlots); }

  // The cached ids of `word`, or an empty span (no word merges to nothing... except an empty
  // word, which is never looked up).
  std::span<const TokenId> find(std::string_view word, uint64_t h) const {
    size_t i = h & mask_;
    while (true) {
      const Entry& e = table_[i];
      if (e.val_len == 0) return {};
      if (e.hash == h && e.key_len == word.size() &&
          std::string_view(keys_.data() + e.key_off, e.key_len) == word)
        return {vals_.data() + e.val_off, e.val_len};
      i = (i + 1) & mask_;
    }
  }

  void insert(std::string_view word, uint64_t h, std::span<const TokenId> ids) {
    if (word.size() >= kMaxWordBytes || ids.empty()) return;
    if (count_ >= kMaxEntries) reset(table_.size());
    if (2 * (count_ + 1) > table_.size()) grow();
    place({h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
           static_cast<uint32_t>(vals_.size()), static_cast<uint32_t>(ids.size())});
    keys_.append(word);
    vals_.insert(vals_.end(), ids.begin(), ids.end());
    ++count_;
  }

  static uint64_t hash(std::string_view word) { return std::hash<std::string_view>{}(word); }

  // Words held now (0 after the cache starts over).
  size_t size() const { return count_; }

 private:
  struct Entry {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;
    uint32_t val_off = 0, val_len = 0;  // val_len 0: empty slot
  };

  static constexpr size_t kInitialSlots = 1024;

  void place(const Entry& e) {
    size_t i = e.hash & mask_;
    while (table_[i].val_len != 0) i = (i + 1) & mask_;
    table_[i] = e;
  }

  void grow() {
    std::vector<Entry> old = std::move(table_);
    table_.assign(old.size() * 2, Entry{});
    mask_ = table_.size() - 1;
    for (const Entry& e : old)
      if (e.val_len != 0) place(e);
  }

  void reset(size_t slots) {
    table_.assign(slots, Entry{});
    mask_ = table_.size() - 1;
    keys_.clear();
    vals_.clear();
    count_ = 0;
  }

  std::vector<Entry> table_;
  size_t mask_ = 0;
  std::string keys_;
  std::vector<TokenId> vals_;
  size_t count_ = 0;
};

}  // namespace bw::tokenizer
