// Token datasets: raw text (one byte = one token, vocab 256) and llm.c / nanoGPT `.bin` token
// files (a header of 256 little-endian int32: magic 20240520, version, token count; then the
// tokens). Files are memory-mapped, so opening a multi-gigabyte `.bin` is instant and every
// process that opens it shares the page cache.
//
// Invariants: a TokenDataset is immutable after open; copies share the same storage and are safe
// to read from many threads. Every token read through copy_tokens() is checked against
// vocab_size(), so a corrupt file is a ConfigError, never an out-of-range embedding index.
//
// Formats (docs/data.md):
//   `.bin` (by magic, or any file named *.bin): version 1 = uint16 GPT-2 tokens, vocab 50257;
//                  version 2 = uint32 tokens (llm.c's Llama-3 files), vocab 128256.
//   directory:     with `*.bin` files: those shards in name order, one token stream;
//                  otherwise the concatenation of its regular files in name order, skipping
//                  hidden files, symlinks and `*.dat` (the fortune index files), read as raw text.
//   a glob (`*`, `?`, `[`) naming no existing file: the `.bin` shards it matches, in name order.
//   anything else: raw bytes.
// A dataset of several shards is one token stream: token i of the stream is token i - start(s)
// of the shard s holding it; a sample window may span two shards (as llm.c's loader reads them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bw::data {

inline constexpr int32_t kTokenBinMagic = 20240520;
inline constexpr int kTokenBinHeaderInts = 256;
inline constexpr int kTextVocab = 256;
inline constexpr int kGpt2Vocab = 50257;
inline constexpr int kLlama3Vocab = 128256;

// Read-only bytes that outlive every TokenDataset copy referring to them (a mapping or a buffer).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual const uint8_t* data() const = 0;
  virtual int64_t size() const = 0;
};

class TokenDataset {
 public:
  enum class Format { kText, kTokenBin };

  // Opens `path` (file or directory, see above). Missing, unreadable or empty inputs, a `.bin`
  // with a wrong magic or version, and a header whose token count disagrees with the file size
  // are ConfigErrors naming the file and the numbers.
  static TokenDataset open(const std::string& path);
  // Raw text held in memory; `name` is used in messages.
  static TokenDataset from_text(std::string name, std::string text);

  int64_t num_tokens() const { return num_tokens_; }
  int vocab_size() const { return vocab_size_; }
  Format format() const { return format_; }
  const std::string& path() const { return path_; }
  // What the corpus holds, to compare copies on different hosts (docs/multihost.md "Data"):
  // "{tokens} tokens of vocabulary {vocab}, CRC-32C {crc of the token bytes}". One pass over the
  // tokens (several GB/s).
  std::string content_digest() const;

  // Token i (0 <= i < num_tokens), not checked against the vocabulary.
  int64_t token(int64_t i) const;
  // Copies tokens [first, first + count) into out; a token >= vocab_size() is a ConfigError
  // naming the file and position.
  void copy_tokens(int64_t first, int64_t count, int64_t* out) const;

  // The same tokens checked against a vocabulary of `vocab` ids instead of the format's default
  // (a tokenizer's, data/tokenized.h). ConfigError naming `source` if the token width cannot
  // hold it or the data is raw text.
  TokenDataset with_vocab(int vocab, const std::string& source) const;

  // The files the tokens come from, in stream order (one for a single file, the text directory's
  // name for a text directory).
  std::vector<std::string> files() const;

  // Used by the format readers (token_bin.cc, text.cc, shards.cc); not for callers.
  TokenDataset(std::string path, Format format, std::shared_ptr<const ByteSource> bytes,
               int64_t offset, int token_bytes, int64_t num_tokens, int vocab_size);
  // One token stream from `parts` (token files of one version) in order; `name` is the
  // directory or glob they were found by.
  static TokenDataset concat(std::string name, const std::vector<TokenDataset>& parts);

 private:
  struct Segment {
    std::string path;
    std::shared_ptr<const ByteSource> bytes;
    const uint8_t* tokens;  // into bytes, at the first token
    int64_t first;          // stream position of its first token
    int64_t num_tokens;
  };
  TokenDataset() = default;
  const Segment& segment_of(int64_t i) const;

  std::string path_;
  Format format_ = Format::kText;
  std::shared_ptr<const std::vector<Segment>> segments_;  // in stream order, shared by copies
  int token_bytes_ = 1;                                   // 1 (text), 2 or 4 (.bin)
  int64_t num_tokens_ = 0;
  int vocab_size_ = 0;
};

// The default corpus: the text of Debian's `fortunes` package, as a directory that open() reads
// directly. ConfigError with the fix (install `fortunes`, or pass a data path) if absent.
std::string default_corpus_path();

// Format readers behind TokenDataset::open (exposed for tests).
bool has_token_bin_magic(const ByteSource& bytes);
TokenDataset open_token_bin(const std::string& path, std::shared_ptr<const ByteSource> bytes);
TokenDataset open_text_directory(const std::string& path);
// The `.bin` shards of a directory (none: an empty vector) or of a glob, in name
// order. A glob that matches nothing is a ConfigError.
std::vector<std::string> bin_files_in_directory(const std::string& dir);
std::vector<std::string> expand_glob(const std::string& pattern);
bool is_glob(const std::string& path);
TokenDataset open_shards(const std::string& name, const std::vector<std::string>& files);

// Maps a whole regular file read-only; ConfigError if missing, unreadable or empty.
std::shared_ptr<const ByteSource> map_file(const std::string& path);

// Writes an llm.c `.bin` file (version 1, uint16 tokens): for tests and tools.
void write_token_bin(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace bw::data
