// Golden schedules: the per-device lists of every kind on small cases, pinned as CSV files in
// tests/golden/schedules/. A change in a generator shows up as a diff there; BW_UPDATE_GOLDEN=1
// rewrites the files (then review the diff).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "schedule/generate.h"

namespace bw::schedule {
namespace {

struct Case {
  std::string file;
  ScheduleSpec spec;
  bool lowered;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& kind : schedule_kinds()) {
    ScheduleSpec s{.kind = kind, .devices = 4, .microbatches = 8};
    if (kind == "hanayo") s.waves = 2;
    out.push_back({kind + "_p4_b8.csv", s, false});
  }
  out.push_back(
      {"hanayo_p4_b4_w1.csv", {.kind = "hanayo", .devices = 4, .microbatches = 4}, false});
  out.push_back(
      {"1f1b_p4_b8_lowered.csv", {.kind = "1f1b", .devices = 4, .microbatches = 8}, true});
  out.push_back({"hanayo_p4_b8_w2_lowered.csv",
                 {.kind = "hanayo", .devices = 4, .microbatches = 8, .waves = 2},
                 true});
  out.push_back({"interleaved_p4_b10_g6.csv",
                 {.kind = "interleaved", .devices = 4, .microbatches = 10, .group_size = 6},
                 false});
  return out;
}

TEST(Golden, SchedulesMatchTheirCsvFiles) {
  const bool update = std::getenv("BW_UPDATE_GOLDEN") != nullptr;
  for (const auto& c : cases()) {
    Schedule s = generate(c.spec);
    if (c.lowered) s = lower(s);
    const std::string text = to_csv(s);
    const std::string path = std::string(BW_GOLDEN_DIR) + "/" + c.file;
    if (update) {
      std::ofstream(path) << text;
      continue;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << path << " is missing; run with BW_UPDATE_GOLDEN=1 to create it";
    std::stringstream want;
    want << in.rdbuf();
    if (want.str() == text) continue;
    // Report the first differing device row.
    std::istringstream a(want.str()), b(text);
    std::string la, lb;
    for (int row = 0;; ++row) {
      const bool ga = static_cast<bool>(std::getline(a, la));
      const bool gb = static_cast<bool>(std::getline(b, lb));
      if (!ga && !gb) break;
      if (la != lb) {
        ADD_FAILURE() << c.file << ": device " << row << " differs\n  golden:    " << la
                      << "\n  generated: " << lb
                      << "\n(BW_UPDATE_GOLDEN=1 rewrites the golden files)";
        break;
      }
    }
  }
}

TEST(Golden, GoldenFilesAreValidSchedules) {
  for (const auto& c : cases()) {
    const Schedule s = read_csv_file(std::string(BW_GOLDEN_DIR) + "/" + c.file,
                                     {.kind = c.spec.kind, .chunk_stage = chunk_stages(c.spec)});
    auto r = check(s, {.semantics = CommSemantics::kRendezvous});
    EXPECT_TRUE(r.ok) << c.file << ": " << r.problem << "\n" << r.grid;
  }
}

}  // namespace
}  // namespace bw::schedule
