// Schedules as CSV text, in PyTorch pipelining's format (`_dump_csv` / `_load_csv`).
//
// One row per device, comma-separated actions `<chunk><KIND><microbatch>` (`3F1`, `5SEND_B2`),
// chunk actions `<chunk><KIND>` (`3UNSHARD`, `3RESHARD`, `3REDUCE_GRAD`) and overlapped pairs
// `(a;b)OVERLAP_F_B` (read as the OVERLAP_F_B marker followed by a and b, action.h; written back
// as one cell); an empty cell is an idle slot and is dropped on reading. Both of PyTorch's
// formats read as they are: `compute_only` (what `_dump_csv` of a schedule class writes) and
// `compute_comms` (what `_PipelineScheduleRuntime._dump_csv` writes by default). The file carries no placement: pass it, or let the reader infer
// it from which device runs each chunk's compute actions (which is ambiguous only for a chunk that
// never runs, an error). Malformed input is a ConfigError naming line and column. A file is at
// most io::kMaxTableBytes; ids and sizes are bounded (below) before any table is sized from them.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace bw::schedule {

inline constexpr int kMaxCsvDevices = 4096;
inline constexpr int kMaxCsvChunks = 1 << 16;
inline constexpr int kMaxCsvMicrobatches = 1 << 20;
inline constexpr long long kMaxCsvChunkMicrobatches = 1LL << 24;  // chunks x microbatches

struct CsvOptions {
  std::string kind = "custom";
  std::optional<std::vector<int>> chunk_device;  // placement; inferred when absent
  std::vector<int> chunk_stage;                  // model stages; empty = chunk c is stage c
  std::string source = "csv";                    // names the input in messages (a path)
};

Schedule read_csv(std::istream& in, const CsvOptions& options = {});
Schedule read_csv_file(const std::string& path, CsvOptions options = {});
void write_csv(std::ostream& out, const Schedule& s);
void write_csv_file(const std::string& path, const Schedule& s);
std::string to_csv(const Schedule& s);

}  // namespace bw::schedule
