// A run's training data and the tokenizer it was made with (docs/data.md "Tokenizer"): the
// tokenizer is data.tokenizer when set, else the tokenizer.json that `breakwater data prepare`
// saves beside the shards of data.path (in the folder data.path names, or the folder of its file
// or glob), else none. With a tokenizer the data's vocabulary is the tokenizer's (its ids are
// then the ones checked as samples are read), the end-of-run sample is decoded to text and
// starts from the tokenizer's document token.
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

// Opens data.path (the default corpus when empty) and its tokenizer. ConfigError naming the file
// for a data.tokenizer that does not exist or does not load, or that raw-text data cannot use;
// a tokenizer.json found beside text data is not used (the data is bytes).
RunData open_run_data(const DataConfig& data);

// The run's model (model::resolve_config on the data's vocabulary, model.tie_embeddings). With
// a tokenizer, a model whose own vocabulary (a published size's, or init_from's config.json) is
// smaller than the tokenizer's is a ConfigError naming both numbers and the fix; the test sizes
// take the tokenizer's vocabulary.
model::GptConfig resolve_run_model(const RunConfig& config, const RunData& data);

}  // namespace bw::runtime
