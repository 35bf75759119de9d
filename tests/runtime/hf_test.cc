// Hugging Face models in and out, with transformers as the oracle (hf_oracle.py): a random model
// saved by transformers and loaded by breakwater gives the same logits and loss; importing and
// exporting gives back the stored tensors bitwise; the export loads in transformers with no
// missing or unexpected key and gives breakwater's logits; bad folders are one ConfigError naming
// the file and the field; bf16 and f16 source weights and GPT-2's legacy names read as the same
// model; `breakwater export` of a tied GPT-2 in fp32, bf16 and shards loads in transformers, and
// its bad input is one error line. Skipped (one line) when transformers is not importable, except
// in CI (CI=true), where that fails.
#include "runtime/hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "cli_runner.h"
#include "oracle_client.h"
#include "core/error.h"
#include "core/json.h"
#include "data/dataset.h"
#include "model/hf_config.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name, family;
  bool tied;
  int kv_heads;
};

fs::path temp_root() {
  return bw::testing::process_scratch("bw_hf_test");
}

// Runs the oracle (through its server, oracle_client.h) with `args`, space-separated; 77
// = transformers is missing.
int oracle(const std::string& args) {
  return bw::testing::run_oracle(BW_PYTHON, BW_SOURCE_DIR "/tests/runtime/hf_oracle.py",
                                 bw::testing::split_words(args),
                                 (temp_root() / "oracle.log").string());
}

// A transformers model in a fresh folder, or "" (and the test skips) without transformers. Its
// weights are stored in `dtype` (float32, bfloat16 or float16); GPT-2 has `positions` of them.
std::string make_model(const Case& c, int vocab = 96, const std::string& dtype = "float32",
                       int positions = 12) {
  const fs::path dir = temp_root() / c.name;
  fs::create_directories(dir);
  const int rc = oracle(fmt::format("make {} {} {} {} 7 {} {} 1 1 {}", dir.string(), c.family,
                                    c.tied ? 1 : 0, c.kv_heads, vocab, positions, dtype));
  if (rc == 77) return "";
  EXPECT_EQ(rc, 0) << "oracle failed; see " << (temp_root() / "oracle.log");
  return dir.string();
}

torch::Tensor forward(const model::GptConfig& config, torch::Tensor x) {
  for (int l = 0; l < model::num_layers(config); ++l) x = initial_layer(config, l, 1)->forward(x);
  return x;
}

// Every value within rtol of the reference, relative to the reference's largest magnitude;
// prints the first mismatches.
void expect_close(const torch::Tensor& got, const torch::Tensor& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double tol = rtol * want.abs().max().item<double>();
  auto diff = (got - want).abs().reshape({-1});
  auto bad = (diff > tol).nonzero().reshape({-1});
  for (int64_t i = 0; i < std::min<int64_t>(bad.numel(), 5); ++i) {
    const int64_t k = bad[i].item<int64_t>();
    ADD_FAILURE() << what << " value " << k << ": " << got.reshape({-1})[k].item<double>() << " vs "
                  << want.reshape({-1})[k].item<double>() << " (tolerance " << tol << ")";
  }
}

class HfModels : public ::testing::TestWithParam<Case> {};

TEST_P(HfModels, LogitsAndLossEqualTransformers) {
  const auto dir = make_model(GetParam());
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const auto config = model::hf_config_from_dir(dir);
  EXPECT_EQ(config.tie_embeddings, GetParam().tied);
  auto want = load_safetensors(dir + "/oracle.safetensors").tensors;
  const auto tokens = want.at("tokens");
  auto logits = forward(config, tokens);
  expect_close(logits, want.at("logits"), 1e-5, "logits");
  const int64_t t = tokens.size(1);
  auto loss = model::lm_loss(logits.narrow(1, 0, t - 1), tokens.narrow(1, 1, t - 1));
  EXPECT_NEAR(loss.item<double>(), want.at("loss").item<double>(),
              1e-5 * want.at("loss").item<double>());
}

