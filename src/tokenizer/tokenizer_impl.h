// The parts of a loaded tokenizer (tokenizer.h), shared by the loader (tokenizer_json.cc), the
// encoder and the decoder (tokenizer.cc). Internal to the module.
//
// Thread-safety: immutable once built.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace bw::tokenizer {

// One item of TemplateProcessing's "single" template: the text ($A) or special-token ids.
struct TemplatePiece {
  bool is_sequence = false;
  std::vector<TokenId> ids;
};

struct TokenizerImpl {
  std::string where;  // the file, for messages
  std::unique_ptr<AddedVocabulary> added;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<Bpe> bpe;
  std::vector<TemplatePiece> single;  // empty: no template
  bool byte_level_decoder = true;     // false: decoder null, tokens joined with spaces

  // Per id: the token string (as in the file), whether it exists, its decoded bytes, special.
  std::vector<std::string> strings;
  std::vector<std::string> bytes;
  std::vector<uint8_t> known;
  std::vector<uint8_t> special;
  std::unordered_map<std::string, TokenId> ids;  // token string -> id (added tokens first)
  uint32_t vocab_size = 0;
  size_t num_added = 0;
  size_t num_special = 0;
  std::optional<TokenId> document_token;
  std::string pre_tokenizer_name;
};

}  // namespace bw::tokenizer
