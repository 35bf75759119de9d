// Hugging Face models in and out, with transformers as the oracle (hf_oracle.py): a random model
// saved by transformers and loaded by breakwater gives the same logits and loss; importing and
// exporting gives back the stored tensors bitwise; the export loads in transformers with no
// missing or unexpected key and gives breakwater's logits; bad folders are one ConfigError naming
// the file and the field. Skipped (one line) when transformers is not importable.
#include "runtime/hf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name, family;
  bool tied;
  int kv_heads;
};

fs::path temp_root() {
  static fs::path root =
      fs::path(::testing::TempDir()) / ("bw_hf_test_" + std::to_string(::getpid()));
  return root;
}

// Runs the oracle; 77 = transformers is missing.
int oracle(const std::string& args) {
  const std::string cmd = fmt::format("{} {}/tests/runtime/hf_oracle.py {} > {}/oracle.log 2>&1",
                                      BW_PYTHON, BW_SOURCE_DIR, args, temp_root().string());
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// A transformers model in a fresh folder, or "" (and the test skips) without transformers.
std::string make_model(const Case& c, int vocab = 96) {
  const fs::path dir = temp_root() / c.name;
  fs::create_directories(dir);
  const int rc = oracle(fmt::format("make {} {} {} {} 7 {}", dir.string(), c.family, c.tied ? 1 : 0,
                                    c.kv_heads, vocab));
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
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
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
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
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
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
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

// Fine-tuning a Hugging Face model on a heterogeneous pipeline plan (pipelines of 1 and 2
// devices), then exporting it: transformers loads the export with no missing or unexpected key
// and its logits equal those of breakwater's layers built from the checkpoint. (Untied: the
// gradients of a tied model's two copies are summed by the runtime's tied-embedding groups.)
TEST(HfFineTune, PipelineTrainingThenExportLoadsInTransformers) {
  const auto dir = make_model({"finetune", "llama", false, 2}, 256);
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
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
  if (dir.empty()) GTEST_SKIP() << "transformers is not importable";
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
