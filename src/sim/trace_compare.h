// A measured training step against the simulator's prediction of it: `breakwater trace compare`.
//
// Both inputs are Chrome traces. The measured one (`breakwater train` with train.trace_steps) has
// one process per pipeline of a generation (pid = generation * 1000 + pipeline), one thread per
// device of that pipeline (tid = device index), and an "X" slice per action of each traced step
// named as schedule::to_string names it, with args.step telling the steps apart; sends and
// receives have cat "comm", last from posting to completion and lie on tracks of their own, with
// args.device naming the device (the tid of its track) they belong to; gradient reduction, the
// optimizer and state transfers (cats "sync", "optimizer", "state", or any other cat) have no
// simulated counterpart. The simulated one is chrome_trace()'s (render.h): pid 0, a track per
// device, compute as slices, SEND/RECV as instants whose args.done_ms ends their predicted
// duration, and otherData.makespan_ms.
//
// Per pipeline, device and class (F, B, I, W, SEND, RECV, then the rest) the comparison holds the
// measured mean duration of one action (over every slice of every traced step) against the
// predicted mean of the same actions, and per action the same pair, so the largest gaps can be
// listed. A measured device that ran an action its simulated counterpart lacks, that never ran a
// compute action the simulated device has, or that ran a step's computes in another order (GPipe
// against 1F1B: the same actions) is a different schedule: ConfigError naming device and action.
//
// Pure; the cli reads the files and prints what format_comparison() / comparison_json() return.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bw::sim {

// One (device, class) row. `predicted_ms` and `ratio` are NaN when the class is not simulated,
// `ratio` also when the prediction is 0 (a send over an infinitely fast link).
struct ClassComparison {
  int device = 0;
  std::string cls;  // "F", "B", "I", "W", "SEND", "RECV", ...; a measured-only class: its cat
  bool simulated = true;
  long long slices = 0;  // over every traced step
  double per_step = 0;   // slices / steps
  double measured_ms = 0;
  double predicted_ms = 0;
  double ratio = 0;  // measured_ms / predicted_ms
};

// One (device, action) pair of a simulated class, e.g. (1, "0F3").
struct ActionComparison {
  int device = 0;
  std::string name;
  std::string cls;
  long long slices = 0;
  double measured_ms = 0;  // mean over the traced steps
  double predicted_ms = 0;
  double gap_ms() const { return measured_ms - predicted_ms; }
};

struct PipelineComparison {
  long long pid = 0;
  std::string name;                  // the process_name, or "pid N"
  std::vector<std::string> threads;  // device -> thread_name ("device 1 (rank 5)"), "" if none
  int steps = 0;
  // Mean over steps of max(ts + dur) - min(ts) over the pipeline's slices of the step: every
  // slice, and only those of simulated classes.
  double measured_makespan_ms = 0;
  double measured_pipeline_makespan_ms = 0;
  double predicted_makespan_ms = 0;
  std::vector<ClassComparison> classes;   // by device, then F, B, I, W, SEND, RECV, the rest
  std::vector<ActionComparison> actions;  // by |gap| descending, then device, then name
};

struct TraceComparison {
  // The simulated schedule as its otherData names it ("" / 0 when absent).
  std::string kind;
  int devices = 0;
  int microbatches = 0;
  int chunks = 0;
  std::vector<PipelineComparison> pipelines;  // by pid
};

struct CompareOptions {
  std::optional<long long> pipeline;  // only this pid of the measured trace
};

// `real_name` and `sim_name` (the paths) name the traces in messages. ConfigError for a document
// that is not a Chrome trace (no traceEvents array, an event of the wrong types), a measured trace
// with no slices (or none of --pipeline), a simulated one without otherData.makespan_ms and
// otherData.devices, and a schedule that differs between the two.
TraceComparison compare_traces(const nlohmann::json& real, const std::string& real_name,
                               const nlohmann::json& sim, const std::string& sim_name,
                               const CompareOptions& options = {});

// Tables for people: per pipeline the makespan line, the class table and the `top` largest gaps.
std::string format_comparison(const TraceComparison& c, int top);
// The same for programs: {"simulated": {...}, "pipelines": [{"pid", "name", "steps",
// "makespan": {...}, "classes": [...], "largest_gaps": [...]}]}; NaN is null.
nlohmann::json comparison_json(const TraceComparison& c, int top);

}  // namespace bw::sim
