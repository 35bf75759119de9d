// Tied embeddings (model.tie_embeddings, docs/runtime.md "Tied embeddings across stages"): the two
// copies of the matrix start bitwise equal, the gradient sum of one worker holding the whole model
// equals autograd's gradient of one genuinely shared matrix (the oracle: a plain LibTorch model
// whose head multiplies by layer 0's own tensor), the norm counts the matrix once, checkpoints
// store it once and loading fills both copies, and the bad combinations are ConfigErrors.
// Pipelines against one worker: executor_grid_test.cc (threads) and transparency_test.cc
// (processes, with a recovery in tests/elastic/recovery_test.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "cli_runner.h"
#include "core/error.h"
#include "model/gpt.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/grad_sync.h"
#include "runtime/layout.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

model::GptConfig tiny(bool tied) {
  auto c = model::named_config("tiny", 64);
  c.tie_embeddings = tied;
  return c;
}

torch::Tensor param(const model::Layer& layer, const std::string& name) {
  for (const auto& [n, p] : layer.parameter_list()) {
    if (n == name) return p;
  }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

TEST(TiedModel, GroupsNameBothCopiesAndNoneWhenUntied) {
  EXPECT_TRUE(model::tied_groups(tiny(false)).empty());
  const auto groups = model::tied_groups(tiny(true));
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].members.size(), 2u);
  EXPECT_EQ(groups[0].members[0].layer, 0);
  EXPECT_EQ(groups[0].members[0].name, "wte.weight");
  EXPECT_EQ(groups[0].members[1].layer, model::num_layers(tiny(true)) - 1);
  EXPECT_EQ(groups[0].members[1].name, "lm_head.weight");
}

TEST(TiedModel, HeadCopyStartsBitwiseEqualToTheEmbedding) {
  for (uint64_t seed : {1u, 1234u}) {
    const auto c = tiny(true);
    auto emb = model::build_layer(c, 0, seed);
    auto head = model::build_layer(c, model::num_layers(c) - 1, seed);
    EXPECT_TRUE(torch::equal(param(*emb, "wte.weight"), param(*head, "lm_head.weight")));
    // Untied: the head keeps its own matrix, and tying changes nothing else in any layer.
    const auto u = tiny(false);
    auto untied_head = model::build_layer(u, model::num_layers(u) - 1, seed);
    EXPECT_FALSE(torch::equal(param(*emb, "wte.weight"), param(*untied_head, "lm_head.weight")));
    for (int l = 0; l < model::num_layers(c) - 1; ++l) {
      auto a = model::build_layer(c, l, seed), b = model::build_layer(u, l, seed);
      for (size_t i = 0; i < a->parameter_list().size(); ++i)
        EXPECT_TRUE(torch::equal(a->parameter_list()[i].second, b->parameter_list()[i].second));
    }
  }
}

// One pipeline of one device holding every layer.
RunLayout one_device(int num_layers) {
  RunLayout layout;
  layout.num_layers = num_layers;
  layout.vocab_size = 64;
  layout.microbatch_size = 2;
  layout.total_microbatches = 1;
  PipelineLayout pl;
  pl.num_devices = 1;
  pl.widths = {1};
  pl.num_microbatches = 1;
  pl.schedule.kind = "single";
  pl.schedule.num_devices = 1;
  pl.schedule.num_chunks = 1;
  pl.schedule.num_microbatches = 1;
  pl.schedule.chunk_device = {0};
  pl.schedule.actions.resize(1);
  pl.schedule.actions[0] = {{schedule::ActionKind::F, 0, 0}, {schedule::ActionKind::B, 0, 0}};
  pl.chunk_layers = {{0, num_layers}};
  layout.pipelines.push_back(pl);
  validate_layout(layout);
  return layout;
}

