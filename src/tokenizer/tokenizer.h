// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2, Llama 3 and the
// tokenizers trained like them), giving the ids `tokenizers` gives (docs/tokenizer.md):
//
//   auto tok = bw::tokenizer::Tokenizer::from_file("tokenizer.json");
//   std::vector<uint32_t> ids = tok.encode("Hello world");       // no BOS; see EncodeOptions
//   std::string text = tok.decode(ids);
//   auto many = tok.encode_batch(docs, /*threads=*/8);           // same ids whatever the count
//
// Encoding is, as in `tokenizers`: added and special tokens are split out of the text
// (added_tokens.h), the rest is pre-tokenized (pre_tokenizer.h) and each pre-token is merged by
// the BPE model (bpe.h), with a per-thread cache of the words seen; the post-processor's template
// adds its special tokens when asked. Bytes that are not valid UTF-8 are replaced by U+FFFD first
// (utf8.h): the ids are those `tokenizers` gives for `bytes.decode("utf-8", "replace")`.
//
// Supported (anything else is one ConfigError naming what is unsupported and what is): model BPE
// (no dropout, byte_fallback, continuing_subword_prefix or end_of_word_suffix; unk_token,
// fuse_unk, ignore_merges, merges as "a b" strings or [a, b] lists); normalizer null; pre-
// tokenizer ByteLevel, Split, or a Sequence of Splits ending in ByteLevel; post-processor null,
// ByteLevel, TemplateProcessing or a Sequence of them; decoder null or ByteLevel; truncation and
// padding null.
//
// Thread-safety: a Tokenizer is immutable and cheap to copy (shared state); encode(), decode()
// and encode_batch() may be called from any number of threads. A Session is one thread's scratch
// and word cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bw::tokenizer {

using TokenId = uint32_t;

struct EncodeOptions {
  // Apply the post-processor's template (Llama 3: <|begin_of_text|> before the text), as
  // `tokenizers`' encode(add_special_tokens=True) does. Off by default.
  bool add_special_tokens = false;
};

struct TokenizerImpl;

class Tokenizer {
 public:
  // Reads and checks a tokenizer.json; ConfigError naming the file and what is wrong.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text; `where` names it in messages.
  static Tokenizer from_json(std::string_view json, std::string_view where);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Each document encoded as by encode(), on `threads` threads (0: all hardware threads).
  std::vector<std::vector<TokenId>> encode_batch(std::span<const std::string_view> docs,
                                                 int threads = 0,
                                                 const EncodeOptions& options = {}) const;

  // Text of `ids` through the ByteLevel decoder, invalid UTF-8 replaced by U+FFFD (what
  // `tokenizers`' decode returns). Unknown ids are skipped, as there.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;
  // The raw bytes of `ids` (no UTF-8 repair): decode_bytes(encode(s)) == s for valid UTF-8 s
  // without added tokens that strip spaces, whatever the bytes.
  std::string decode_bytes(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // One more than the largest id (model vocabulary and added tokens).
  uint32_t vocab_size() const;
  size_t num_merges() const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(TokenId id) const;
  bool is_special(TokenId id) const;

  // The token that starts each document in training data (as llm.c's data scripts write it):
  // the special token the post-processor's template puts before the text (Llama 3's
  // <|begin_of_text|>), else the added token <|endoftext|> (GPT-2), else <|begin_of_text|>;
  // nullopt when there is none.
  std::optional<TokenId> document_token() const;

  // "byte-level BPE, 50257 ids (50000 merges, 1 added token), pre-tokenizer ByteLevel(GPT-2)".
  std::string describe() const;

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  friend class Session;
  std::shared_ptr<const TokenizerImpl> impl_;
};

// One thread's encoding state: regex scratch, merge buffers and a cache of the words it has
// merged. Not thread-safe; use one per thread and keep it across calls to reuse the cache.
class Session {
 public:
  explicit Session(const Tokenizer& tok);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& options = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace bw::tokenizer
