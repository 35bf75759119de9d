// Schedules PyTorch wrote (tests/golden/pytorch, with their origin): read as they are, written
// back byte for byte, validated (also with blocking sends once lowered) and simulated.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "schedule/fsdp.h"
#include "schedule/generate.h"

namespace bw::schedule {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PyTorchGolden, DualPipeVReadsWritesAndValidatesAsIs) {
  const std::string path = std::string(BW_PYTORCH_DIR) + "/dualpipev_4rank_10mb.csv";
  const std::string text = slurp(path);
  ASSERT_FALSE(text.empty()) << path;
  const Schedule s = read_csv_file(path);
  EXPECT_EQ(s.num_devices, 4);
  EXPECT_EQ(s.num_chunks, 8);
  EXPECT_EQ(s.num_microbatches, 10);
  // V placement: rank r holds chunks r and 7 - r.
  for (int c = 0; c < 8; ++c) EXPECT_EQ(s.chunk_device[c], c < 4 ? c : 7 - c);
  EXPECT_EQ(to_csv(s), text);
  validate(s);
  const Schedule l = lower(s);
  validate(l);
  validate(l, {.semantics = CommSemantics::kRendezvous});
  // compute_comms with FSDP and gradient reduction, as PyTorch's runtime lowering writes it.
  const Schedule full = lower(add_fsdp_actions(s));
  validate(full);
  std::istringstream in(to_csv(full));
  EXPECT_EQ(to_csv(read_csv(in)), to_csv(full));
  EXPECT_EQ(to_csv(strip_comm(full)), text);
}

}  // namespace
}  // namespace bw::schedule
