// Schedules PyTorch's own code wrote (tests/golden/pytorch/README.md: how they were made): its
// interleaved 1F1B, looped BFS, interleaved zero bubble, ZBV and DualPipeV at P = 2, 4 and
// B = P, 2P, 4P (DualPipeV: B >= 2P), each in both of its CSV forms. Checked here: the reader
// takes every file as it is; every schedule validates and simulates; PyTorch's compute_comms
// lowering keeps its compute order; our FSDP pass (fsdp.h) puts UNSHARD, RESHARD and
// REDUCE_GRAD exactly where PyTorch's runtime does; and our interleaved and zb-v generators give
// PyTorch's orders on the whole grid.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "schedule/fsdp.h"
#include "schedule/generate.h"
#include "sim/timeline.h"

namespace bw::schedule {
namespace {

struct GridCase {
  std::string name;  // PyTorch's schedule, as in the file names
  int P, B;
  std::string path(const std::string& format) const {
    return std::string(BW_PYTORCH_DIR) + "/" + name + "_" + std::to_string(P) + "rank_" +
           std::to_string(B) + "mb_" + format + ".csv";
  }
};

std::vector<GridCase> grid() {
  std::vector<GridCase> out;
  for (int P : {2, 4})
    for (int B : {P, 2 * P, 4 * P})
      for (const char* name : {"interleaved1f1b", "loopedbfs", "interleavedzb", "zbv", "dualpipev"})
        if (std::string(name) != "dualpipev" || B >= 2 * P) out.push_back({name, P, B});
  return out;
}

std::string slurp_without_cr(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  std::erase(s, '\r');  // Python's csv writer ends rows with \r\n
  return s;
}

// Each device's actions without SEND/RECV, as text.
std::vector<std::string> without_comm(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& list : s.actions) {
    std::string row;
    for (const Action& a : list)
      if (!is_comm(a.kind)) row += to_string(a) + " ";
    out.push_back(row);
  }
  return out;
}

// Only compute actions and pair markers.
std::vector<std::string> compute_rows(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& list : s.actions) {
    std::string row;
    for (const Action& a : list)
      if (is_compute(a.kind) || a.kind == ActionKind::OVERLAP_F_B) row += to_string(a) + " ";
    out.push_back(row);
  }
  return out;
}

TEST(PyTorchGrid, EveryFileReadsValidatesAndSimulates) {
  for (const auto& c : grid()) {
    SCOPED_TRACE(c.path("compute_only"));
    const Schedule only = read_csv_file(c.path("compute_only"));
    const Schedule comms = read_csv_file(c.path("compute_comms"));
    EXPECT_EQ(only.num_devices, c.P);
    EXPECT_EQ(only.num_chunks, 2 * c.P);
    EXPECT_EQ(only.num_microbatches, c.B);
    EXPECT_FALSE(only.is_lowered());
    EXPECT_TRUE(comms.is_lowered());
    EXPECT_EQ(comms.chunk_device, only.chunk_device);
    validate(only);
    validate(lower(only));
    validate(lower(only), {.semantics = CommSemantics::kRendezvous});
    validate(comms);  // PyTorch's own lowering, with its FSDP and REDUCE_GRAD actions
    // A compute_comms file has no idle cells: written back, it is the file byte for byte.
    EXPECT_EQ(to_csv(comms), slurp_without_cr(c.path("compute_comms")));
    // Its lowering only inserts actions: the compute order is the compute_only file's.
    EXPECT_EQ(compute_rows(comms), compute_rows(only));
    // Free links: every form runs in the time of its compute order.
    const auto costs = sim::uniform_costs(only.num_chunks, 1.0, 2.0, 0, 0);
    const double t = sim::simulate(only, costs).makespan_ms;
    EXPECT_GT(t, 0);
    EXPECT_DOUBLE_EQ(sim::simulate(lower(only), costs).makespan_ms, t);
    EXPECT_DOUBLE_EQ(sim::simulate(comms, costs).makespan_ms, t);
  }
}

TEST(PyTorchGrid, OurFsdpPassPlacesChunkActionsAsPyTorchsRuntime) {
  for (const auto& c : grid()) {
    SCOPED_TRACE(c.path("compute_comms"));
    const Schedule only = read_csv_file(c.path("compute_only"));
    const Schedule theirs = read_csv_file(c.path("compute_comms"));
    EXPECT_EQ(without_comm(add_fsdp_actions(only)), without_comm(theirs));
  }
}

TEST(PyTorchGrid, OurGeneratorsGivePyTorchsOrders) {
  int compared = 0;
  for (const auto& c : grid()) {
    std::string kind;
    if (c.name == "interleaved1f1b") kind = "interleaved";
    if (c.name == "zbv") kind = "zb-v";
    if (kind.empty()) continue;  // no generator of ours for that one (docs/schedules.md)
    SCOPED_TRACE(c.path("compute_only"));
    const Schedule theirs = read_csv_file(c.path("compute_only"));
    const Schedule ours =
        generate({.kind = kind, .devices = c.P, .microbatches = c.B, .chunks_per_device = 2});
    EXPECT_EQ(ours.chunk_device, theirs.chunk_device);
    EXPECT_EQ(compute_rows(ours), compute_rows(theirs));
    ++compared;
  }
  EXPECT_EQ(compared, 12);
}

}  // namespace
}  // namespace bw::schedule
