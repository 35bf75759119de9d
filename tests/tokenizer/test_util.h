// Small tokenizer.json documents built in the tests, with no Python: the 256 byte-level
// characters, merges learned greedily from a training text (the most frequent adjacent pair of
// each word, as BPE training does, on words cut at spaces), and the pre-tokenizer, added tokens
// and post-processor of GPT-2 or Llama 3.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"

namespace bw::tokenizer::testing {

enum class Style { kGpt2, kLlama3 };

inline constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

inline nlohmann::json tiny_tokenizer(Style style, const std::string& training, int num_merges) {
  using nlohmann::json;
  json vocab = json::object();
  std::vector<std::string> id_to;
  for (int b = 0; b < 256; ++b) {
    const std::string s = bytes_to_chars(std::string(1, static_cast<char>(b)));
    vocab[s] = id_to.size();
    id_to.push_back(s);
  }
  // Words as lists of symbols (byte-level strings), each word once per occurrence.
  std::vector<std::vector<std::string>> words;
  std::string cur;
  const auto flush = [&] {
    if (cur.empty()) return;
    std::vector<std::string> w;
    for (char c : cur) w.push_back(bytes_to_chars(std::string(1, c)));
    words.push_back(w);
    cur.clear();
  };
  for (char c : training) {
    if (c == ' ') flush();
    cur += c;
  }
  flush();
  json merges = json::array();
  for (int m = 0; m < num_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> count;
    for (const auto& w : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) ++count[{w[i], w[i + 1]}];
    if (count.empty()) break;
    auto best = count.begin();
    for (auto it = count.begin(); it != count.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    merges.push_back(json::array({a, b}));
    if (!vocab.contains(a + b)) {
      vocab[a + b] = id_to.size();
      id_to.push_back(a + b);
    }
    for (auto& w : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(w[i]);
        }
      }
      w = out;
    }
  }
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["normalizer"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                {"merges", merges}};
  const auto add = [&](const std::string& content, bool special) {
    json t = {{"id", id_to.size()}, {"content", content}, {"single_word", false},
              {"lstrip", false},    {"rstrip", false},    {"normalized", !special},
              {"special", special}};
    id_to.push_back(content);
    j["added_tokens"].push_back(t);
    return id_to.size() - 1;
  };
  j["added_tokens"] = json::array();
  if (style == Style::kGpt2) {
    j["pre_tokenizer"] = {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", true}};
    j["post_processor"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", false},
                           {"use_regex", true}};
    add("<|endoftext|>", true);
  } else {
    j["model"]["ignore_merges"] = true;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", kLlama3Regex}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         {{"type", "ByteLevel"},
                                                          {"add_prefix_space", false},
                                                          {"trim_offsets", true},
                                                          {"use_regex", false}}})}};
    const auto bos = add("<|begin_of_text|>", true);
    add("<|end_of_text|>", true);
    json special = {
        {"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}}};
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", special}};
  }
  return j;
}

inline std::string sample_text() {
  return "The quick brown fox jumps over the lazy dog. It's 2024, and we'll see 12345 "
         "numbers; don't they're I've I'm you'd. Ünïcödé naïve café — 日本語のテキスト, "
         "русский текст, ελληνικά, العربية, हिन्दी. Emoji 👩🏿‍🔬 🇫🇷 1️⃣.\n\n\tTabs  and  "
         " "
         "spaces\r\n. the the the quick quick fox fox fox dog dog.";
}

}  // namespace bw::tokenizer::testing
