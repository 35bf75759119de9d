// Pre-tokenization: a piece of text (between added tokens) cut into the words BPE merges within.
// Supported, as `tokenizers` runs them (pre_tokenizers/split.rs, byte_level.rs, sequence.rs):
//   - Split: a regex (Oniguruma syntax, compiled on PCRE2: regex.h) or a literal, with behavior
//     Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous, and invert;
//   - ByteLevel: add_prefix_space (a space before each piece that lacks one), use_regex (GPT-2's
//     pattern, Isolated), then bytes to characters, which the encoder does implicitly by working
//     on bytes;
//   - Sequence of those, with exactly one ByteLevel, last (after it the pieces would be byte-level
//     characters, which no other step expects).
// Llama 3 is Sequence[Split(its pattern, Isolated), ByteLevel(use_regex = false)]; GPT-2 is
// ByteLevel(use_regex = true).
//
// Thread-safety: immutable after construction; run() on many threads, each with its own Scratch.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace bw::tokenizer {

// GPT-2's pattern (openai/gpt-2 encoder.py), which ByteLevel uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  struct Step {
    std::shared_ptr<const Regex> regex;  // null: the ByteLevel step without its regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool byte_level = false;  // the final ByteLevel step
    bool add_prefix_space = false;
  };

  // Per-thread state: one MatchScratch per regex, piece buffers per step.
  class Scratch {
   public:
    explicit Scratch(const PreTokenizer& p);

   private:
    friend class PreTokenizer;
    struct Piece {
      size_t start, end;
      bool is_match;
    };
    std::vector<std::unique_ptr<MatchScratch>> match_;
    std::vector<std::vector<Piece>> pieces_;
    std::vector<std::string> prefixed_;
  };

  explicit PreTokenizer(std::vector<Step> steps);

  // Calls word(piece) for each pre-token of `text`, in order (never empty).
  template <class Fn>
  void run(std::string_view text, Scratch& s, Fn&& word) const {
    apply(0, text, s, word);
  }

  const std::vector<Step>& steps() const { return steps_; }

 private:
  template <class Fn>
  void apply(size_t k, std::string_view text, Scratch& s, Fn& word) const {
    if (text.empty()) return;
    if (k == steps_.size()) {
      word(text);
      return;
    }
    const Step& step = steps_[k];
    if (step.byte_level && step.add_prefix_space && text[0] != ' ') {
      std::string& buf = s.prefixed_[k];
      buf.assign(1, ' ');
      buf.append(text);
      text = buf;  // valid until the next piece at this step; the recursion ends before that
    }
    if (!step.regex) {
      apply(k + 1, text, s, word);
      return;
    }
    if (step.behavior == SplitBehavior::kIsolated) {  // the common case, without a buffer
      size_t prev = 0;
      step.regex->for_each_match(text, *s.match_[k], [&](size_t a, size_t b) {
        if (prev < a) apply(k + 1, text.substr(prev, a - prev), s, word);
        apply(k + 1, text.substr(a, b - a), s, word);
        prev = b;
      });
      if (prev < text.size()) apply(k + 1, text.substr(prev), s, word);
      return;
    }
    std::vector<Scratch::Piece>& pieces = s.pieces_[k];
    split(step, text, s, pieces);
    for (const auto& p : pieces) apply(k + 1, text.substr(p.start, p.end - p.start), s, word);
  }

  // Offsets of the pieces of `text` under a non-Isolated behavior (normalizer.rs, split()).
  void split(const Step& step, std::string_view text, Scratch& s,
             std::vector<Scratch::Piece>& out) const;

  std::vector<Step> steps_;
};

}  // namespace bw::tokenizer