TEST_P(HfModels, ImportThenExportIsBitwiseAndLoadsInTransformers) {
  const auto dir = make_model(GetParam());
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const auto config = model::hf_config_from_dir(dir);
  const auto weights = read_hf_weights(config);
  const std::string out = (temp_root() / (GetParam().name + "_export")).string();
  write_hf_folder(out, config, weights, {});
  const auto original = load_safetensors(dir + "/model.safetensors").tensors;
  const auto exported = load_safetensors(out + "/model.safetensors").tensors;
  ASSERT_EQ(original.size(), exported.size());
  for (const auto& [name, t] : original) {
    ASSERT_TRUE(exported.count(name)) << "export lacks " << name;
    EXPECT_TRUE(t.dtype() == exported.at(name).dtype() && torch::equal(t, exported.at(name)))
        << name << " differs";
  }
  // transformers loads the export with no missing or unexpected key, and its logits are ours.
  const std::string logits_file = out + "/hf_logits.safetensors";
  ASSERT_EQ(oracle(fmt::format("run {} {}/oracle.safetensors {}", out, dir, logits_file)), 0)
      << "see " << (temp_root() / "oracle.log");
  auto ours = forward(model::hf_config_from_dir(out),
                      load_safetensors(dir + "/oracle.safetensors").tensors.at("tokens"));
  expect_close(ours, load_safetensors(logits_file).tensors.at("logits"), 1e-5, "export logits");
  // Sharded: every tensor in its own shard, an index, and the same weights read back.
  const std::string sharded = out + "_sharded";
  HfExportOptions small;
  small.shard_bytes = 1;
  write_hf_folder(sharded, config, weights, small);
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));
  auto sharded_config = model::hf_config_from_dir(sharded);
  const auto back = read_hf_weights(sharded_config);
  ASSERT_EQ(back.size(), weights.size());
  for (const auto& [key, t] : weights) EXPECT_TRUE(torch::equal(t, back.at(key))) << key.second;
}

INSTANTIATE_TEST_SUITE_P(Families, HfModels,
                         ::testing::Values(Case{"gpt2", "gpt2", true, 4},
                                           Case{"llama_tied_gqa", "llama", true, 2},
                                           Case{"llama_untied_gqa", "llama", false, 1}),
                         [](const auto& info) { return info.param.name; });

// Weights stored in bf16 or f16 (config.json's torch_dtype says so) are read as their exact fp32
// values: the stored tensors have that dtype, each weight read equals its stored value widened,
// and the logits equal transformers' on the same rounded weights in float32.
class HfSourceDtypes
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(HfSourceDtypes, WeightsAreReadAsTheirFp32ValuesAndGiveTransformersLogits) {
  const auto& [family, dtype] = GetParam();
  const Case c{family + "_" + dtype, family, family == "gpt2", 2};
  const auto dir = make_model(c, 96, dtype);
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const auto stored = load_safetensors(dir + "/model.safetensors").tensors;
  const auto want_type = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat16;
  for (const auto& [name, t] : stored) {
    if (t.dim() >= 1) EXPECT_EQ(t.scalar_type(), want_type) << name << " is not stored in " << dtype;
  }
  const auto config = model::hf_config_from_dir(dir);
  const auto weights = read_hf_weights(config);
  for (const auto& t : model::hf_tensors(config)) {
    const auto& target = t.targets.front();
    auto it = stored.find(t.name);
    if (it == stored.end() && family == "gpt2") it = stored.find(t.name.substr(12));  // legacy
    ASSERT_NE(it, stored.end()) << t.name;
    const auto widened = it->second.to(torch::kFloat32);
    const auto& read = weights.at({target.layer, target.name});
    EXPECT_TRUE(read.scalar_type() == torch::kFloat32 &&
                torch::equal(read, t.transposed ? widened.t() : widened))
        << t.name << " is not its stored " << dtype << " value in fp32";
  }
  auto want = load_safetensors(dir + "/oracle.safetensors").tensors;
  expect_close(forward(config, want.at("tokens")), want.at("logits"), 1e-5, dtype + " logits");
}

INSTANTIATE_TEST_SUITE_P(Families, HfSourceDtypes,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::Values("bfloat16", "float16")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// GPT-2 folders of older transformers store the names without "transformer." and the attention
// masks "h.N.attn.bias" and "h.N.attn.masked_bias" (buffers, not weights): read as the same model.
TEST(HfGpt2LegacyNames, ReadAsTheSameWeights) {
  const auto dir = make_model({"legacy_base", "gpt2", true, 4});
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const auto config = model::hf_config_from_dir(dir);
  const auto want = read_hf_weights(config);
  const fs::path legacy = temp_root() / "legacy";
  fs::remove_all(legacy);
  fs::copy(dir, legacy, fs::copy_options::recursive);
  NamedTensors renamed;
  int prefixed = 0;
  for (const auto& [name, t] : load_safetensors(dir + "/model.safetensors").tensors) {
    const bool has_prefix = name.starts_with("transformer.");
    prefixed += has_prefix;
    renamed.emplace_back(has_prefix ? name.substr(12) : name, t);
  }
  ASSERT_GT(prefixed, 10) << "transformers stored no transformer.* names to rename";
  const int64_t positions = model::position_rows(config);
  for (int b = 0; b < config.n_blocks; ++b) {
    renamed.emplace_back(fmt::format("h.{}.attn.bias", b),
                         torch::ones({positions, positions}).tril().view({1, 1, positions, positions}));
    renamed.emplace_back(fmt::format("h.{}.attn.masked_bias", b), torch::tensor(-1e4f));
  }
  save_safetensors((legacy / "model.safetensors").string(), renamed, {{"format", "pt"}});
  auto legacy_config = config;
  legacy_config.init_from = legacy.string();
  const auto got = read_hf_weights(legacy_config);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << key.second;
    EXPECT_TRUE(torch::equal(got.at(key), t)) << "layer " << key.first << " " << key.second;
  }
}

