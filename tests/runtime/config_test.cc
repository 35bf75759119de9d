// Run config: defaults, TOML files, overrides, precise errors for unknown keys and wrong types,
// validation, and to_toml round trips over a grid of configs.
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "runtime/resolved_run.h"

namespace bw::runtime {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

void expect_contains(const std::string& m, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m << "\n  missing: " << p;
}

RunConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_run_config(text, "test.toml", overrides);
}

TEST(RunConfig, DefaultsMatchTheDocumentedValues) {
  RunConfig c = load_run_config("", {});
  EXPECT_EQ(c, RunConfig{});
  EXPECT_EQ(c.model.name, "small");
  EXPECT_EQ(c.model.seed, 1234);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.seed, 42);
  EXPECT_EQ(c.cluster.nodes, 4);
  EXPECT_EQ(c.cluster.backend, "gloo");
  EXPECT_EQ(c.pipeline.schedule, "hanayo");
  EXPECT_EQ(c.pipeline.microbatches, 8);
  EXPECT_TRUE(c.pipeline.pipelines.empty());
  EXPECT_DOUBLE_EQ(c.elastic.step_timeout_s, 120.0);
  EXPECT_EQ(c.train.steps, 100);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-3);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_EQ(c.train.out_dir, "runs/default");
  EXPECT_EQ(global_batch(c.pipeline), 32);
}

TEST(RunConfig, ExampleFileHoldsTheDefaults) {
  std::string path = std::string(BW_SOURCE_DIR) + "/examples/train.toml";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_EQ(load_run_config(path, {}), RunConfig{});
  // Every key is spelled out in the example, so deleting one from the schema breaks this test.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& line : std::vector<std::string>{
           "schedule =", "heartbeat_timeout_s =", "sample_tokens =", "pipelines ="}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

TEST(RunConfig, FileValuesAndOverridesApplyInOrder) {
  RunConfig c = parse(R"(
[model]
name = "tiny"
[pipeline]
schedule = "1f1b"
pipelines = [2, 3]
[train]
lr = 1          # an integer is accepted for a float key
steps = 7
)",
                      {"--train.steps=9", "cluster.nodes=6", "pipeline.pipelines=[1,2,3]",
                       "data.path=some file.txt", "train.min_lr=1e-4", "train.steps=11"});
  EXPECT_EQ(c.model.name, "tiny");
  EXPECT_EQ(c.pipeline.schedule, "1f1b");
  EXPECT_EQ(c.pipeline.pipelines, (std::vector<int>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(c.train.lr, 1.0);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 1e-4);
  EXPECT_EQ(c.train.steps, 11);
  EXPECT_EQ(c.cluster.nodes, 6);
  EXPECT_EQ(c.data.path, "some file.txt");
  EXPECT_EQ(parse("", {"pipeline.pipelines=[]"}).pipeline.pipelines, std::vector<int>{});
  EXPECT_EQ(parse("", {"pipeline.pipelines=4", "pipeline.fault_tolerance=0"}).pipeline.pipelines,
            std::vector<int>{4});
}

TEST(RunConfig, ValidationLossKeysAreCheckedWithTheFix) {
  EXPECT_EQ(RunConfig{}.train.eval_every, 0);  // no validation loss unless asked for
  EXPECT_EQ(RunConfig{}.data.val_path, "");
  expect_contains(error_of([] { parse("", {"--train.eval_every=5"}); }),
                  {"train.eval_every = 5", "data.val_path is empty", "--data.val_path=",
                   "--train.eval_every=0"});
  expect_contains(error_of([] { parse("", {"--train.eval_every=-1"}); }),
                  {"train.eval_every", ">= 0", "-1"});
  expect_contains(
      error_of([] { parse("", {"--train.eval_every=1", "--data.val_path=v.bin",
                               "--train.eval_batches=0"}); }),
      {"train.eval_batches", "[1, 65536]", "got 0"});
  const auto c = parse("[data]\nval_path = \"v/*.bin\"\n[train]\neval_every = 3\n"
                       "eval_batches = 2\n");
  EXPECT_EQ(c.data.val_path, "v/*.bin");
  EXPECT_EQ(c.train.eval_every, 3);
  EXPECT_EQ(c.train.eval_batches, 2);
  EXPECT_EQ(parse(to_toml(c)), c);
}

