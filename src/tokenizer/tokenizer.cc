// Encoding, decoding and batch encoding of a loaded tokenizer (tokenizer.h); loading is in
// tokenizer_json.cc.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace bw::tokenizer {

struct Session::State {
  explicit State(std::shared_ptr<const TokenizerImpl> t)
      : impl(std::move(t)), pre(*impl->pre), word(impl->added->word_regex()) {}

  void encode_word(std::string_view w, std::vector<TokenId>& out) {
    const uint64_t h = WordCache::hash(w);
    if (auto hit = cache.find(w, h); !hit.empty()) {
      out.insert(out.end(), hit.begin(), hit.end());
      return;
    }
    const size_t before = out.size();
    impl->bpe->encode_word(w, scratch, out);
    cache.insert(w, h, std::span<const TokenId>(out).subspan(before));
  }

  void encode_text(std::string_view text, std::vector<TokenId>& out) {
    impl->added->split(
        text, &word,
        [&](std::string_view piece) {
          impl->pre->run(piece, pre, [&](std::string_view w) { encode_word(w, out); });
        },
        [&](TokenId id) { out.push_back(id); });
  }

  std::shared_ptr<const TokenizerImpl> impl;
  PreTokenizer::Scratch pre;
  MatchScratch word;
  WordScratch scratch;
  WordCache cache;
};

Session::Session(const Tokenizer& tok) : state_(std::make_unique<State>(tok.impl_)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

void Session::encode(std::string_view text, std::vector<TokenId>& out,
                     const EncodeOptions& options) {
  std::string repaired;
  if (valid_utf8_prefix(text) != text.size()) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  const TokenizerImpl& t = *state_->impl;
  if (!options.add_special_tokens || t.single.empty()) {
    state_->encode_text(text, out);
    return;
  }
  for (const TemplatePiece& p : t.single) {
    if (p.is_sequence) {
      state_->encode_text(text, out);
    } else {
      out.insert(out.end(), p.ids.begin(), p.ids.end());
    }
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  Session s(*this);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  s.encode(text, out, options);
  return out;
}

std::vector<std::vector<TokenId>> Tokenizer::encode_batch(std::span<const std::string_view> docs,
                                                          int threads,
                                                          const EncodeOptions& options) const {
  std::vector<std::vector<TokenId>> out(docs.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), docs.size()));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  const auto work = [&] {
    try {
      Session s(*this);
      for (size_t i = next++; i < docs.size(); i = next++) s.encode(docs[i], out[i], options);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = docs.size();
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back(work);
    for (auto& th : pool) th.join();
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Tokenizer::decode_bytes(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::string out;
  bool first = true;
  for (TokenId id : ids) {
    if (id >= t.known.size() || !t.known[id]) continue;
    if (skip_special_tokens && t.special[id]) continue;
    if (!t.byte_level_decoder && !first) out += ' ';  // no decoder: tokens joined by spaces
    out += t.bytes[id];
    first = false;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes = decode_bytes(ids, skip_special_tokens);
  if (valid_utf8_prefix(bytes) == bytes.size()) return bytes;
  return repair_utf8(bytes);
}

uint32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
size_t Tokenizer::num_merges() const { return impl_->bpe->num_merges(); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id >= impl_->known.size() || !impl_->known[id]) return std::nullopt;
  return impl_->strings[id];
}

bool Tokenizer::is_special(TokenId id) const {
  return id < impl_->special.size() && impl_->special[id];
}

std::optional<TokenId> Tokenizer::document_token() const { return impl_->document_token; }

std::string Tokenizer::describe() const {
  const TokenizerImpl& t = *impl_;
  return fmt::format(
      "byte-level BPE, {} ids ({} merges, {} added tokens of which {} special), "
      "pre-tokenizer {}",
      t.vocab_size, t.bpe->num_merges(), t.num_added, t.num_special, t.pre_tokenizer_name);
}

}  // namespace bw::tokenizer