// `breakwater export` of a tied GPT-2 fine-tuned from a transformers folder: the default export
// (fp32, one file) stores the tied matrix once and loads in transformers with no missing or
// unexpected key, with logits equal to breakwater's layers built from the export; --dtype bf16
// stores every tensor as the fp32 export's rounded to bf16 and loads in transformers with the
// logits of those rounded weights; --shard-gb splits the file into shards of at most that size
// (a larger tensor alone) with an index, which transformers loads and which reads back as the
// fp32 export. Bad input to export is exit status 2 and one `error:` line.
TEST(HfExportCli, TiedGpt2InFp32Bf16AndShardsLoadsInTransformers) {
  const auto dir = make_model({"export_tied", "gpt2", true, 4}, 256, "float32", 64);
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const std::string corpus = (temp_root() / "export_corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; out.tellp() < 20000; ++i) out << "entry " << i << ": a red kite circles.\n";
  }
  const std::string run = (temp_root() / "export_run").string();
  auto r = bw::testing::run_cli(
      {"train", "--quiet", "--devices=1", "--model.init_from=" + dir, "--data.path=" + corpus,
       "--train.steps=1", "--train.sample_tokens=0", "--pipeline.microbatches=2",
       "--pipeline.microbatch_size=2", "--train.out_dir=" + run},
      run + ".log", 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string ckpt = run + "/checkpoint-000001";
  const auto tokens = load_safetensors(dir + "/oracle.safetensors").tensors.at("tokens");
  const auto export_to = [&](const std::string& name, const std::vector<std::string>& extra) {
    const std::string out = (temp_root() / name).string();
    std::vector<std::string> args = {"export", "--format", "hf", ckpt, out};
    args.insert(args.end(), extra.begin(), extra.end());
    auto e = bw::testing::run_cli(args, out + ".log", 120);
    EXPECT_EQ(e.status, 0) << e.output;
    return out;
  };
  // transformers loads `folder` (exit 3 on a missing or unexpected key) and its logits are those
  // of breakwater's layers built from the same folder.
  const auto expect_transformers_logits = [&](const std::string& folder, const std::string& what) {
    const std::string logits_file = folder + "/hf_logits.safetensors";
    ASSERT_EQ(oracle(fmt::format("run {} {}/oracle.safetensors {}", folder, dir, logits_file)), 0)
        << what << ": see " << (temp_root() / "oracle.log");
    expect_close(forward(model::hf_config_from_dir(folder), tokens),
                 load_safetensors(logits_file).tensors.at("logits"), 1e-5, what + " logits");
  };

  const auto fp32 = export_to("export_fp32", {});
  const auto fp32_tensors = load_safetensors(fp32 + "/model.safetensors").tensors;
  EXPECT_EQ(fp32_tensors.count("lm_head.weight"), 0u) << "a tied matrix is stored once";
  EXPECT_EQ(fp32_tensors.count("transformer.wte.weight"), 1u);
  EXPECT_TRUE(json::read_file(fp32 + "/config.json").at("tie_word_embeddings").get<bool>());
  for (const auto& [name, t] : fp32_tensors) EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
  // The export holds the checkpoint's trained weights, not the folder's initial ones.
  const auto initial = load_safetensors(dir + "/model.safetensors").tensors;
  EXPECT_FALSE(torch::equal(fp32_tensors.at("transformer.h.0.mlp.c_fc.weight"),
                            initial.at("transformer.h.0.mlp.c_fc.weight")));
  expect_transformers_logits(fp32, "fp32 export");

  const auto bf16 = export_to("export_bf16", {"--dtype", "bf16"});
  const auto bf16_tensors = load_safetensors(bf16 + "/model.safetensors").tensors;
  ASSERT_EQ(bf16_tensors.size(), fp32_tensors.size());
  for (const auto& [name, t] : fp32_tensors) {
    ASSERT_TRUE(bf16_tensors.count(name)) << name;
    const auto& b = bf16_tensors.at(name);
    EXPECT_TRUE(b.scalar_type() == torch::kBFloat16 && torch::equal(b, t.to(torch::kBFloat16)))
        << name << " is not the fp32 export rounded to bf16";
  }
  EXPECT_EQ(json::read_file(bf16 + "/config.json").at("torch_dtype"), "bfloat16");
  expect_transformers_logits(bf16, "bf16 export");

  const double shard_gb = 20e-6;  // 20 kB: the model's ~150 kB in many files
  const auto sharded = export_to("export_sharded", {"--shard-gb", fmt::format("{}", shard_gb)});
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  const auto index = json::read_file(sharded + "/model.safetensors.index.json");
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
  EXPECT_GT(files.size(), 5u);
  std::map<std::string, torch::Tensor> back;
  for (const auto& file : files) {
    int64_t bytes = 0;
    const auto st = load_safetensors(sharded + "/" + file).tensors;
    for (const auto& [name, t] : st) {
      EXPECT_EQ(index.at("weight_map").at(name), file) << name;
      bytes += static_cast<int64_t>(t.nbytes());
      back[name] = t;
    }
    EXPECT_TRUE(bytes <= shard_gb * 1e9 || st.size() == 1)
        << file << " holds " << bytes << " bytes in " << st.size() << " tensors";
  }
  ASSERT_EQ(back.size(), fp32_tensors.size());
  for (const auto& [name, t] : fp32_tensors) EXPECT_TRUE(torch::equal(back.at(name), t)) << name;
  expect_transformers_logits(sharded, "sharded export");

  // Bad input: exit status 2 and one `error:` line naming the problem.
  struct BadCase {
    std::vector<std::string> args;
    std::string phrase;
  };
  const std::string out = (temp_root() / "export_bad").string();
  const std::vector<BadCase> bad = {
      {{"--dtype", "fp16", ckpt, out}, "--dtype 'fp16': choose fp32 or bf16"},
      {{"--shard-gb", "0", ckpt, out}, "--shard-gb 0 must be in (0, 1024]"},
      {{"--shard-gb", "2048", ckpt, out}, "--shard-gb 2048 must be in (0, 1024]"},
      {{"--format", "onnx", ckpt, out}, "--format 'onnx' is not supported; use --format hf"},
      {{(temp_root() / "no_such_checkpoint").string(), out}, "no_such_checkpoint"},
      {{corpus, out}, "export_corpus.txt"},
  };
  for (const auto& c : bad) {
    std::vector<std::string> args = {"export"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto e = bw::testing::run_cli(args, out + ".log", 60);
    EXPECT_EQ(e.status, 2) << e.output;
    EXPECT_EQ(e.output.rfind("error: ", 0), 0u) << e.output;
    EXPECT_EQ(std::count(e.output.begin(), e.output.end(), '\n'), 1) << e.output;
    EXPECT_NE(e.output.find(c.phrase), std::string::npos) << "no '" << c.phrase << "' in "
                                                          << e.output;
  }
  EXPECT_FALSE(fs::exists(out)) << "a refused export wrote its folder";
}

// Copies `dir` to a new folder for one bad-input case.
std::string copy_of(const std::string& dir, const std::string& name) {
  const fs::path out = temp_root() / name;
  fs::remove_all(out);
  fs::copy(dir, out, fs::copy_options::recursive);
  return out.string();
}

// Without transformers: breakwater's own export of a seeded model (gpt2 and llama, tied and
// untied; GPT-2's matrices are stored transposed) builds layers bitwise equal to the seeded ones
// (each weight copied once from the mapped file, the tied head from the stored embedding), and
// one flipped bit in the data is refused by the CRC-32C the export records, before any layer.
TEST(HfFolder, SeededExportImportsBitwiseAndADamagedByteIsRefused) {
  for (const auto& [family, name] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "tiny"}, {"llama", "tiny-tied"}, {"gpt2", "tiny"}}) {
    const auto seeded = model::resolve_config(family, name, 0, "", 96);
    HfWeights weights;
    std::vector<std::shared_ptr<model::Layer>> layers;
    for (int l = 0; l < model::num_layers(seeded); ++l) {
      layers.push_back(initial_layer(seeded, l, 5));
      for (const auto& [p, v] : layers.back()->parameter_list()) weights[{l, p}] = v.detach();
    }
    const std::string dir = (temp_root() / ("seeded_" + family + "_" + name)).string();
    write_hf_folder(dir, seeded, weights, {});
    const auto config = model::hf_config_from_dir(dir);
    ASSERT_EQ(config.tie_embeddings, seeded.tie_embeddings) << family << " " << name;
    for (int l = 0; l < model::num_layers(config); ++l) {
      const auto imported = initial_layer(config, l, 1);
      const auto& want = layers[l]->parameter_list();
      ASSERT_EQ(imported->parameter_list().size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_TRUE(torch::equal(imported->parameter_list()[k].second, want[k].second))
            << family << " " << name << " layer " << l << " " << want[k].first;
      }
    }
    const auto damaged = copy_of(dir, "damaged_" + family + "_" + name);
    {
      std::fstream f(damaged + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-3, std::ios::end);
      const char c = static_cast<char>(f.get() ^ 0x10);
      f.seekp(-3, std::ios::end);
      f.put(c);
    }
    auto c = config;
    c.init_from = damaged;
    try {
      HfFolder folder(c);
      ADD_FAILURE() << "no error for " << damaged;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("CRC-32C"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(damaged + "/model.safetensors"), std::string::npos)
          << e.what();
    }
  }
}

