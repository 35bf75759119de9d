// train.tensorboard (elastic/metrics_sink.h, core/tb_events.h): the event files of a real run,
// with a worker killed mid-run, read back by TensorBoard's own loader (EventAccumulator, from the
// `tensorboard` package in BW_PYTHON; tb_reader.py). The reference is the run's own
// metrics.jsonl: every committed step's loss, lr, grad norm and tokens/s are in TensorBoard at
// that step (as float32), every rank has a compute fraction in (0, 1], and the loss of the node
// and the recovery are text events. An unwritable out_dir/tb is refused before the run starts.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../runtime/cli_runner.h"
#include "core/crc32c.h"
#include "core/tb_events.h"
#include "run_files.h"

namespace bw::elastic {
namespace {

namespace fs = std::filesystem;

std::string dir() {
  static const std::string d = testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_tensorboard_{}", getpid())).string());
  return d;
}

std::string corpus() { return testing::letters_corpus(dir(), 11); }

std::string run_reader(const std::string& tb_dir) {
  const std::string cmd = fmt::format("'{}' '{}/tests/elastic/tb_reader.py' '{}' 2>&1", BW_PYTHON,
                                      BW_SOURCE_DIR, tb_dir);
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) return "reader failed: " + out;
  return out;
}

bool have_tensorboard() {
  const std::string cmd = fmt::format("'{}' -c 'import tensorboard' >/dev/null 2>&1", BW_PYTHON);
  return std::system(cmd.c_str()) == 0;
}

TEST(TensorBoard, ARecoveredRunReadsBackInTensorBoardAsItsMetrics) {
  if (!have_tensorboard()) GTEST_SKIP() << "the tensorboard package is not in " << BW_PYTHON;
  const auto out_dir = (fs::path(dir()) / "run").string();
  const int steps = 6;
  auto r = testing::run_cli(
      {"train", "--quiet", "--cluster.nodes=4", "--model.name=tiny", "--data.path=" + corpus(),
       fmt::format("--train.steps={}", steps), "--train.sample_tokens=0",
       "--pipeline.microbatches=4", "--pipeline.microbatch_size=2", "--train.tensorboard=true",
       "--elastic.heartbeat_timeout_s=1.5", "--elastic.inject=kill:node=2:step=2:phase=backward",
       "--train.out_dir=" + out_dir},
      out_dir + ".log", 120);
  ASSERT_EQ(r.status, 0) << r.output;

  auto [step_lines, events] = testing::read_run_metrics(out_dir);
  ASSERT_EQ(step_lines.size(), static_cast<size_t>(steps));

  const auto text = run_reader((fs::path(out_dir) / "tb").string());
  nlohmann::json tb;
  ASSERT_NO_THROW(tb = nlohmann::json::parse(text)) << text;
  const auto& scalars = tb.at("scalars");
  for (const char* tag : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_s", "world"}) {
    SCOPED_TRACE(tag);
    ASSERT_TRUE(scalars.contains(tag)) << text;
    const auto& points = scalars.at(tag);
    ASSERT_EQ(points.size(), step_lines.size());
    for (size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(points[i][0].get<int>(), step_lines[i].at("step").get<int>() + 1);
      const float want = static_cast<float>(step_lines[i].at(tag).get<double>());
      EXPECT_EQ(static_cast<float>(points[i][1].get<double>()), want) << "step " << i;
    }
  }
  // Every rank of every generation has a compute fraction at each of its steps.
  std::map<int, int> rank_steps;
  for (const auto& s : step_lines) {
    for (const auto& rank : s.at("ranks")) ++rank_steps[rank.at("rank").get<int>()];
  }
  ASSERT_FALSE(rank_steps.empty());
  for (const auto& [rank, n] : rank_steps) {
    const auto tag = fmt::format("compute_fraction/rank{}", rank);
    ASSERT_TRUE(scalars.contains(tag)) << tag << "\n" << text;
    EXPECT_EQ(static_cast<int>(scalars.at(tag).size()), n) << tag;
    for (const auto& p : scalars.at(tag)) {
      EXPECT_GT(p[1].get<double>(), 0.0) << tag;
      EXPECT_LE(p[1].get<double>(), 1.0) << tag;
    }
  }
  // The events, as text, in TensorBoard's text plugin.
  ASSERT_EQ(tb.at("text_plugin_tags"), nlohmann::json::array({"events"})) << text;
  const auto& lines = tb.at("text").at("events");
  ASSERT_EQ(lines.size(), events.size()) << text;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto line = lines[i][1].get<std::string>();
    EXPECT_EQ(line.rfind(events[i].at("event").get<std::string>(), 0), 0u) << line;
  }
  bool lost = false, recovered = false;
  for (const auto& e : events) {
    lost |= e.at("event") == "node_lost";
    recovered |= e.at("event") == "recovered";
  }
  EXPECT_TRUE(lost && recovered) << r.output;
}

TEST(TensorBoard, AnUnwritableFolderIsRefusedBeforeTheRun) {
  const auto out_dir = (fs::path(dir()) / "blocked").string();
  fs::create_directories(out_dir);
  std::ofstream(fs::path(out_dir) / "tb") << "a file where the folder should be\n";
  auto r =
      testing::run_cli({"train", "--quiet", "--devices=1", "--model.name=tiny",
                        "--data.path=" + corpus(), "--train.steps=2", "--train.sample_tokens=0",
                        "--train.tensorboard=true", "--train.out_dir=" + out_dir},
                       out_dir + ".log", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("TensorBoard folder"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(fs::path(out_dir) / "metrics.jsonl") &&
               fs::file_size(fs::path(out_dir) / "metrics.jsonl") > 0)
      << "the run started";
}

// The framing, against its definition: length, masked CRC-32C of the length, data, masked
// CRC-32C of the data (the masking constant is TFRecord's).
TEST(TensorBoard, RecordFramingFollowsTfRecord) {
  const std::string data = "hello tensorboard";
  const auto rec = tb::record(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t{static_cast<uint8_t>(rec[i])} << (8 * i);
  EXPECT_EQ(len, data.size());
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(rec[at + i])} << (8 * i);
    return v;
  };
  auto mask = [](uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; };
  EXPECT_EQ(le32(8), mask(crc32c(rec.data(), 8)));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(le32(12 + data.size()), mask(crc32c(data.data(), data.size())));
}

}  // namespace
}  // namespace bw::elastic
