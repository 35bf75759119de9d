// Every unsupported or malformed tokenizer.json is one ConfigError naming the file, exactly what
// is unsupported or wrong, and (for unsupported kinds) what is supported.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace bw::tokenizer {
namespace {
using nlohmann::json;
using testing::Style;

std::string error_of(const json& j) {
  try {
    Tokenizer::from_json(j.dump(), "bad.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

struct Case {
  std::string name;
  std::function<void(json&)> edit;
  std::string phrase;
  bool unsupported = true;
};

TEST(TokenizerErrors, EachIsOneMessageNamingWhatAndWhatIsSupported) {
  const std::vector<Case> cases = {
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, "the model WordPiece"},
      {"unigram", [](json& j) { j["model"]["type"] = "Unigram"; }, "the model Unigram"},
      {"wordlevel", [](json& j) { j["model"]["type"] = "WordLevel"; }, "the model WordLevel"},
      {"nfc",
       [](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "the normalizer NFC"},
      {"lowercase seq",
       [](json& j) {
         j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}};
       },
       "the normalizer Sequence"},
      {"whitespace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "the pre-tokenizer Whitespace"},
      {"metaspace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "the pre-tokenizer Metaspace"},
      {"no pre", [](json& j) { j["pre_tokenizer"] = nullptr; }, "without a pre-tokenizer"},
      {"split only",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"Regex", "a"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}};
       },
       "a pre-tokenizer without ByteLevel"},
      {"bytelevel first",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "ByteLevel"}, {"add_prefix_space", false}},
                                 {{"type", "Digits"}, {"individual_digits", true}}}}};
       },
       "pre-tokenizer Digits after ByteLevel"},
      {"digits",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Digits"}, {"individual_digits", true}},
                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
       },
       "the pre-tokenizer Digits"},
      {"bert post",
       [](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       "the post-processor BertProcessing"},
      {"roberta post",
       [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "the post-processor RobertaProcessing"},
      {"wordpiece decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "the decoder WordPiece"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "BPE dropout"},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "continuing_subword_prefix \"##\""},
      {"suffix", [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       "end_of_word_suffix \"</w>\""},
      {"truncation",
       [](json& j) {
         j["truncation"] = {{"max_length", 512}};
       },
       "\"truncation\""},
      {"padding",
       [](json& j) {
         j["padding"] = {{"strategy", "BatchLongest"}};
       },
       "\"padding\""},
      {"version", [](json& j) { j["version"] = "2.0"; }, "has version \"2.0\"", false},
      {"merge without space", [](json& j) { j["model"]["merges"] = {"ab"}; }, "merge 0 is \"ab\"",
       false},
      {"merge of three", [](json& j) { j["model"]["merges"] = {"a b c"}; }, "merge 0 is", false},
      {"merge out of vocab",
       [](json& j) {
         j["model"]["merges"] = json::array({json::array({"a", "zz"})});
       },
       "needs \"zz\", which is not in the vocabulary", false},
      {"merged out of vocab",
       [](json& j) {
         j["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"b", "b"})});
       },
       "needs \"bb\"", false},
      {"negative id", [](json& j) { j["model"]["vocab"]["a"] = -1; }, "has id -1", false},
      {"no vocab", [](json& j) { j["model"].erase("vocab"); }, "no \"vocab\" object", false},
      {"unk missing", [](json& j) { j["model"]["unk_token"] = "<unk>"; },
       "unk_token \"<unk>\" is not in the vocabulary", false},
      {"bad regex",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"},
                                  {"pattern", {{"Regex", "(a"}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}},
                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
       },
       "PCRE2 cannot compile the regex /(a/", false},
      {"bad behavior",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"},
                                  {"pattern", {{"Regex", "a"}}},
                                  {"behavior", "Sideways"},
                                  {"invert", false}},
                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
       },
       "behavior \"Sideways\"", false},
      {"template without ids",
       [](json& j) {
         j["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
             {"special_tokens", json::object()}};
       },
       "uses \"<s>\" but its special_tokens has no ids", false},
      {"added without content",
       [](json& j) {
         j["added_tokens"] = {{{"id", 3}}};
       },
       "added token 0 needs a string \"content\"", false},
  };
  for (const Case& c : cases) {
    json j = testing::tiny_tokenizer(Style::kGpt2, "ab ab a b", 2);
    c.edit(j);
    const std::string m = error_of(j);
    EXPECT_NE(m.find(c.phrase), std::string::npos) << c.name << ": " << m;
    EXPECT_EQ(m.rfind("tokenizer 'bad.json'", 0) == 0 || m.rfind("bad.json:", 0) == 0, true)
        << c.name << ": " << m;
    if (c.unsupported) {
      EXPECT_NE(m.find("is not supported; supported: byte-level BPE"), std::string::npos)
          << c.name << ": " << m;
    }
    EXPECT_EQ(m.find('\n'), std::string::npos) << c.name << ": one line: " << m;
  }
}

TEST(TokenizerErrors, FilesThatAreNotTokenizersAreRefused) {
  EXPECT_NE(std::string([] {
              try {
                Tokenizer::from_json("{not json", "x.json");
              } catch (const ConfigError& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .find("tokenizer 'x.json' is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of(json::array()).find("must hold a JSON object"), std::string::npos);
  EXPECT_NE(error_of(json::object()).find("has no \"model\" object"), std::string::npos);
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace bw::tokenizer