void expect_error(const model::GptConfig& config, const std::vector<std::string>& parts) {
  try {
    read_hf_weights(config);
    ADD_FAILURE() << "no error for " << config.init_from;
  } catch (const ConfigError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << e.what() << "' lacks '" << p << "'";
  }
}

TEST(HfBadInput, EachIsOneErrorNamingFileAndField) {
  const auto dir = make_model({"bad_base", "llama", false, 2});
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const auto config = model::hf_config_from_dir(dir);
  auto stored = load_safetensors(dir + "/model.safetensors").tensors;
  auto rewrite = [&](const std::string& name, auto edit) {
    auto d = copy_of(dir, name);
    auto tensors = stored;
    edit(tensors);
    NamedTensors list(tensors.begin(), tensors.end());
    save_safetensors(d + "/model.safetensors", list, {{"format", "pt"}});
    auto c = config;
    c.init_from = d;
    return c;
  };
  expect_error(rewrite("missing", [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); }),
               {"model.layers.1.mlp.up_proj.weight", "missing tensor"});
  expect_error(rewrite("unexpected", [](auto& t) { t["model.extra.weight"] = torch::zeros({2}); }),
               {"unexpected/model.safetensors", "unexpected tensor 'model.extra.weight'"});
  expect_error(rewrite("shape", [](auto& t) { t["model.norm.weight"] = torch::ones({31}); }),
               {"shape/model.safetensors", "model.norm.weight", "[31]", "[32]"});
  expect_error(
      rewrite("dtype", [](auto& t) { t["model.norm.weight"] = torch::ones({32}, torch::kInt32); }),
      {"dtype/model.safetensors", "model.norm.weight", "I32"});
  {  // an index naming a shard that is not there
    auto d = copy_of(dir, "index");
    std::ofstream(d + "/model.safetensors.index.json")
        << R"({"metadata": {}, "weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}})";
    auto c = config;
    c.init_from = d;
    expect_error(c, {"model.safetensors.index.json", "model-00002-of-00002.safetensors"});
  }
  // config.json: an unknown rope type, a missing field, an unknown key, an oversized file.
  auto config_error = [&](const std::string& name, const std::string& text,
                          const std::vector<std::string>& parts) {
    auto d = copy_of(dir, name);
    std::ofstream(d + "/config.json") << text;
    try {
      model::hf_config_from_dir(d);
      ADD_FAILURE() << "no error for " << name;
    } catch (const ConfigError& e) {
      for (const auto& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << "'" << e.what() << "' lacks '" << p << "'";
    }
  };
  const std::string base = R"("model_type": "llama", "vocab_size": 96, "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "max_position_embeddings": 64)";
  config_error(
      "rope",
      "{" + base + R"(, "rms_norm_eps": 1e-5, "rope_scaling": {"rope_type": "yarn", "factor": 2}})",
      {"rope/config.json", "rope_scaling.", "yarn"});
  config_error("eps", "{" + base + "}", {"eps/config.json", "rms_norm_eps"});
  config_error("key", "{" + base + R"(, "rms_norm_eps": 1e-5, "sliding_window": 4})",
               {"key/config.json", "sliding_window"});
  config_error(
      "big",
      "{" + base + R"(, "rms_norm_eps": 1e-5, "pad": ")" + std::string(65 << 20, 'x') + "\"}",
      {"big/config.json"});
  config_error("arch", R"({"model_type": "mistral"})",
               {"arch/config.json", "model_type", "mistral"});
}

