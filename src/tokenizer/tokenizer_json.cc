// Reading a Hugging Face tokenizer.json into a TokenizerImpl: the model, added tokens, pre-
// tokenizer, post-processor and decoder, each checked against what this module supports, with
// the id rules of `tokenizers` (tokenizer/serialization.rs, added_vocabulary.rs add_tokens).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace bw::tokenizer {
namespace {

using json::Json;

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kSupported =
    "supported: byte-level BPE (model BPE; normalizer null; pre-tokenizer ByteLevel, or a "
    "Sequence of Split ending in ByteLevel; decoder ByteLevel; post-processor ByteLevel or "
    "TemplateProcessing), as GPT-2's and Llama 3's tokenizer.json";

class Loader {
 public:
  explicit Loader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(fmt::format("tokenizer '{}': {}", where_, what));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    fail(fmt::format("{} is not supported; {}", what, kSupported));
  }

  std::string type_of(const Json& j, const std::string& what) const {
    if (!j.is_object()) fail(fmt::format("{} must be a JSON object, got {}", what, j.type_name()));
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) fail(fmt::format("{} has no string \"type\"", what));
    return it->get<std::string>();
  }

  bool get_bool(const Json& j, const char* key, bool fallback, const std::string& what) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(fmt::format("{}: \"{}\" must be true or false", what, key));
    return it->get<bool>();
  }

  const Json* get_string_or_null(const Json& j, const char* key, const std::string& what) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    if (!it->is_string()) fail(fmt::format("{}: \"{}\" must be a string or null", what, key));
    return &*it;
  }

  void check_top(const Json& doc) const {
    if (!doc.is_object()) fail("the file must hold a JSON object");
    if (auto it = doc.find("version"); it != doc.end() && !(it->is_string() && *it == "1.0"))
      fail(fmt::format("has version {}; the supported tokenizer.json version is \"1.0\"",
                       it->dump()));
    for (const char* key : {"truncation", "padding"}) {
      auto it = doc.find(key);
      if (it != doc.end() && !it->is_null())
        unsupported(
            fmt::format("\"{}\" (set in the file; encoding here never truncates or pads, "
                        "set it to null)",
                        key));
    }
    if (auto it = doc.find("normalizer"); it != doc.end() && !it->is_null()) {
      const std::string type = type_of(*it, "the normalizer");
      const bool empty_sequence = type == "Sequence" && it->contains("normalizers") &&
                                  (*it)["normalizers"].is_array() && (*it)["normalizers"].empty();
      if (!empty_sequence) unsupported(fmt::format("the normalizer {}", type));
    }
  }

  // model.vocab and model.merges into the BPE model and the id tables.
  void load_model(const Json& doc, TokenizerImpl& t) {
    auto it = doc.find("model");
    if (it == doc.end() || !it->is_object()) fail("has no \"model\" object");
    const Json& m = *it;
    std::string type = m.contains("type") ? type_of(m, "the model") : "BPE";
    if (type != "BPE") unsupported(fmt::format("the model {}", type));
    if (auto d = m.find("dropout"); d != m.end() && !d->is_null() && !(d->is_number() && *d == 0))
      unsupported("BPE dropout (randomised merges)");
    if (get_bool(m, "byte_fallback", false, "the model"))
      unsupported("BPE byte_fallback (SentencePiece-style <0xXX> tokens)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const Json* s = get_string_or_null(m, key, "the model");
      if (s != nullptr && !s->get<std::string>().empty())
        unsupported(fmt::format("BPE {} \"{}\"", key, s->get<std::string>()));
    }
    auto v = m.find("vocab");
    if (v == m.end() || !v->is_object()) fail("the model has no \"vocab\" object");
    model_vocab_.reserve(v->size());
    uint64_t max_id = 0;
    for (auto e = v->begin(); e != v->end(); ++e) {
      if (!e->is_number_unsigned() || e->get<uint64_t>() > 0xFFFFFFF0u)
        fail(fmt::format("vocabulary entry {} has id {}; ids are integers in [0, 2^32 - 16]",
                         Json(e.key()).dump(), e->dump()));
      const auto id = static_cast<TokenId>(e->get<uint64_t>());
      model_vocab_[e.key()] = id;
      max_id = std::max<uint64_t>(max_id, id);
    }
    if (model_vocab_.empty()) fail("the model's vocabulary is empty");
    model_size_ = model_vocab_.size();
    t.strings.resize(max_id + 1);
    t.known.assign(max_id + 1, 0);
    BytesToId bytes_vocab;
    for (const auto& [token, id] : model_vocab_) {
      t.strings[id] = token;
      t.known[id] = 1;
      if (auto b = chars_to_bytes(token)) bytes_vocab.emplace(std::move(*b), id);
    }

    std::vector<BpeMerge> merges;
    auto mm = m.find("merges");
    if (mm == m.end() || !mm->is_array()) fail("the model has no \"merges\" list");
    merges.reserve(mm->size());
    uint32_t rank = 0;
    for (size_t i = 0; i < mm->size(); ++i) {
      const Json& e = (*mm)[i];
      std::string a, b;
      if (e.is_string()) {  // "a b", the older form
        const std::string& s = e.get_ref<const std::string&>();
        if (s.starts_with("#version")) continue;
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail(fmt::format("merge {} is {}; a merge is \"a b\" (one space) or [\"a\", \"b\"]", i,
                           e.dump()));
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        fail(fmt::format("merge {} is {}; a merge is \"a b\" or [\"a\", \"b\"]", i, e.dump()));
      }
      const auto id_of = [&](const std::string& s) {
        auto f = model_vocab_.find(s);
        if (f == model_vocab_.end())
          fail(fmt::format("merge {} ({} + {}) needs {}, which is not in the vocabulary", i,
                           Json(a).dump(), Json(b).dump(), Json(s).dump()));
        return f->second;
      };
      merges.push_back({id_of(a), id_of(b), rank++, id_of(a + b)});
    }

    Bpe::Options o;
    o.ignore_merges = get_bool(m, "ignore_merges", false, "the model");
    o.fuse_unk = get_bool(m, "fuse_unk", false, "the model");
    if (const Json* unk = get_string_or_null(m, "unk_token", "the model")) {
      auto f = model_vocab_.find(unk->get<std::string>());
      if (f == model_vocab_.end())
        fail(fmt::format("unk_token {} is not in the vocabulary", unk->dump()));
      o.unk = f->second;
    }
    t.bpe = std::make_unique<Bpe>(std::move(bytes_vocab), merges, o);
  }

  // added_tokens, with ids as `tokenizers` assigns them: the model's id of the content, else the
  // next id after the model's vocabulary (the file's "id" is only a hint there too).
  void load_added(const Json& doc, TokenizerImpl& t) {
    std::map<TokenId, AddedToken> by_id;
    std::unordered_map<std::string, TokenId> added_ids;
    TokenId next_id = static_cast<TokenId>(model_size_);
    if (auto it = doc.find("added_tokens"); it != doc.end() && !it->is_null()) {
      if (!it->is_array()) fail("\"added_tokens\" must be a list");
      for (size_t i = 0; i < it->size(); ++i) {
        const Json& e = (*it)[i];
        const std::string what = fmt::format("added token {}", i);
        if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
          fail(fmt::format("{} needs a string \"content\"", what));
        AddedToken tok;
        tok.content = e["content"].get<std::string>();
        tok.single_word = get_bool(e, "single_word", false, what);
        tok.lstrip = get_bool(e, "lstrip", false, what);
        tok.rstrip = get_bool(e, "rstrip", false, what);
        tok.special = get_bool(e, "special", false, what);
        tok.normalized = get_bool(e, "normalized", !tok.special, what);
        if (tok.content.empty()) continue;
        if (auto f = added_ids.find(tok.content); f != added_ids.end()) {
          tok.id = f->second;
        } else if (auto g = model_vocab_.find(tok.content); g != model_vocab_.end()) {
          tok.id = g->second;
        } else {
          tok.id = next_id++;
        }
        added_ids[tok.content] = tok.id;
        by_id[tok.id] = tok;
      }
    }
    std::vector<AddedToken> tokens;
    for (auto& [id, tok] : by_id) tokens.push_back(tok);
    uint64_t size = t.strings.size();
    for (const auto& tok : tokens) size = std::max<uint64_t>(size, uint64_t{tok.id} + 1);
    t.strings.resize(size);
    t.known.resize(size, 0);
    t.special.assign(size, 0);
    for (const auto& [token, id] : model_vocab_) t.ids.emplace(token, id);
    std::unordered_map<std::string, bool> special_contents;
    for (const auto& tok : tokens) {
      t.strings[tok.id] = tok.content;  // an added token's content wins for its id
      t.known[tok.id] = 1;
      t.ids[tok.content] = tok.id;
      if (tok.special) special_contents[tok.content] = true;
    }
    for (size_t id = 0; id < size; ++id)
      if (t.known[id] && special_contents.count(t.strings[id])) t.special[id] = 1;
    t.vocab_size = static_cast<uint32_t>(size);
    t.num_added = tokens.size();
    t.num_special = special_contents.size();
    t.added = std::make_unique<AddedVocabulary>(std::move(tokens));
  }

  void add_pre_step(const Json& j, std::vector<PreTokenizer::Step>& steps, std::string& name) {
    const std::string type = type_of(j, "the pre-tokenizer");
    if (type == "Sequence") {
      auto it = j.find("pretokenizers");
      if (it == j.end() || !it->is_array())
        fail("pre-tokenizer Sequence has no list \"pretokenizers\"");
      for (const Json& sub : *it) add_pre_step(sub, steps, name);
      return;
    }
    if (!steps.empty() && steps.back().byte_level)
      unsupported(fmt::format("pre-tokenizer {} after ByteLevel (ByteLevel must come last)", type));
    PreTokenizer::Step step;
    if (type == "ByteLevel") {
      step.byte_level = true;
      step.add_prefix_space = get_bool(j, "add_prefix_space", true, "pre-tokenizer ByteLevel");
      if (get_bool(j, "use_regex", true, "pre-tokenizer ByteLevel")) {
        step.regex = std::make_shared<Regex>(kGpt2Pattern, false, where_);
        name += name.empty() ? "ByteLevel (GPT-2 pattern)" : " + ByteLevel (GPT-2 pattern)";
      } else {
        name += name.empty() ? "ByteLevel" : " + ByteLevel";
      }
    } else if (type == "Split") {
      auto p = j.find("pattern");
      if (p == j.end() || !p->is_object() || p->size() != 1 ||
          !(p->contains("Regex") || p->contains("String")) || !p->begin()->is_string())
        fail(
            "pre-tokenizer Split needs \"pattern\": {\"Regex\": \"...\"} or {\"String\": \"...\"}");
      const bool literal = p->contains("String");
      const std::string pattern = p->begin()->get<std::string>();
      step.regex = std::make_shared<Regex>(pattern, literal, where_);
      step.invert = get_bool(j, "invert", false, "pre-tokenizer Split");
      const std::string behavior = j.contains("behavior") && j["behavior"].is_string()
                                       ? j["behavior"].get<std::string>()
                                       : "";
      static const std::map<std::string, SplitBehavior> kBehaviors = {
          {"Isolated", SplitBehavior::kIsolated},
          {"Removed", SplitBehavior::kRemoved},
          {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
          {"MergedWithNext", SplitBehavior::kMergedWithNext},
          {"Contiguous", SplitBehavior::kContiguous}};
      auto b = kBehaviors.find(behavior);
      if (b == kBehaviors.end())
        fail(
            fmt::format("pre-tokenizer Split has behavior \"{}\"; one of Isolated, Removed, "
                        "MergedWithPrevious, MergedWithNext, Contiguous",
                        behavior));
      step.behavior = b->second;
      const std::string label = !literal && pattern == kLlama3Pattern ? "Split (Llama 3 pattern)"
                                : !literal && pattern == kGpt2Pattern ? "Split (GPT-2 pattern)"
                                                                      : "Split";
      name += name.empty() ? label : " + " + label;
    } else {
      unsupported(fmt::format("the pre-tokenizer {}", type));
    }
    steps.push_back(std::move(step));
  }

  void load_pre_tokenizer(const Json& doc, TokenizerImpl& t) {
    auto it = doc.find("pre_tokenizer");
    if (it == doc.end() || it->is_null())
      unsupported("a tokenizer without a pre-tokenizer (byte-level BPE needs ByteLevel)");
    std::vector<PreTokenizer::Step> steps;
    add_pre_step(*it, steps, t.pre_tokenizer_name);
    if (steps.empty() || !steps.back().byte_level)
      unsupported("a pre-tokenizer without ByteLevel (byte-level BPE needs it, last)");
    t.pre = std::make_unique<PreTokenizer>(std::move(steps));
  }

  void add_post(const Json& j, TokenizerImpl& t) {
    const std::string type = type_of(j, "the post-processor");
    if (type == "ByteLevel") return;  // only trims offsets; ids are unchanged
    if (type == "Sequence") {
      auto it = j.find("processors");
      if (it == j.end() || !it->is_array())
        fail("post-processor Sequence has no list \"processors\"");
      for (const Json& sub : *it) add_post(sub, t);
      return;
    }
    if (type != "TemplateProcessing") unsupported(fmt::format("the post-processor {}", type));
    if (!t.single.empty()) unsupported("two TemplateProcessing post-processors");
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array() || specials == j.end() || !specials->is_object())
      fail("post-processor TemplateProcessing needs \"single\" and \"special_tokens\"");
    bool has_sequence = false;
    for (const Json& piece : *single) {
      TemplatePiece tp;
      if (piece.is_object() && piece.contains("Sequence")) {
        const Json& s = piece["Sequence"];
        if (!s.is_object() || s.value("id", "") != "A")
          fail("post-processor TemplateProcessing: the single template's sequence must be $A");
        tp.is_sequence = true;
        has_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken") &&
                 piece["SpecialToken"].is_object() && piece["SpecialToken"].contains("id") &&
                 piece["SpecialToken"]["id"].is_string()) {
        const std::string name = piece["SpecialToken"]["id"].get<std::string>();
        auto st = specials->find(name);
        if (st == specials->end() || !st->is_object() || !st->contains("ids") ||
            !(*st)["ids"].is_array())
          fail(
              fmt::format("post-processor TemplateProcessing uses {} but its special_tokens has "
                          "no ids for it",
                          Json(name).dump()));
        for (const Json& id : (*st)["ids"]) {
          if (!id.is_number_unsigned() || id.get<uint64_t>() >= t.vocab_size)
            fail(
                fmt::format("post-processor TemplateProcessing: {} has id {}, outside the "
                            "vocabulary of {} ids",
                            Json(name).dump(), id.dump(), t.vocab_size));
          tp.ids.push_back(static_cast<TokenId>(id.get<uint64_t>()));
        }
      } else {
        fail(fmt::format("post-processor TemplateProcessing: unreadable template piece {}",
                         piece.dump()));
      }
      t.single.push_back(std::move(tp));
    }
    if (!has_sequence) fail("post-processor TemplateProcessing: the single template has no $A");
  }

  void load_post_and_decoder(const Json& doc, TokenizerImpl& t) {
    if (auto it = doc.find("post_processor"); it != doc.end() && !it->is_null()) add_post(*it, t);
    auto d = doc.find("decoder");
    if (d == doc.end() || d->is_null()) {
      t.byte_level_decoder = false;
    } else {
      const std::string type = type_of(*d, "the decoder");
      if (type != "ByteLevel") unsupported(fmt::format("the decoder {}", type));
    }
    t.bytes.resize(t.strings.size());
    for (size_t id = 0; id < t.strings.size(); ++id) {
      if (!t.known[id]) continue;
      auto b = t.byte_level_decoder ? chars_to_bytes(t.strings[id]) : std::nullopt;
      t.bytes[id] = b ? std::move(*b) : t.strings[id];
    }
  }

  void find_document_token(TokenizerImpl& t) {
    for (const TemplatePiece& p : t.single) {
      if (p.is_sequence) break;
      if (!p.ids.empty()) {
        t.document_token = p.ids.front();
        return;
      }
    }
    for (const char* name : {"<|endoftext|>", "<|begin_of_text|>"}) {
      auto it = t.ids.find(name);
      if (it != t.ids.end()) {
        t.document_token = it->second;
        return;
      }
    }
  }

 private:
  std::string where_;
  std::unordered_map<std::string, TokenId> model_vocab_;
  size_t model_size_ = 0;
};

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view where) {
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    throw ConfigError(fmt::format("tokenizer '{}' is not valid JSON: {}", where, e.what()));
  }
  auto t = std::make_shared<TokenizerImpl>();
  t->where = std::string(where);
  Loader l{std::string(where)};
  l.check_top(doc);
  l.load_model(doc, *t);
  l.load_added(doc, *t);
  l.load_pre_tokenizer(doc, *t);
  l.load_post_and_decoder(doc, *t);
  l.find_document_token(*t);
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(io::read_file(path, io::kMaxJsonBytes, "tokenizer.json"), path);
}

}  // namespace bw::tokenizer
