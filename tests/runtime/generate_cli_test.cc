// `breakwater generate` and the decoded end-of-run sample, end to end:
//  - greedy generation (temperature 0) from a random Hugging Face folder made by transformers
//    (hf_oracle.py) gives exactly the ids of transformers' model.generate(do_sample=False), for
//    GPT-2 and for Llama tied and untied with GQA (skipped, one line, without transformers);
//  - a breakwater checkpoint generates too, with its data's tokenizer found on its own, and
//    prints text; `--tokenizer ''` and `--tokenizer=` both mean none (token ids);
//  - the sample of a short run on `data prepare` shards is text: the tokenizer's own decode of
//    the ids the run records in sample.json;
//  - bad input (a missing checkpoint, a tokenizer larger than the model's vocabulary, a
//    --max-tokens of 0 or below, a model smaller than its data's tokenizer) is one error line and
//    exit status 2.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <algorithm>

#include "cli_runner.h"
#include "oracle_client.h"
#include "test_util.h"  // tests/tokenizer: tiny_tokenizer
#include "tokenizer/tokenizer.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::read_text;

constexpr int kDeadlineS = 240;

fs::path root() {
  static const fs::path r = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_generate_test_{}", getpid())).string());
  return r;
}

struct Run {
  int status;
  std::string out, err;
};

// The CLI with stdout and stderr apart (the ids are on stdout, the rate on stderr).
Run run(const std::string& name, const std::string& args) {
  const auto out = root() / (name + ".out"), err = root() / (name + ".err");
  const std::string cmd = fmt::format("timeout -s KILL {} {} {} > {} 2> {}", kDeadlineS,
                                      BW_BINARY, args, out.string(), err.string());
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(out.string()), read_text(err.string())};
}

// Runs hf_oracle.py (through its server, oracle_client.h) with `args`, space-separated; 77
// = transformers is missing.
int oracle(const std::string& args) {
  return bw::testing::run_oracle(BW_PYTHON, BW_SOURCE_DIR "/tests/runtime/hf_oracle.py",
                                 bw::testing::split_words(args), (root() / "oracle.log").string(),
                                 /*append=*/true);
}