TEST(TiedGradient, SumOfCopiesEqualsAutogradOfOneSharedMatrix) {
  torch::manual_seed(3);
  const auto c = tiny(true);
  const int n = model::num_layers(c);
  std::map<int, std::shared_ptr<model::Layer>> layers;
  for (int l = 0; l < n; ++l) layers[l] = model::build_layer(c, l, 7);
  const auto tokens = torch::randint(0, c.vocab_size, {2, c.seq_len}, torch::kInt64);
  const auto targets = torch::randint(0, c.vocab_size, {2, c.seq_len}, torch::kInt64);

  // Ours: the flat model with two copies, then the gradient sync of one rank.
  zero_gradients(layers);
  auto x = tokens;
  for (int l = 0; l < n; ++l) x = layers[l]->forward(x);
  model::lm_loss(x, targets).backward();
  const RunLayout layout = one_device(n);
  GradSync sync(layout, 0, layers, {}, nullptr, nullptr, model::tied_groups(c));
  EXPECT_EQ(sync.num_tied(), 1);
  EXPECT_EQ(sync.num_tied_across(), 0);
  const auto head_copy_grad = param(*layers[n - 1], "lm_head.weight").grad().clone();
  const auto emb_own_grad = param(*layers[0], "wte.weight").grad().clone();
  sync.sync_gradients();
  const double sq = sync.global_norm_and_loss(0.0).first;

  // Oracle: the same weights, one matrix used by the embedding lookup and by the head's matmul.
  std::map<int, std::shared_ptr<model::Layer>> ref;
  for (int l = 0; l < n; ++l) ref[l] = model::build_layer(c, l, 7);
  zero_gradients(ref);
  const auto wte = param(*ref[0], "wte.weight");
  auto h = ref[0]->forward(tokens);
  for (int l = 1; l < n - 1; ++l) h = ref[l]->forward(h);
  h = at::layer_norm(h, {int64_t{c.d_model}}, param(*ref[n - 1], "ln_f.weight"),
                     param(*ref[n - 1], "ln_f.bias"), 1e-5);
  model::lm_loss(at::linear(h, wte), targets).backward();

  const auto want = wte.grad();
  const auto emb = param(*layers[0], "wte.weight").grad();
  const auto head = param(*layers[n - 1], "lm_head.weight").grad();
  EXPECT_TRUE(torch::equal(emb, head)) << "the copies' gradients differ after the sum";
  EXPECT_TRUE(torch::allclose(emb, want, 1e-5, 1e-7))
      << "max |diff| " << (emb - want).abs().max().item<double>();
  // Both uses really contribute: neither copy's own gradient is the shared one.
  EXPECT_FALSE(torch::allclose(emb_own_grad, want, 1e-3, 1e-6));
  EXPECT_FALSE(torch::allclose(head_copy_grad, want, 1e-3, 1e-6));
  // The norm counts the matrix once, as clip_grad_norm_ over the shared model's parameters.
  double want_sq = 0;
  for (int l = 0; l < n; ++l) {
    for (const auto& [name, p] : ref[l]->parameter_list()) {
      if (l == n - 1 && name == "lm_head.weight") continue;  // unused in the oracle
      want_sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    }
  }
  EXPECT_NEAR(sq, want_sq, 1e-5 * want_sq);
}

TEST(TiedCheckpoint, StoredOnceAndLoadingFillsBothCopies) {
  const auto dir = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_tied_ckpt_{}", getpid())).string());
  const auto c = tiny(true);
  const int n = model::num_layers(c);
  TrainConfig train;
  ModelState state(train, c, 5);
  state.keep_only({0, n - 1});
  const auto params = state.parameters_of({0, n - 1});
  const auto adam = state.optimizer_state_of({0, n - 1});
  auto names = [](const NamedTensors& ts) {
    std::set<std::string> out;
    for (const auto& [k, v] : ts) out.insert(k);
    return out;
  };
  const std::string copy = fmt::format("layers.{}.lm_head.weight", n - 1);
  EXPECT_EQ(names(params).count("layers.0.wte.weight"), 1u);
  EXPECT_EQ(names(params).count(copy), 0u);
  EXPECT_EQ(names(adam).count("layers.0.wte.weight.exp_avg"), 1u);
  EXPECT_EQ(names(adam).count(copy + ".exp_avg"), 0u);

  const auto ckpt = (fs::path(dir) / "checkpoint-000001").string();
  write_shard(ckpt, 0, params, adam);
  CheckpointInfo info;
  info.step = 1;
  info.extra = {{"tied", tied_record(c)}};
  merge_shards(ckpt, 1, info);
  const auto loaded = load_checkpoint(ckpt);
  ASSERT_EQ(loaded.weights.count(copy), 1u);
  EXPECT_TRUE(torch::equal(loaded.weights.at(copy), loaded.weights.at("layers.0.wte.weight")));
  for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".step"}) {
    EXPECT_EQ(loaded.optimizer.count(copy + suffix), 1u) << suffix;
  }
  // The stored file really holds the matrix once.
  const auto file = load_safetensors((fs::path(ckpt) / "model.safetensors").string());
  EXPECT_EQ(file.tensors.count(copy), 0u);
  EXPECT_TRUE(tied_record(tiny(false)).is_null());
}

TEST(TiedConfig, KeyParsesAndShardedStagesAreRefused) {
  auto c = parse_run_config("[model]\ntie_embeddings = true\n", "t.toml", {});
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_FALSE(parse_run_config("", "t.toml", {}).model.tie_embeddings);
  EXPECT_TRUE(parse_run_config("", "t.toml", {"--model.tie_embeddings=true"}).model.tie_embeddings);
  EXPECT_EQ(parse_run_config(to_toml(c), "again", {}), c);
  auto error = [](const std::string& toml, std::vector<std::string> over) {
    try {
      parse_run_config(toml, "t.toml", over);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("[model]\ntie_embeddings = 1\n", {}).find("true or false"), std::string::npos);
  EXPECT_NE(error("", {"--model.tie_embeddings=yes"}).find("model.tie_embeddings"),
            std::string::npos);
  const auto sharded = error("[model]\ntie_embeddings = true\n[pipeline]\ndevices_per_stage = 2\n",
                             {});
  EXPECT_NE(sharded.find("sharded stages"), std::string::npos) << sharded;
  EXPECT_EQ(error("[pipeline]\ndevices_per_stage = 2\n", {}), "");
}

}  // namespace
}  // namespace bw::runtime
