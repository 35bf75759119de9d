#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "core/check.h"

namespace bw::tokenizer {

Bpe::Bpe(BytesToId vocab, const std::vector<BpeMerge>& merges, Options options)
    : vocab_(std::move(vocab)), options_(options) {
  byte_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (it != vocab_.end()) byte_id_[b] = it->second;
  }
  size_t size = 16;
  while (size < merges.size() * 2) size <<= 1;
  table_.assign(size, Slot{});
  mask_ = size - 1;
  for (const BpeMerge& m : merges) {
    const uint64_t key = (uint64_t{m.left} << 32) | m.right;
    size_t i = hash(key) & mask_;
    while (table_[i].key != key && table_[i].key != ~uint64_t{0}) i = (i + 1) & mask_;
    if (table_[i].key != key) ++num_merges_;
    table_[i] = Slot{key, m.rank, m.merged};  // a repeated pair keeps its last rank
  }
}

void Bpe::initial_symbols(std::string_view word, std::vector<TokenId>& ids) const {
  ids.clear();
  bool pending_unk = false;
  for (char c : word) {
    const int64_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      if (pending_unk) ids.push_back(*options_.unk);
      pending_unk = false;
      ids.push_back(static_cast<TokenId>(id));
    } else if (options_.unk) {
      if (pending_unk && !options_.fuse_unk) ids.push_back(*options_.unk);
      pending_unk = true;
    }  // no unknown token: the byte is dropped, as `tokenizers` drops it
  }
  if (pending_unk) ids.push_back(*options_.unk);
}

void Bpe::merge_linear(std::vector<TokenId>& ids, WordScratch& s) const {
  if (ids.size() < 2) return;
  std::vector<uint32_t>& ranks = s.ranks;
  ranks.resize(ids.size() - 1);
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const Slot* m = find(ids[i], ids[i + 1]);
    ranks[i] = m ? m->rank : kNoRank;
  }
  while (!ranks.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < ranks.size(); ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoRank) break;
    ids[best] = find(ids[best], ids[best + 1])->merged;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0) {
      const Slot* m = find(ids[best - 1], ids[best]);
      ranks[best - 1] = m ? m->rank : kNoRank;
    }
    if (best < ranks.size()) {
      const Slot* m = find(ids[best], ids[best + 1]);
      ranks[best] = m ? m->rank : kNoRank;
    }
  }
}

void Bpe::merge_heap(std::vector<TokenId>& ids, WordScratch& s) const {
  if (ids.size() < 2) return;
  auto& sym = s.symbols;
  sym.resize(ids.size());
  const auto n = static_cast<int32_t>(ids.size());
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  // Entries (rank << 32 | position of the left symbol), smallest first; an entry is stale when
  // its pair no longer exists (checked by rank: each pair has one rank).
  auto& heap = s.heap;
  heap.clear();
  const auto push = [&](int32_t pos) {
    const WordScratch::Symbol& a = sym[pos];
    if (a.next < 0) return;
    if (const Slot* m = find(a.id, sym[a.next].id)) {
      heap.push_back((uint64_t{m->rank} << 32) | static_cast<uint32_t>(pos));
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    WordScratch::Symbol& a = sym[pos];
    if (!a.alive || a.next < 0) continue;
    const Slot* m = find(a.id, sym[a.next].id);
    if (m == nullptr || m->rank != rank) continue;
    WordScratch::Symbol& b = sym[a.next];
    a.id = m->merged;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) sym[b.next].prev = pos;
    if (a.prev >= 0) push(a.prev);
    push(pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void Bpe::encode_word(std::string_view word, WordScratch& s, std::vector<TokenId>& out) const {
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  initial_symbols(word, s.ids);
  if (s.ids.size() <= kLinearMaxSymbols) {
    merge_linear(s.ids, s);
  } else {
    merge_heap(s.ids, s);
  }
  out.insert(out.end(), s.ids.begin(), s.ids.end());
}

}  // namespace bw::tokenizer