TEST(RunConfig, UnknownSectionAndKeyNameThemAndListValidOnes) {
  expect_contains(error_of([] { parse("[trian]\nsteps = 3\n"); }),
                  {"test.toml", "[trian]", "model, data, cluster, pipeline, elastic, train"});
  expect_contains(error_of([] { parse("[train]\nstepz = 3\n"); }),
                  {"train.stepz", "steps, lr, min_lr", "sample_tokens"});
  expect_contains(error_of([] { parse("", {"--pipeline.shedule=1f1b"}); }),
                  {"pipeline.shedule", "schedule, waves"});
  expect_contains(error_of([] { parse("", {"--bogus.key=1"}); }), {"[bogus]"});
  expect_contains(error_of([] { parse("steps = 3\n"); }), {"steps", "not a section"});
  expect_contains(error_of([] { parse("", {"train.steps"}); }), {"section.key=value"});
}

TEST(RunConfig, WrongTypesNameKeyExpectedTypeAndValue) {
  expect_contains(error_of([] { parse("[train]\nsteps = \"ten\"\n"); }),
                  {"train.steps", "an integer", "ten"});
  expect_contains(error_of([] { parse("[train]\nsteps = 2.5\n"); }),
                  {"train.steps", "an integer", "2.5"});
  expect_contains(error_of([] { parse("[train]\nlr = \"fast\"\n"); }),
                  {"train.lr", "a number", "fast"});
  expect_contains(error_of([] { parse("[model]\nname = 3\n"); }), {"model.name", "a string", "3"});
  expect_contains(error_of([] { parse("[pipeline]\npipelines = [2, \"x\"]\n"); }),
                  {"pipeline.pipelines", "a list of integers"});
  expect_contains(error_of([] { parse("", {"train.steps=1e3"}); }),
                  {"train.steps", "an integer", "1e3"});
  expect_contains(error_of([] { parse("", {"train.lr=abc"}); }), {"train.lr", "a number", "abc"});
  expect_contains(error_of([] { parse("", {"pipeline.pipelines=[2,x]"}); }),
                  {"pipeline.pipelines", "a list of integers", "[2,x]"});
  expect_contains(error_of([] { parse("", {"cluster.nodes=99999999999"}); }),
                  {"cluster.nodes", "out of range"});
  expect_contains(error_of([] { parse("[train\n"); }), {"test.toml:1", "invalid TOML"});
}

TEST(RunConfig, ValidationNamesKeyAndValue) {
  struct Bad {
    std::string override_text, key, value;
  };
  for (const Bad& b : std::vector<Bad>{{"cluster.nodes=0", "cluster.nodes", "0"},
                                       {"pipeline.microbatches=0", "pipeline.microbatches", "0"},
                                       {"pipeline.pipelines=[2,0]", "pipeline.pipelines[1]", "0"},
                                       {"train.lr=-1", "train.lr", "-1"},
                                       {"train.beta2=1", "train.beta2", "1"},
                                       {"train.min_lr=1", "train.min_lr", "1"},
                                       {"cluster.device=tpu", "cluster.device", "tpu"},
                                       {"cluster.backend=nccl", "cluster.backend", "cuda"},
                                       {"elastic.store_port=70000", "elastic.store_port", "70000"},
                                       {"train.log_every=0", "train.log_every", "0"}}) {
    expect_contains(error_of([&] { parse("", {b.override_text}); }), {b.key, b.value});
  }
}

