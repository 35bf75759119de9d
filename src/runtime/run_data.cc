#include "runtime/run_data.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace bw::runtime {

namespace fs = std::filesystem;

std::string tokenizer_beside(const std::string& data_path) {
  if (data_path.empty()) return "";
  std::error_code ec;
  const fs::path p(data_path);
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const fs::path tok = (dir.empty() ? fs::path(".") : dir) / "tokenizer.json";
  return fs::is_regular_file(tok, ec) ? (dir.empty() ? fs::path("tokenizer.json") : tok).string()
                                      : "";
}

RunData open_split(const std::string& path, const DataConfig& data) {
  auto dataset = data::TokenDataset::open(path);
  std::string tok_path = data.tokenizer;
  if (tok_path.empty()) {
    if (dataset.format() != data::TokenDataset::Format::kTokenBin) return {dataset, "", {}};
    tok_path = tokenizer_beside(path);
    if (tok_path.empty()) return {dataset, "", {}};
  } else {
    std::error_code ec;
    if (!fs::is_regular_file(tok_path, ec)) {
      throw ConfigError(fmt::format(
          "data.tokenizer '{}' is not a file; pass the tokenizer.json the data was prepared "
          "with, or drop data.tokenizer",
          tok_path));
    }
  }
  auto tok = tokenizer::Tokenizer::from_file(tok_path);
  auto checked = dataset.with_vocab(static_cast<int>(tok.vocab_size()), tok_path);
  return {checked, tok_path, tok};
}

RunData open_run_data(const DataConfig& data) {
  return open_split(data.path.empty() ? data::default_corpus_path() : data.path, data);
}

std::string vocabulary_of(const RunData& split) {
  const int vocab = split.dataset.vocab_size();
  if (split.tokenizer) return fmt::format("{} (the tokenizer {})", vocab, split.tokenizer_path);
  if (split.dataset.format() == data::TokenDataset::Format::kText) {
    return fmt::format("{} (raw bytes)", vocab);
  }
  return fmt::format("{} (llm.c .bin version {} tokens, no tokenizer.json beside them)", vocab,
                     vocab == data::kGpt2Vocab ? 1 : 2);
}

model::GptConfig resolve_run_model(const RunConfig& config, const RunData& data) {
  const auto& m = config.model;
  if (data.tokenizer) {
    // Resolved on the smallest vocabulary, a model shows its own: a test size takes it (2), a
    // published size or a config.json keeps its own.
    const auto own = model::resolve_config(m.family, m.name, m.seq_len, m.init_from, 2);
    const int64_t need = data.tokenizer->vocab_size();
    if (own.vocab_size != 2 && own.vocab_size < need) {
      throw ConfigError(fmt::format(
          "model '{}' has a vocabulary of {} ids but the tokenizer {} has {}; train a test size "
          "(model.name = \"tiny\" or \"small\" take the tokenizer's vocabulary), a model whose "
          "vocabulary holds {} ids, or prepare the data with the model's own tokenizer",
          own.name, own.vocab_size, data.tokenizer_path, need, need));
    }
  }
  auto out = model::resolve_config(m.family, m.name, m.seq_len, m.init_from,
                                   data.dataset.vocab_size());
  if (m.tie_embeddings) out.tie_embeddings = true;  // gpt: tied on request
  return out;
}

}  // namespace bw::runtime