// out_dir/config.toml says what ran. The oracle is the folder's config.json as transformers
// wrote it (read here with its defaults: GPT-2 ties its head, n_inner null is 4 n_embd, Llama
// does not tie): [resolved.model] holds its family and shape, seq_len as trained (the model's
// positions when model.seq_len is 0, else the value given); [resolved.train] the precision
// "auto" became on the CPU; [resolved.pipeline] the plan's pipelines and schedules. The keys as
// given are beside them, and the file loads back as the config given.
struct SavedCase {
  std::string name, family;
  int kv_heads;
  int seq_len;  // model.seq_len given; 0 = the model's
  std::vector<int> pipelines;
  std::string schedule;
};

class HfSavedConfig : public ::testing::TestWithParam<SavedCase> {};

TEST_P(HfSavedConfig, ConfigTomlSaysWhatRanBesideWhatWasGiven) {
  const auto& c = GetParam();
  const auto dir = make_model({c.name, c.family, c.family == "gpt2", c.kv_heads}, 256);
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
  const std::string corpus = (temp_root() / (c.name + "_corpus.txt")).string();
  {
    std::ofstream out(corpus);
    for (int i = 0; out.tellp() < 8000; ++i) out << "line " << i << ": the quick brown fox.\n";
  }
  int devices = 0;
  for (int d : c.pipelines) devices += d;
  const std::string run = (temp_root() / (c.name + "_run")).string();
  std::vector<std::string> args = {
      "train", "--quiet", fmt::format("--devices={}", devices),
      fmt::format("--pipeline.pipelines=[{}]", fmt::join(c.pipelines, ",")),
      fmt::format("--pipeline.fault_tolerance={}", c.pipelines.size() - 1),
      "--pipeline.schedule=" + c.schedule, "--model.init_from=" + dir, "--data.path=" + corpus,
      fmt::format("--model.seq_len={}", c.seq_len), "--train.steps=1", "--train.sample_tokens=0",
      "--pipeline.microbatches=4", "--pipeline.microbatch_size=2", "--train.out_dir=" + run};
  auto r = bw::testing::run_cli(args, run + ".log", 240);
  ASSERT_EQ(r.status, 0) << r.output;

  const auto hf = nlohmann::json::parse(bw::testing::read_text(dir + "/config.json"));
  const bool gpt2 = c.family == "gpt2";
  const int64_t d = hf.at(gpt2 ? "n_embd" : "hidden_size");
  const int64_t heads = hf.at(gpt2 ? "n_head" : "num_attention_heads");
  const int64_t positions = hf.at(gpt2 ? "n_positions" : "max_position_embeddings");
  const auto& inner = gpt2 ? hf.value("n_inner", nlohmann::json()) : hf.at("intermediate_size");
  const std::string text = bw::testing::read_text(run + "/config.toml");
  const toml::table saved = toml::parse(text);
  const auto m = saved["resolved"]["model"];
  EXPECT_EQ(m["family"].value<std::string>(), hf.at("model_type").get<std::string>()) << text;
  const int64_t blocks = hf.at(gpt2 ? "n_layer" : "num_hidden_layers");
  EXPECT_EQ(m["blocks"].value<int64_t>(), blocks) << text;
  EXPECT_EQ(m["layers"].value<int64_t>(), blocks + 2) << text;  // embedding, blocks, head
  EXPECT_EQ(m["d_model"].value<int64_t>(), d) << text;
  EXPECT_EQ(m["heads"].value<int64_t>(), heads) << text;
  EXPECT_EQ(m["kv_heads"].value<int64_t>(),
            gpt2 ? heads : hf.at("num_key_value_heads").get<int64_t>())
      << text;
  EXPECT_EQ(m["ffn_hidden"].value<int64_t>(), inner.is_null() ? 4 * d : inner.get<int64_t>())
      << text;
  EXPECT_EQ(m["vocab_size"].value<int64_t>(), hf.at("vocab_size")) << text;
  EXPECT_EQ(m["positions"].value<int64_t>(), positions) << text;
  EXPECT_EQ(m["seq_len"].value<int64_t>(), c.seq_len > 0 ? c.seq_len : positions) << text;
  EXPECT_EQ(m["tie_embeddings"].value<bool>(), hf.value("tie_word_embeddings", gpt2)) << text;
  EXPECT_EQ(m["init_from"].value<std::string>(), dir) << text;
  EXPECT_EQ(saved["resolved"]["train"]["precision"].value<std::string>(), "fp32") << text;
  const auto p = saved["resolved"]["pipeline"];
  for (const char* key : {"pipelines", "stage_devices", "schedules"}) {
    ASSERT_NE(p[key].as_array(), nullptr) << "no list resolved.pipeline." << key << " in:\n" << text;
  }
  std::vector<int64_t> got_pipelines, widths;
  std::vector<std::string> schedules;
  for (const auto& v : *p["pipelines"].as_array()) got_pipelines.push_back(*v.value<int64_t>());
  for (const auto& v : *p["stage_devices"].as_array()) widths.push_back(*v.value<int64_t>());
  for (const auto& v : *p["schedules"].as_array()) schedules.push_back(*v.value<std::string>());
  EXPECT_EQ(got_pipelines, std::vector<int64_t>(c.pipelines.begin(), c.pipelines.end())) << text;
  EXPECT_EQ(widths, std::vector<int64_t>(devices, 1)) << text;
  EXPECT_EQ(schedules, std::vector<std::string>(c.pipelines.size(), c.schedule)) << text;
  // What was given, beside it: seq_len as given, family and name at their defaults.
  EXPECT_EQ(saved["model"]["seq_len"].value<int64_t>(), c.seq_len) << text;
  EXPECT_EQ(saved["model"]["family"].value<std::string>(), "gpt") << text;
  EXPECT_EQ(saved["train"]["precision"].value<std::string>(), "auto") << text;
  // The saved file loads back as the config given.
  const auto loaded = parse_run_config(text, run + "/config.toml", {});
  EXPECT_EQ(loaded.model.init_from, dir);
  EXPECT_EQ(loaded.model.seq_len, c.seq_len);
  EXPECT_EQ(loaded.pipeline.pipelines, c.pipelines);
  EXPECT_EQ(loaded.train.out_dir, run);
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfSavedConfig,
    ::testing::Values(SavedCase{"saved_gpt2", "gpt2", 4, 0, {2}, "gpipe"},
                      SavedCase{"saved_llama_gqa", "llama", 2, 24, {1, 2}, "1f1b"}),
    [](const auto& info) { return info.param.name; });

