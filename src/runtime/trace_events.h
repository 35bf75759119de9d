// A trace of the real run (train.trace_steps, docs/observability.md "Trace of the real run"):
// what each rank records of a traced step, how it travels to the coordinator, and how the
// coordinator merges every rank's record into one Chrome/Perfetto trace named like the
// simulator's (`breakwater schedule --trace`, sim/render.h), so that the measured step and the
// simulated one open side by side and `breakwater trace compare` can read both.
//
// Clocks: every span is in microseconds of the host's wall clock (CLOCK_REALTIME), read once per
// process and advanced by its monotonic clock (trace_time_us), so a process's spans never go
// backwards. Processes of one host therefore share one clock, up to the microseconds between the
// two clock reads at their start; across hosts the error is the hosts' own clock agreement
// (NTP/PTP; typically well under a millisecond on a LAN with chrony), which the trace states.
//
// Pure (no LibTorch): the store message a worker sends is decoded here with bounds, and the fuzz
// target of the coordinator's messages reads it as the coordinator does.
//
// Thread-safety: pure functions and plain values; trace_time_us is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace bw::runtime {

// One action of one rank: a compute action (cat "F", "B", "I", "W"; name as schedule::to_string),
// a send or receive from posted to completed (cat "comm"), or the gradient reduction (cat "sync",
// "GRAD_SYNC"), the optimizer ("optimizer", "OPTIMIZER") or the state transfer of a new
// generation ("state", "STATE_TRANSFER").
struct TraceSpan {
  std::string name;
  std::string cat;
  int64_t begin_us = 0;
  int64_t end_us = 0;
  bool operator==(const TraceSpan&) const = default;
};

// Wall-clock microseconds of a monotonic time point of this process (see above).
int64_t trace_time_us(std::chrono::steady_clock::time_point t);

// At most this many steps are traced in one run, and a rank's record of one step holds at most
// kMaxTraceSpans spans (a store message of bounded size).
inline constexpr int kMaxTracedSteps = 64;
inline constexpr int kMaxTraceSpans = 1 << 16;

// train.trace_steps: "" (none), a step "7", a range "10-11" (inclusive), or a list of these
// "3,5,10-11", in 0-based step numbers (those of metrics.jsonl and elastic.inject). Returns the
// steps in increasing order. ConfigError naming train.trace_steps when the text is malformed, a
// range is reversed, a step is named twice, a step is outside 0..steps-1, or more than
// kMaxTracedSteps steps are named.
std::vector<int> parse_trace_steps(const std::string& text, int steps);

// keys::trace (worker -> coordinator): {"step", "rank", "spans": [[name, cat, begin_us, end_us],
// ...]}.
struct RankTrace {
  int step = 0;
  int rank = 0;
  std::vector<TraceSpan> spans;
};
nlohmann::json to_json(const RankTrace& trace);
// ConfigError naming `where` and the field when `doc` is not one (a wrong type, a span that ends
// before it begins, too many spans, a name over 64 bytes).
RankTrace rank_trace_from_json(const nlohmann::json& doc, const std::string& where);

// What the coordinator knows of one traced step when it merges it: the generation that committed
// it, that generation's pipelines (schedule kind each) and where each rank sits (pipeline,
// device of the pipeline), its workers, and the record of every rank that sent one (a rank that
// died before it sent its record is missing).
struct TracedStep {
  int step = 0;
  int generation = 0;
  std::vector<std::string> pipeline_kinds;
  std::vector<std::pair<int, int>> rank_at;  // rank -> (pipeline, device)
  std::vector<int> workers;                  // rank -> worker id
  std::vector<RankTrace> ranks;
  std::vector<int> missing;  // ranks whose record never came
};

// One Chrome trace of every traced step: a process per (generation, pipeline), pid =
// generation * 1000 + pipeline, named "generation G pipeline P (kind)"; a track per device of the
// pipeline (tid = device, "device d (rank r, worker w)", as the simulator numbers them); one "X"
// slice per span with args {"step", "rank"}, at times relative to the earliest span of the first
// traced step. Sends and receives (cat "comm") overlap the compute and each other, and the slices
// of one track must nest: they go to tracks of their own per device track and direction ("device
// d (rank r, worker w) sends" / "receives", tid 2^21 and up), as many lanes as are in flight at
// once ("... sends #2", core/trace_lanes.h), with args.device = the device track's tid. otherData
// holds the steps, the clock's description and the missing ranks. Ranks of a sharded stage beyond
// its first get tracks of their own (tid = 100 + rank). `one_host`: every rank ran on one host (one
// clock), else the hosts' clock agreement bounds the alignment.
std::string merged_chrome_trace(const std::vector<TracedStep>& steps, bool one_host);

}  // namespace bw::runtime
