// `breakwater data prepare`: text to llm.c token shards (docs/data.md, "Preparing data").
//
//   documents (inputs.h) --batches--> parse JSONL and encode on N threads (tokenizer.h)
//       --in document order--> [document token, ids...] --> val or train ShardWriter
//
// Streaming: the inputs are read in batches of at most kBatchBytes, so memory stays bounded
// whatever their size. Deterministic: documents are encoded independently and written in input
// order, so the shard bytes do not depend on the thread count. The validation split is the first
// val_docs documents, or with val_fraction every document i for which ceil((i + 1) F) >
// ceil(i F) (about F of them, evenly spread, document 0 first). The output folder gets
// NAME_val_*.bin, NAME_train_*.bin and a copy of the tokenizer.json; on an error every shard this
// run wrote is removed again.
//
// Thread-safety: prepare() runs on the calling thread and its own worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bw::dataprep {

inline constexpr int64_t kDefaultShardTokens = 100'000'000;  // llm.c's fineweb.py
inline constexpr size_t kBatchBytes = size_t{32} << 20;
inline constexpr size_t kBatchDocs = 1 << 16;

struct PrepareOptions {
  std::string tokenizer;  // tokenizer.json
  std::string out_dir;
  std::vector<std::string> inputs;     // text files, JSONL files, folders
  std::optional<int64_t> val_docs;     // first N documents are validation
  std::optional<double> val_fraction;  // or this fraction, evenly spread
  int64_t shard_tokens = kDefaultShardTokens;
  int threads = 0;         // 0: all hardware threads
  std::string name;        // "": the output folder's name, or "data"
  bool overwrite = false;  // replace shards of an earlier run in out_dir
};

struct SplitSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> shards;  // paths, in order
};

struct PrepareSummary {
  std::string name;
  std::string tokenizer;       // describe() of the tokenizer
  std::string document_token;  // e.g. "<|endoftext|> (50256)"
  int token_bytes = 2;         // 2: version 1 (uint16), 4: version 2 (uint32)
  SplitSummary val, train;
  int64_t files = 0;
  int64_t skipped_files = 0;
  int64_t bytes_read = 0;
  int64_t repaired_documents = 0;  // text documents with invalid UTF-8 (replaced by U+FFFD)
  int threads = 1;
  double seconds = 0;
};

struct Progress {
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t bytes_read = 0;
  int64_t total_bytes = 0;  // of all inputs, for a fraction done
  double seconds = 0;
};

// ConfigError for bad options or input (naming the file and line), after removing what it wrote.
// `progress` is called after each batch.
PrepareSummary prepare(const PrepareOptions& options,
                       const std::function<void(const Progress&)>& progress = {});

// Whether document `index` is validation under val_fraction `f` (the rule above).
bool is_val_by_fraction(int64_t index, double f);

}  // namespace bw::dataprep
