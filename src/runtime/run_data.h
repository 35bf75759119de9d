// A run's data splits and the tokenizer each was made with (docs/data.md "The data's
// tokenizer"). One rule, in open_split, decides a split's tokenizer and so its vocabulary, for the
// training split (data.path) and the validation split (data.val_path) alike: data.tokenizer when
// set, else the tokenizer.json that `breakwater data prepare` saves beside the split's shards (in
// the folder the path names, or the folder of its file or glob), else none. With a tokenizer the
// split's vocabulary is the tokenizer's (its ids are then the ones checked as samples are read),
// and the end-of-run sample is decoded to text and starts from the tokenizer's document token;
// without one it is the format's (256 for bytes, 50257 or 128256 for .bin versions 1 and 2).
//
// Thread-safety: pure functions over the file system.
#pragma once

#include <optional>
#include <string>

#include "data/dataset.h"
#include "model/gpt.h"
#include "runtime/config.h"
#include "tokenizer/tokenizer.h"

namespace bw::runtime {

// The tokenizer.json beside a data path's shards (see above), or "" when there is none.
std::string tokenizer_beside(const std::string& data_path);

struct RunData {
  data::TokenDataset dataset;     // vocab_size() is the tokenizer's when there is one
  std::string tokenizer_path;     // "" = no tokenizer known
  std::optional<tokenizer::Tokenizer> tokenizer;
};

// Opens the split at `path` (a file, folder or glob, data::TokenDataset::open) with its tokenizer
// by the rule above; `data` gives data.tokenizer. ConfigError naming the file for a
// data.tokenizer that does not exist or does not load, or that raw-text data cannot use; a
// tokenizer.json found beside text data is not used (the data is bytes).
RunData open_split(const std::string& path, const DataConfig& data);

// The training split: open_split of data.path (the default corpus when empty).
RunData open_run_data(const DataConfig& data);

// The token each document of llm.c's .bin files starts with: GPT-2's <|endoftext|> (version 1),
// Llama 3's <|begin_of_text|> (version 2).
inline constexpr int kGpt2EndOfText = 50256;
inline constexpr int kLlama3BeginOfText = 128000;

// A split's vocabulary and where it comes from, for messages: "1500 (the tokenizer
// data/fort/tokenizer.json)", "50257 (llm.c .bin version 1 tokens, no tokenizer.json beside
// them)", "256 (raw bytes)".
std::string vocabulary_of(const RunData& split);

// The run's model (model::resolve_config on the data's vocabulary, model.tie_embeddings). With
// a tokenizer, a model whose own vocabulary (a published size's, or init_from's config.json) is
// smaller than the tokenizer's is a ConfigError naming both numbers and the fix; the test sizes
// take the tokenizer's vocabulary.
model::GptConfig resolve_run_model(const RunConfig& config, const RunData& data);

}  // namespace bw::runtime
