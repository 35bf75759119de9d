// Layer profiler: one entry per layer with positive times; parameter and output bytes equal the
// model's shapes; measured activation bytes agree with the analytic count of saved tensors; the
// CLI writes a profile the planner's loader accepts (it loads it back before exiting 0).
#include "model/profiler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <numeric>

#include "../scratch.h"
#include "core/error.h"
#include "core/json.h"

namespace bw::model {
namespace {

struct Case {
  int microbatch_size, seq_len;
};

class ProfilerGrid : public ::testing::TestWithParam<Case> {};

TEST_P(ProfilerGrid, OneEntryPerLayerWithConsistentSizes) {
  const auto [mbs, T] = GetParam();
  ProfileOptions o;
  o.model = "tiny";
  o.microbatch_size = mbs;
  o.seq_len = T;
  o.repeats = 3;
  o.warmup = 1;
  MeasuredProfile p = measure_profile(o);
  GptConfig c = named_config("tiny", 256);
  c.seq_len = T;
  ASSERT_EQ(static_cast<int>(p.layers.size()), num_layers(c));
  EXPECT_EQ(p.microbatch_size, mbs);
  EXPECT_EQ(p.seq_len, T);
  for (int i = 0; i < num_layers(c); ++i) {
    const LayerMeasurement& l = p.layers[i];
    SCOPED_TRACE(l.name);
    EXPECT_GT(l.forward_ms, 0);
    EXPECT_GT(l.backward_ms, 0);
    EXPECT_GE(l.backward_weight_ms, 0);
    EXPECT_DOUBLE_EQ(l.backward_weight_ms, std::max(0.0, l.backward_ms - l.backward_input_ms));
    if (i == 0) {
      EXPECT_EQ(l.name, "embedding");
      EXPECT_EQ(l.backward_input_ms, 0);
    } else {
      EXPECT_GT(l.backward_input_ms, 0);
    }
    EXPECT_EQ(l.param_bytes, 4 * num_parameters(c, i));
    auto shape = output_shape(c, i, mbs);
    int64_t out_elems =
        std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
    EXPECT_EQ(l.output_bytes, i == num_layers(c) - 1 ? 0 : 4 * out_elems);
    int64_t formula = activation_bytes_formula(c, i, mbs);
    if (p.activation_measured) {
      // The allocator sees what autograd really keeps: the saved tensors plus a size-independent
      // ~25 KiB of graph nodes and tensor metadata per block, and small extras (LayerNorm
      // statistics, the causal mask, position ids). Allow 10% plus 32 KiB.
      EXPECT_NEAR(static_cast<double>(l.activation_bytes), static_cast<double>(formula),
                  0.10 * formula + 32768)
          << "measured " << l.activation_bytes << " formula " << formula;
    } else {
      EXPECT_EQ(l.activation_bytes, formula);
    }
  }
  EXPECT_EQ(p.layers[1].name, "block1");
  EXPECT_EQ(p.layers.back().name, "head");
}

// Differences between two microbatch sizes cancel the constant per-layer overhead, so the
// measured growth must match the formula's growth closely.
TEST(Profiler, MeasuredActivationGrowsLikeTheFormula) {
  ProfileOptions o;
  o.model = "tiny";
  o.seq_len = 32;
  o.repeats = 1;
  o.warmup = 1;
  o.microbatch_size = 2;
  MeasuredProfile small = measure_profile(o);
  if (!small.activation_measured) GTEST_SKIP() << "no allocator statistics on this platform";
  o.microbatch_size = 6;
  MeasuredProfile big = measure_profile(o);
  GptConfig c = named_config("tiny", 256);
  c.seq_len = 32;
  for (int i = 0; i < num_layers(c); ++i) {
    double measured =
        static_cast<double>(big.layers[i].activation_bytes - small.layers[i].activation_bytes);
    double formula =
        static_cast<double>(activation_bytes_formula(c, i, 6) - activation_bytes_formula(c, i, 2));
    EXPECT_NEAR(measured, formula, 0.05 * formula + 2048) << "layer " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ProfilerGrid,
                         ::testing::Values(Case{1, 8}, Case{2, 16}, Case{3, 12}, Case{4, 32}),
                         [](const auto& info) {
                           return "mbs" + std::to_string(info.param.microbatch_size) + "_seq" +
                                  std::to_string(info.param.seq_len);
                         });

// bf16 mixed precision, as the runtime runs it: activations cross layer boundaries in bf16 (half
// the fp32 bytes), parameters stay fp32, and what autograd keeps follows the bf16 formula of the
// model's shape (shape/shape.h), which must be smaller than the fp32 one.
TEST(Profiler, Bf16HalvesTheBoundaryBytesAndFollowsItsFormula) {
  ProfileOptions o;
  o.model = "tiny";
  o.microbatch_size = 4;
  o.seq_len = 32;
  o.repeats = 1;
  o.warmup = 1;
  o.precision = Precision::kBf16;
  const MeasuredProfile bf16 = measure_profile(o);
  o.precision = Precision::kFp32;
  const MeasuredProfile fp32 = measure_profile(o);
  EXPECT_NE(bf16.device.find("bf16"), std::string::npos) << bf16.device;
  GptConfig c = named_config("tiny", 256);
  c.seq_len = 32;
  for (int i = 0; i < num_layers(c); ++i) {
    SCOPED_TRACE(bf16.layers[i].name);
    EXPECT_EQ(bf16.layers[i].param_bytes, fp32.layers[i].param_bytes);
    if (i + 1 < num_layers(c)) {
      EXPECT_EQ(2 * bf16.layers[i].output_bytes, fp32.layers[i].output_bytes);
    }
    const int64_t formula = activation_bytes_formula(c, i, 4, Precision::kBf16);
    if (i > 0) EXPECT_LT(formula, activation_bytes_formula(c, i, 4, Precision::kFp32));
    if (bf16.activation_measured && i > 0) {
      // bf16 adds each layer's weight copies (autocast's cache) and small fp32 extras
      // (normalisation statistics): the same allowance as fp32, plus the layer's bf16 weights.
      const double allowance = 0.10 * formula + 32768 + bf16.layers[i].param_bytes / 2.0;
      EXPECT_NEAR(static_cast<double>(bf16.layers[i].activation_bytes),
                  static_cast<double>(formula), allowance)
          << "measured " << bf16.layers[i].activation_bytes << " formula " << formula;
    }
  }
}

TEST(Profiler, BadOptionsAreConfigErrors) {
  ProfileOptions o;
  o.model = "tiny";
  o.microbatch_size = 0;
  EXPECT_THROW(measure_profile(o), ConfigError);
  o.microbatch_size = 1;
  o.model = "huge";
  EXPECT_THROW(measure_profile(o), ConfigError);
}

TEST(Profiler, JsonHasThePlannerFields) {
  MeasuredProfile p;
  p.model = "tiny";
  p.microbatch_size = 2;
  p.device = "cpu (1 thread)";
  p.layers.push_back({"embedding", 0.5, 1.5, 0.0, 1.5, 256, 4096, 8192});
  json::Json doc = to_profile_json(p);
  EXPECT_EQ(doc["model"], "tiny");
  EXPECT_EQ(doc["microbatch_size"], 2);
  EXPECT_EQ(doc["device"], "cpu (1 thread)");
  ASSERT_EQ(doc["layers"].size(), 1u);
  const auto& l = doc["layers"][0];
  EXPECT_EQ(l["name"], "embedding");
  EXPECT_EQ(l["forward_ms"], 0.5);
  EXPECT_EQ(l["backward_ms"], 1.5);
  EXPECT_EQ(l["backward_input_ms"], 0.0);
  EXPECT_EQ(l["backward_weight_ms"], 1.5);
  EXPECT_EQ(l["activation_bytes"], 256);
  EXPECT_EQ(l["output_bytes"], 4096);
  EXPECT_EQ(l["param_bytes"], 8192);
  EXPECT_EQ(l.size(), 8u);
}

// Runs the CLI with a deadline (coreutils timeout kills it); returns exit status and output.
std::pair<int, std::string> run_cli(const std::string& args) {
  std::string cmd = fmt::format("timeout -k 5 120 {} {} 2>&1", BW_BINARY, args);
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(ProfileMeasureCli, WritesAProfileThePlannerLoads) {
  std::string path = (bw::testing::process_scratch("bw_profile_cli") / "profile.json").string();
  std::filesystem::remove(path);
  auto [code, out] = run_cli(fmt::format(
      "profile measure --model tiny --microbatch-size 2 --repeats 2 --warmup 1 --out {}", path));
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("block2"), std::string::npos) << out;
  json::Json doc = json::read_file(path);
  EXPECT_EQ(doc["model"], "tiny");
  EXPECT_EQ(doc["microbatch_size"], 2);
  ASSERT_EQ(doc["layers"].size(), 4u);
  for (const auto& l : doc["layers"]) {
    EXPECT_GT(l["forward_ms"].get<double>(), 0) << l.dump();
    EXPECT_GT(l["backward_ms"].get<double>(), 0) << l.dump();
    EXPECT_GT(l["param_bytes"].get<double>(), 0) << l.dump();
  }
  auto [bad, msg] = run_cli("profile measure --model tiny --microbatch-size 0 --out " + path);
  EXPECT_EQ(bad, 2) << msg;
  EXPECT_NE(msg.find("error: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("--microbatch-size"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bw::model
