// One rule decides the vocabulary of both splits of a run (runtime/run_data.h, open_split): for
// tokenizers of several sizes (a few hundred ids, 1500, the edges of uint16 shards, more than
// Llama 3's 128256, and GPT-2's 50257, where the format's default happens to agree), `data
// prepare` writes a training and a validation split with the tokenizer beside them; the training
// split (open_run_data) and the validation split (open_validation) each have the tokenizer's
// vocabulary, one more than its largest id, computed here from the tokenizer.json. A validation
// split of another tokenizer is refused, naming both vocabularies and where each comes from. End
// to end, `train` with data.val_path on the validation shards of a 1500-id tokenizer reports a
// validation loss.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "core/error.h"
#include "data/dataset.h"
#include "runtime/run_data.h"
#include "runtime/worker.h"  // open_validation
#include "../tokenizer/test_util.h"  // tiny_tokenizer

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
namespace tt = bw::tokenizer::testing;

std::string work_dir() {
  static const std::string dir = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_split_vocab_{}", getpid())).string());
  return dir;
}

// A GPT-2-style tokenizer; with `vocab` > 0 one more special token of the model's vocabulary
// takes id vocab - 1, so the tokenizer has `vocab` ids (as Llama 3's reserved tokens pad its
// vocabulary; `tokenizers` takes an added token's id from the model's vocabulary). Returns the
// file and one more than the largest id its JSON names (the oracle of vocab_size()).
std::pair<std::string, int64_t> tokenizer_of(int vocab) {
  auto j = tt::tiny_tokenizer(tt::Style::kGpt2, tt::sample_text(), 200);
  if (vocab > 0) {
    j["model"]["vocab"]["<|reserved|>"] = vocab - 1;
    j["added_tokens"].push_back({{"id", vocab - 1},
                                 {"content", "<|reserved|>"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  int64_t largest = 0;
  for (const auto& [k, v] : j["model"]["vocab"].items()) largest = std::max<int64_t>(largest, v);
  for (const auto& t : j["added_tokens"]) largest = std::max<int64_t>(largest, t["id"]);
  const auto path = fs::path(work_dir()) / fmt::format("tokenizer_{}.json", vocab);
  std::ofstream(path) << j.dump();
  return {path.string(), largest + 1};
}

// 60 JSONL documents of the sample text.
const std::string& corpus() {
  static const std::string p = [] {
    const auto path = (fs::path(work_dir()) / "corpus.jsonl").string();
    std::ofstream out(path);
    for (int i = 0; i < 60; ++i) {
      out << nlohmann::json{{"text", fmt::format("{} {}", i, tt::sample_text())}}.dump() << "\n";
    }
    return path;
  }();
  return p;
}

// `data prepare --val-docs 20 --name fort` into DIR with the tokenizer; returns DIR.
std::string prepare(const std::string& name, const std::string& tokenizer) {
  const auto dir = (fs::path(work_dir()) / name).string();
  const auto r = bw::testing::run_cli({"data", "prepare", "--tokenizer", tokenizer, "--val-docs",
                                       "20", "--name", "fort", "--out", dir, corpus()},
                                      dir + ".log", 120);
  EXPECT_EQ(r.status, 0) << r.output;
  return dir;
}

RunConfig splits(const std::string& dir) {
  RunConfig c;
  c.data.path = dir + "/fort_train_*.bin";
  c.data.val_path = dir + "/fort_val_*.bin";
  c.train.eval_every = 1;
  c.train.eval_batches = 1;
  c.pipeline.microbatches = 2;
  c.pipeline.microbatch_size = 2;
  return c;
}

class SplitVocab : public ::testing::TestWithParam<int> {};

TEST_P(SplitVocab, BothSplitsHaveTheTokenizersVocabulary) {
  const auto [tok, want] = tokenizer_of(GetParam());
  const auto dir = prepare(fmt::format("v{}", GetParam()), tok);
  const RunConfig config = splits(dir);
  const RunData training = open_run_data(config.data);
  EXPECT_EQ(training.tokenizer_path, dir + "/tokenizer.json");
  EXPECT_EQ(training.dataset.vocab_size(), want);
  try {
    const auto val = open_validation(config, 8, training.dataset.vocab_size());
    EXPECT_EQ(val.dataset().vocab_size(), want);
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "tokenizer of " << want << " ids: " << e.what();
  }
}

// A few hundred ids (200 merges on the sample text), 1500, GPT-2's, the largest and the
// smallest vocabulary of uint16 and uint32 shards, Llama 3's, and more than Llama 3's.
INSTANTIATE_TEST_SUITE_P(Sizes, SplitVocab,
                         ::testing::Values(0, 1500, 50257, 65536, 65537, 128256, 150000),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("merges_only")
                                                  : fmt::format("vocab_{}", info.param);
                         });

TEST(SplitVocab, AValidationSplitOfAnotherTokenizerIsRefusedNamingBoth) {
  const auto [small, small_vocab] = tokenizer_of(1500);
  const auto [large, large_vocab] = tokenizer_of(3000);
  RunConfig config = splits(prepare("mixed_a", small));
  config.data.val_path = prepare("mixed_b", large) + "/fort_val_*.bin";
  const RunData training = open_run_data(config.data);
  try {
    open_validation(config, 8, training.dataset.vocab_size());
    ADD_FAILURE() << "a validation split of " << large_vocab << " ids for training data of "
                  << small_vocab << " was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("a vocabulary of {} (the tokenizer {}/tokenizer.json)",
                                    large_vocab, fs::path(config.data.val_path).parent_path().string())),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(fmt::format("has {} (the tokenizer", small_vocab)), std::string::npos)
        << what;
  }
  // data.tokenizer names the tokenizer of both splits: the same rule, the same vocabulary.
  config.data.tokenizer = large;
  const RunData named = open_run_data(config.data);
  EXPECT_EQ(named.dataset.vocab_size(), large_vocab);
  const auto val = open_validation(config, 8, named.dataset.vocab_size());
  EXPECT_EQ(val.dataset().vocab_size(), large_vocab);
}

// The command of the report that found the defect, end to end.
TEST(SplitVocab, TrainingWithTheValidationShardsOfA1500IdTokenizerReportsAValidationLoss) {
  const auto dir = prepare("e2e", tokenizer_of(1500).first);
  const auto out = (fs::path(work_dir()) / "e2e_run").string();
  const auto r = bw::testing::run_cli(
      {"train", "--quiet", "--devices=1", "--model.name=tiny", "--data.path=" + dir +
       "/fort_train_*.bin", "--data.val_path=" + dir + "/fort_val_*.bin", "--train.steps=2",
       "--train.eval_every=1", "--train.eval_batches=1", "--train.sample_tokens=0",
       "--pipeline.microbatches=2", "--pipeline.microbatch_size=2", "--train.out_dir=" + out},
      out + ".log", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream metrics(fs::path(out) / "metrics.jsonl");
  int with_val = 0;
  for (std::string line; std::getline(metrics, line);) {
    with_val += nlohmann::json::parse(line).contains("val_loss") ? 1 : 0;
  }
  EXPECT_EQ(with_val, 2) << "validation losses after steps 1 and 2";
}

}  // namespace
}  // namespace bw::runtime