// Every count has a limit checked in 64-bit arithmetic (no wrap-around), and options that
// contradict each other are refused with both named.
TEST(RunConfig, LimitsAndContradictions) {
  expect_contains(
      error_of([] { parse("", {"cluster.nodes=1431655766", "cluster.devices_per_node=3"}); }),
      {"cluster.nodes", "1431655766", "[1, 1024]"});
  expect_contains(error_of([] { parse("", {"cluster.nodes=512", "cluster.devices_per_node=4"}); }),
                  {"2048 worker processes", "limit of 1024"});
  expect_contains(error_of([] { parse("", {"pipeline.microbatches=65536",
                                           "pipeline.microbatch_size=65536"}); }),
                  {"global batch of 4294967296", "limit of 16777216"});
  expect_contains(error_of([] { parse("", {"pipeline.waves=100000"}); }), {"pipeline.waves"});
  expect_contains(error_of([] { parse("", {"pipeline.pipelines=[1000,1000]"}); }),
                  {"2000 devices", "limit of 1024"});
  expect_contains(error_of([] { parse("", {"pipeline.fault_tolerance=4"}); }),
                  {"pipeline.fault_tolerance 4", "cluster.nodes is 4"});
  expect_contains(error_of([] { parse("", {"pipeline.pipelines=[2]"}); }),
                  {"1 pipeline(s)", "--pipeline.fault_tolerance=0"});
  expect_contains(error_of([] { parse("", {"elastic.step_timeout_s=0.001"}); }),
                  {"elastic.step_timeout_s", "0.001"});
  expect_contains(error_of([] { parse("", {"elastic.heartbeat_timeout_s=1e300"}); }),
                  {"elastic.heartbeat_timeout_s"});
  expect_contains(error_of([] { parse("", {"train.sample_tokens=2000000000"}); }),
                  {"train.sample_tokens"});
  RunConfig c = parse("", {"pipeline.pipelines=[1,3]"});
  validate_devices(c, 0);  // 4 nodes x 1 device: fine
  expect_contains(error_of([&] { validate_devices(c, 1); }),
                  {"--devices 1", "pipeline.pipelines = [1, 3]", "4 devices"});
  expect_contains(error_of([&] { validate_devices(c, 5); }), {"uses 4 devices", "has 5"});
  expect_contains(error_of([&] { validate_devices(c, 5000); }), {"--devices 5000"});
  RunConfig d = parse("", {"cluster.nodes=8", "pipeline.fault_tolerance=3"});
  expect_contains(error_of([&] { validate_devices(d, 3); }), {"at least 4 pipelines", "3"});
  validate_devices(d, 1);  // the single-process reference ignores fault tolerance
}

TEST(RunConfig, OverridesFromArgs) {
  EXPECT_EQ(overrides_from_args({"--a.b=1", "--c.d", "x y", "--e.f=[1,2]"}),
            (std::vector<std::string>{"a.b=1", "c.d=x y", "e.f=[1,2]"}));
  expect_contains(error_of([] { overrides_from_args({"stray"}); }), {"stray", "--section.key"});
  expect_contains(error_of([] { overrides_from_args({"--a.b"}); }), {"--a.b", "no value"});
}