// The end-of-run sample starts from the token the model's config.json names (bos_token_id),
// not from GPT-2's 50256: llm.c .bin data (vocabulary 50257) without a tokenizer, and a GPT-2
// folder whose document token is 777.
TEST(HfFineTune, TheSampleStartsFromTheModelsDocumentToken) {
  const auto dir = make_model({"doc_token", "gpt2", true, 4}, data::kGpt2Vocab);
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
  auto hf = nlohmann::json::parse(bw::testing::read_text(dir + "/config.json"));
  hf["bos_token_id"] = 777;
  hf["eos_token_id"] = 777;
  std::ofstream(dir + "/config.json") << hf.dump(2);
  const std::string bin = (temp_root() / "doc_token.bin").string();
  std::vector<uint16_t> tokens(4000);
  std::mt19937 rng(3);
  for (auto& t : tokens) t = static_cast<uint16_t>(rng() % 1000);
  data::write_token_bin(bin, tokens);
  const std::string run = (temp_root() / "doc_token_run").string();
  auto r = bw::testing::run_cli(
      {"train", "--quiet", "--devices=1", "--model.init_from=" + dir, "--data.path=" + bin,
       "--train.steps=1", "--train.sample_tokens=3", "--pipeline.microbatches=2",
       "--pipeline.microbatch_size=2", "--train.out_dir=" + run},
      run + ".log", 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto sample = nlohmann::json::parse(bw::testing::read_text(run + "/sample.json"));
  EXPECT_EQ(sample.at("prompt"), nlohmann::json::array({777})) << sample.dump();
  EXPECT_EQ(sample.at("ids").size(), 3u) << sample.dump();
}

// Fine-tuning a Hugging Face model on a heterogeneous pipeline plan (pipelines of 1 and 2
// devices), then exporting it: transformers loads the export with no missing or unexpected key
// and its logits equal those of breakwater's layers built from the checkpoint. (Untied: the
// gradients of a tied model's two copies are summed by the runtime's tied-embedding groups.)
TEST(HfFineTune, PipelineTrainingThenExportLoadsInTransformers) {
  const auto dir = make_model({"finetune", "llama", false, 2}, 256);
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const std::string corpus = (temp_root() / "corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; out.tellp() < 20000; ++i) out << "line " << i << ": the quick brown fox.\n";
  }
  const std::string run = (temp_root() / "finetune_run").string();
  auto r = bw::testing::run_cli(
      {"train", "--quiet", "--devices=3", "--pipeline.pipelines=[1,2]", "--pipeline.schedule=1f1b",
       "--model.init_from=" + dir, "--data.path=" + corpus, "--train.steps=2",
       "--train.sample_tokens=0", "--pipeline.microbatches=4", "--pipeline.microbatch_size=2",
       "--train.out_dir=" + run},
      run + ".log", 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string exported = (temp_root() / "finetune_export").string();
  auto e = bw::testing::run_cli({"export", "--format", "hf", run + "/checkpoint-000002", exported},
                                exported + ".log", 120);
  ASSERT_EQ(e.status, 0) << e.output;
  const auto config = model::hf_config_from_dir(dir);
  const auto ckpt = load_checkpoint(run + "/checkpoint-000002");
  const auto tokens = load_safetensors(dir + "/oracle.safetensors").tensors.at("tokens");
  torch::Tensor x = tokens;
  bool changed = false;
  {
    torch::NoGradGuard no_grad;
    for (int l = 0; l < model::num_layers(config); ++l) {
      auto layer = model::build_layer(config, l, 1);
      auto start = initial_layer(config, l, 1);
      for (size_t k = 0; k < layer->parameter_list().size(); ++k) {
        const auto& [name, p] = layer->parameter_list()[k];
        p.copy_(ckpt.weights.at(checkpoint_tensor_name(l, name)));
        changed |= !torch::equal(p, start->parameter_list()[k].second);
      }
      x = layer->forward(x);
    }
  }
  EXPECT_TRUE(changed) << "training left the imported weights unchanged";
  const std::string logits_file = exported + "/hf_logits.safetensors";
  ASSERT_EQ(oracle(fmt::format("run {} {}/oracle.safetensors {}", exported, dir, logits_file)), 0)
      << "see " << (temp_root() / "oracle.log");
  expect_close(x, load_safetensors(logits_file).tensors.at("logits"), 1e-5, "fine-tuned logits");
}

// A fine-tuning run of an imported model, stopped at a checkpoint and resumed (train.resume with
// model.init_from), ends with the same bits as the run that went through: the import is the
// starting point only, and the resume loads every weight and moment from the checkpoint.
TEST(HfFineTune, ResumedFromACheckpointEndsWhereTheUninterruptedRunEnds) {
  const auto dir = make_model({"resume", "llama", true, 2}, 256);
  if (dir.empty()) BW_SKIP_WITHOUT_ORACLE("transformers is not importable by " << BW_PYTHON);
  const std::string corpus = (temp_root() / "resume_corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; out.tellp() < 20000; ++i) out << "row " << i << ": a lazy dog sleeps.\n";
  }
  auto train = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string out = (temp_root() / name).string();
    std::vector<std::string> args = {"train",
                                     "--quiet",
                                     "--devices=3",
                                     "--pipeline.pipelines=[1,2]",
                                     "--pipeline.schedule=1f1b",
                                     "--model.init_from=" + dir,
                                     "--data.path=" + corpus,
                                     "--train.steps=4",
                                     "--train.sample_tokens=0",
                                     "--pipeline.microbatches=4",
                                     "--pipeline.microbatch_size=2",
                                     "--train.out_dir=" + out};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = bw::testing::run_cli(args, out + ".log", 240);
    EXPECT_EQ(r.status, 0) << r.output;
    return out;
  };
  const auto through = train("resume_through", {"--train.checkpoint_every=2"});
  const auto resumed =
      train("resume_resumed", {"--train.resume=" + through + "/checkpoint-000002"});
  const auto want = load_checkpoint(through + "/checkpoint-000004");
  const auto got = load_checkpoint(resumed + "/checkpoint-000004");
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (const auto* maps : {&want.weights, &want.optimizer}) {
    const auto& other = maps == &want.weights ? got.weights : got.optimizer;
    for (const auto& [name, t] : *maps) {
      ASSERT_TRUE(other.count(name)) << name;
      EXPECT_TRUE(torch::equal(other.at(name), t)) << name;
    }
  }
}

}  // namespace
}  // namespace bw::runtime