std::vector<int64_t> ids_of(const std::string& line) {
  std::vector<int64_t> ids;
  std::istringstream in(line);
  int64_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// One line of output that names the problem, and exit status 2.
void expect_one_error_line(const Run& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "no '" << needle << "' in: " << r.err;
}

struct HfCase {
  std::string name, family;
  bool tied;
  int kv_heads;
  double scale;  // of the random matrices: GPT-2's N(0, 0.02) repeats one token greedily
  // Of the embedding. A random tied Llama with small blocks repeats the prompt's last token (the
  // head's logits are dominated by e_t . e_t); blocks 20x larger than the embedding vary.
  double embed_scale;
};

class GenerateHf : public ::testing::TestWithParam<HfCase> {};

TEST_P(GenerateHf, GreedyIdsEqualTransformersGenerate) {
  const auto& c = GetParam();
  const fs::path dir = root() / c.name;
  fs::create_directories(dir);
  // 40 learned positions (gpt2) or 64 (llama): prompt and output fit, as transformers does not
  // slide a window.
  const int rc = oracle(fmt::format("make {} {} {} {} 7 96 40 {} {}", dir.string(), c.family,
                                    c.tied ? 1 : 0, c.kv_heads, c.scale, c.embed_scale));
  if (rc == 77) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  ASSERT_EQ(rc, 0) << "oracle failed; see " << root() / "oracle.log";
  const std::string prompt = "3,14,15,9,2,6";
  const int n = 30;
  ASSERT_EQ(oracle(fmt::format("generate {} {} {} {}", dir.string(), prompt, n,
                               (dir / "want.txt").string())),
            0)
      << "see " << root() / "oracle.log";
  const auto want = ids_of(read_text((dir / "want.txt").string()));
  ASSERT_FALSE(want.empty());
  std::string spaced = prompt;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  const auto r = run(c.name, fmt::format("generate --checkpoint {} --prompt '{}' --max-tokens {} "
                                         "--temperature 0",
                                         dir.string(), spaced, n));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto got = ids_of(r.out);
  EXPECT_EQ(got, want) << "breakwater: " << r.out << "transformers: "
                       << read_text((dir / "want.txt").string());
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  // Varied ids, so that the equality means something.
  EXPECT_GT(std::set<int64_t>(want.begin(), want.end()).size(), 3u) << read_text((dir / "want.txt").string());
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateHf,
                         ::testing::Values(HfCase{"gpt2", "gpt2", true, 4, 6.0, 6.0},
                                           HfCase{"llama_gqa", "llama", false, 2, 1.0, 1.0},
                                           HfCase{"llama_tied", "llama", true, 1, 20.0, 1.0}),
                         [](const auto& info) { return info.param.name; });

// A tokenizer.json (GPT-2 style; ids past 65535 when `wide`) and shards of a small corpus
// prepared with it in root()/NAME; returns the shard folder.
std::string prepared(const std::string& name, bool wide) {
  namespace tt = bw::tokenizer::testing;
  auto j = tt::tiny_tokenizer(tt::Style::kGpt2, tt::sample_text(), 200);
  if (wide) {
    for (auto& [k, v] : j["model"]["vocab"].items()) v = v.get<int>() + 70000;
    j["added_tokens"] = nlohmann::json::array();
    j["model"]["vocab"]["<|endoftext|>"] = 69999;
    j["added_tokens"].push_back({{"id", 69999}, {"content", "<|endoftext|>"}, {"special", true}});
  }
  const auto tok = root() / (name + "_tokenizer.json");
  std::ofstream(tok) << j.dump();
  const auto text = root() / (name + ".txt");
  {
    std::ofstream out(text);
    for (int i = 0; i < 40; ++i) out << tt::sample_text() << "\n";
  }
  const auto dir = root() / name;
  const auto r = run(name + "_prepare", fmt::format("data prepare --tokenizer {} --out {} {}",
                                                    tok.string(), dir.string(), text.string()));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  return dir.string();
}

TEST(GenerateCheckpoint, TrainedSampleIsTheTokenizersDecodeAndGenerateFindsTheTokenizer) {
  const auto data = prepared("shards", false);
  const auto tok = tokenizer::Tokenizer::from_file(data + "/tokenizer.json");
  const auto out_dir = (root() / "run").string();
  const auto r = run("train", fmt::format("train --devices=1 --model.family=gpt2 "
                                          "--model.name=tiny --train.steps=3 "
                                          "--train.sample_tokens=40 --pipeline.microbatches=2 "
                                          "--pipeline.microbatch_size=2 --data.path={} "
                                          "--train.out_dir={}",
                                          data, out_dir));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  // The vocabulary is the tokenizer's (the shards alone would say 50257).
  const auto sample = nlohmann::json::parse(read_text(out_dir + "/sample.json"));
  const auto ids = sample.at("ids").get<std::vector<uint32_t>>();
  ASSERT_EQ(ids.size(), 40u);
  for (auto id : ids) EXPECT_LT(id, tok.vocab_size());
  EXPECT_EQ(sample.at("prompt").at(0).get<uint32_t>(), *tok.document_token());
  const std::string text = tok.decode(ids);
  EXPECT_EQ(sample.at("text").get<std::string>(), text);
  EXPECT_NE(r.out.find("sample:\n" + text + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(token ids)"), std::string::npos) << r.out;

  // generate finds the run's data tokenizer and prints text; ids without a tokenizer.
  const auto ckpt = out_dir + "/checkpoint-000003";
  const auto g = run("gen_text", fmt::format("generate --checkpoint {} --prompt 'the' "
                                             "--max-tokens 12 --temperature 0",
                                             ckpt));
  ASSERT_EQ(g.status, 0) << g.out << g.err;
  EXPECT_NE(g.err.find("tokenizer " + data + "/tokenizer.json"), std::string::npos) << g.err;
  const auto prompt = tok.encode("the");
  const auto gi = run("gen_ids", fmt::format("generate --checkpoint {} --tokenizer '' "
                                             "--prompt '{}' --max-tokens 12 --temperature 0",
                                             ckpt, fmt::join(prompt, " ")));
  ASSERT_EQ(gi.status, 0) << gi.out << gi.err;
  // `--tokenizer=` with nothing after '=' means no tokenizer as well, whatever follows it (not
  // the tokenizer "--prompt").
  const auto ge = run("gen_ids_eq", fmt::format("generate --checkpoint {} --tokenizer= --prompt "
                                                "'{}' --max-tokens 12 --temperature 0",
                                                ckpt, fmt::join(prompt, " ")));
  ASSERT_EQ(ge.status, 0) << ge.out << ge.err;
  EXPECT_EQ(ge.out, gi.out);
  const auto gen = ids_of(gi.out);
  ASSERT_FALSE(gen.empty());
  const std::vector<uint32_t> u(gen.begin(), gen.end());
  EXPECT_EQ(g.out, tok.decode(u) + "\n");
}

TEST(GenerateBadInput, OneLineAndExitTwo) {
  expect_one_error_line(run("missing", "generate --checkpoint " + (root() / "nope").string() +
                                           " --prompt '1 2'"),
                        "no such file or directory");
  const fs::path dir = root() / "small_hf";
  fs::create_directories(dir);
  const int rc = oracle(fmt::format("make {} gpt2 1 4 7 96", dir.string()));
  if (rc == 77) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  ASSERT_EQ(rc, 0);
  for (const char* n : {"0", "-3"}) {
    expect_one_error_line(
        run(std::string("max_") + n,
            fmt::format("generate --checkpoint {} --prompt '1 2' --max-tokens {}", dir.string(), n)),
        "--max-tokens");
  }
  // A tokenizer of 457 ids for a model of 96.
  namespace tt = bw::tokenizer::testing;
  const auto tok = root() / "big_tokenizer.json";
  std::ofstream(tok) << tt::tiny_tokenizer(tt::Style::kGpt2, tt::sample_text(), 200).dump();
  expect_one_error_line(run("big_tok", fmt::format("generate --checkpoint {} --tokenizer {} "
                                                   "--prompt hello",
                                                   dir.string(), tok.string())),
                        "the model's vocabulary is 96");
  expect_one_error_line(run("bad_id", fmt::format("generate --checkpoint {} --prompt '1 96'",
                                                  dir.string())),
                        "'96' is not a token id");
}

TEST(GenerateBadInput, ModelSmallerThanTheDataTokenizerIsRefused) {
  // Shards of a tokenizer with ids up to 70 K, for GPT-2 124M (50257 ids): refused before any
  // process starts, naming both numbers.
  const auto data = prepared("wide", true);
  const auto r = run("wide_train", fmt::format("train --devices=1 --model.family=gpt2 "
                                               "--model.name=124m --data.path={} "
                                               "--train.out_dir={}",
                                               data, (root() / "wide_run").string()));
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  const auto line = r.err.substr(r.err.find("error: "));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  EXPECT_NE(line.find("vocabulary of 50257"), std::string::npos) << r.err;
  const auto tok = tokenizer::Tokenizer::from_file(data + "/tokenizer.json");
  EXPECT_GT(tok.vocab_size(), 70000u);
  EXPECT_NE(line.find(fmt::format("has {}", tok.vocab_size())), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bw::runtime