// to_toml(c) parses back to c, for the defaults and for configs that change every key kind,
// including strings that need escaping and floats that need all 17 digits.
TEST(RunConfig, ToTomlRoundTrips) {
  std::vector<RunConfig> grid(6);
  grid[1].model.name = "gpt2-124m";
  grid[1].train.lr = 0.1 + 0.2;  // 0.30000000000000004
  grid[1].train.min_lr = 1e-7;
  grid[1].pipeline.pipelines = {2, 3};
  grid[2].data.path = "dir with \"quotes\"\\ and\ttab\nline";
  grid[2].model.seed = -5;
  grid[2].data.seed = 9007199254740993;
  grid[3].cluster = {16, 8, "cuda", {1, 0, 2, 3, 4, 5, 6, 7}, "nccl", 80.0};
  grid[3].elastic = {29500, 2.5, 1e3};
  grid[4].train = {1, 1.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 4, 7, "o", 5, "r/ckpt.json", 3, 0};
  grid[4].train.precision = "bf16";
  grid[5].pipeline.pipelines = {1};
  grid[5].pipeline.fault_tolerance = 0;
  grid[5].pipeline.profile = "p\u00e9.json";
  for (size_t i = 0; i < grid.size(); ++i) {
    for (bool comments : {false, true}) {
      std::string text = to_toml(grid[i], comments);
      RunConfig back = parse_run_config(text, "round-trip", {});
      EXPECT_EQ(back, grid[i]) << "config " << i << " comments " << comments << ":\n" << text;
    }
  }
  EXPECT_EQ(to_toml(grid[1]).find("comments"), std::string::npos);
  EXPECT_NE(to_toml(grid[1], true).find("# "), std::string::npos);
}

// out_dir/config.toml (resolved_run.h): the [resolved.*] tables say what ran, and the file loads
// back as the config given, which the tables do not touch.
TEST(RunConfig, TheSavedConfigLoadsBackAsGivenAndRecordsWhatRan) {
  ResolvedRun run;
  run.model = model::resolve_config("llama", "tiny", 12, "", 300);
  run.model.name = "a \"quoted\" name";
  run.data_vocab = 300;
  run.data_tokenizer = "data/tok\\enizer.json";
  run.precision = "bf16";
  run.layout.microbatch_size = 2;
  for (int devices : {1, 2}) {
    PipelineLayout p;
    p.num_devices = devices;
    p.widths.assign(devices, 1);
    p.schedule.kind = devices == 1 ? "gpipe" : "1f1b";
    p.schedule.num_chunks = 2 * devices;
    p.num_microbatches = 3 + devices;
    run.layout.pipelines.push_back(p);
  }
  std::vector<RunConfig> given(2);
  given[1].model.name = "tiny";
  given[1].model.family = "llama";
  given[1].data.path = "dir with \"quotes\"";
  given[1].pipeline.pipelines = {1, 2};
  for (const auto& c : given) {
    const std::string text = saved_config_toml(c, run);
    EXPECT_EQ(parse_run_config(text, "saved", {}), c) << text;
    const toml::table t = toml::parse(text);
    const auto r = t["resolved"];
    EXPECT_EQ(r["model"]["family"].value<std::string>(), "llama") << text;
    EXPECT_EQ(r["model"]["name"].value<std::string>(), run.model.name) << text;
    EXPECT_EQ(r["model"]["blocks"].value<int64_t>(), run.model.n_blocks) << text;
    EXPECT_EQ(r["model"]["kv_heads"].value<int64_t>(), run.model.n_kv_heads) << text;
    EXPECT_EQ(r["model"]["ffn_hidden"].value<int64_t>(), run.model.ffn_hidden) << text;
    EXPECT_EQ(r["model"]["vocab_size"].value<int64_t>(), 300) << text;
    EXPECT_EQ(r["model"]["seq_len"].value<int64_t>(), 12) << text;
    EXPECT_EQ(r["data"]["tokenizer"].value<std::string>(), run.data_tokenizer) << text;
    EXPECT_EQ(r["train"]["precision"].value<std::string>(), "bf16") << text;
    EXPECT_EQ(r["pipeline"]["pipelines"][1].value<int64_t>(), 2) << text;
    EXPECT_EQ(r["pipeline"]["schedules"][0].value<std::string>(), "gpipe") << text;
    EXPECT_EQ(r["pipeline"]["schedules"][1].value<std::string>(), "1f1b") << text;
    EXPECT_EQ(r["pipeline"]["chunks"][1].value<int64_t>(), 4) << text;
    EXPECT_EQ(r["pipeline"]["microbatches"][0].value<int64_t>(), 4) << text;
  }
}

}  // namespace
}  // namespace bw::runtime
