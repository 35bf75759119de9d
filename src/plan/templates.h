// Pipeline templates (Oobleck, SOSP'23, section 4.1), found exactly.
//
// For every node count n, the template is the pipeline on exactly n nodes (all n*g devices used,
// stages inside one node each) minimising the 1F1B iteration time T(m) of cost_model.h subject
// to per-device memory. Oobleck's divide-and-conquer keeps one best sub-plan per memo entry; T
// depends on the bottleneck stage, so that is not exact. Here one dynamic program over suffixes
// (first layer i, devices used u) keeps, per state, the Pareto set of labels
// (stages after, bottleneck time, sum of stage times): the number of stages after a stage fixes
// its in-flight microbatches (memory), and T is monotone in the other two, so discarding only
// dominated labels loses no optimum. Node boundaries sit at multiples of g from the end, so one
// table answers every n at once (root state (0, n*g)). The result equals exhaustive search
// (tests/plan/templates_test.cc).
//
// Schedule-aware templates: after the search, each template may be re-evaluated under other
// schedule kinds through TemplateOptions::evaluator; the fastest kind that fits memory wins (if
// none fits, the closed-form 1F1B template stays).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plan/cost_model.h"

namespace bw::plan {

// A stage: a group of devices on one node that run the same layers (the schedule's "device"),
// sharded when there are two or more (cost_model.h: each device holds 1/d of the layers' state
// and computes ceil(b/d) of each microbatch's b samples). first_layer/num_layers are its layers
// in the 1F1B partition the search optimised; the layers its devices actually hold under the
// template's schedule are the template's chunks with this stage (the same single range for 1f1b;
// several ranges for interleaved and Hanayo).
struct Stage {
  int first_layer = 0;
  int num_layers = 0;
  int node = 0;          // node index within the pipeline, 0 .. num_nodes - 1
  int first_device = 0;  // first local device on that node
  int num_devices = 0;
  double forward_ms = 0;  // per microbatch, one device's share of the compute only
  double backward_ms = 0;  // with the recomputed forward when the plan recomputes
  double shard_comm_ms = 0;  // per microbatch: parameter all-gathers + gradient all-reduces
  double comm_ms = 0;        // boundary transfer to the next stage, both directions
  double stage_ms = 0;       // forward + backward + shard_comm + comm
  double param_bytes = 0;    // of the stage's layers (its devices hold 1/num_devices each)
  double memory_bytes = 0;   // peak per device under the template's schedule

  int end_layer() const { return first_layer + num_layers; }  // one past the last
  bool sharded() const { return num_devices >= 2; }
};

// A contiguous range of layers run as one unit by one stage's devices (docs/design.md: chunk), in
// model order: chunk c + 1 starts where chunk c ends.
struct Chunk {
  int first_layer = 0;
  int num_layers = 0;
  int stage = 0;  // the stage (device group) that runs it

  int end_layer() const { return first_layer + num_layers; }
};

// Predicted iteration time as a function of the microbatch count: fixed_ms + per_mb_ms * m.
// For 1F1B: fixed = sum - max, per_mb = max. A kind that re-partitions the layers returns its
// chunks and per-stage memory; empty means the template's stages as they are.
struct ScheduleEstimate {
  double fixed_ms = 0;
  double per_microbatch_ms = 0;
  double peak_memory_bytes = 0;
  std::vector<Chunk> chunks;
  std::vector<double> stage_memory_bytes;
};

struct Template {
  int num_nodes = 0;
  int devices_per_node = 0;
  std::string schedule = "1f1b";  // "1f1b", "interleaved", "hanayo-w1", "hanayo-w2", ...
  std::vector<Stage> stages;
  std::vector<Chunk> chunks;  // model order; one per stage, equal to it, for 1f1b
  int microbatches = 0;       // the m it was optimised for
  double sum_stage_ms = 0;
  double max_stage_ms = 0;
  int bottleneck = 0;
  ScheduleEstimate estimate;  // of `schedule`
  double peak_memory_bytes = 0;

  int num_stages() const { return static_cast<int>(stages.size()); }
  double iteration_ms(int m) const { return estimate.fixed_ms + estimate.per_microbatch_ms * m; }
  // The stage whose devices hold `layer` (through its chunk).
  int stage_of_layer(int layer) const;
  // The layer ranges [first, end) a stage's devices hold, in model order.
  std::vector<std::pair<int, int>> layers_of_stage(int stage) const;
};

// Predicts a template's time and memory under a schedule kind; nullopt if the kind cannot run
// it (e.g. too few microbatches) or it does not fit. Used for schedule-aware templates; called
// from several threads at once when TemplateOptions::threads > 1, so it must be thread-safe.
using ScheduleEvaluator =
    std::function<std::optional<ScheduleEstimate>(const Template&, const std::string& kind)>;

struct TemplateOptions {
  CostOptions cost;                         // microbatches m and the memory model
  int min_nodes = 1;                        // range of node counts to produce
  int max_nodes = 0;                        // 0: the cluster's node count
  std::vector<std::string> schedule_kinds;  // extra kinds to try besides 1f1b
  ScheduleEvaluator evaluator;              // required when schedule_kinds is not empty
  int threads = 1;  // worker threads for the search; the result is the same for any count
};

// Makes `kind` with `estimate` (from a ScheduleEvaluator) the template's schedule: its chunks,
// stage parameter bytes and memory follow the estimate.
void set_schedule(Template& t, const std::string& kind, ScheduleEstimate estimate,
                  const CostModel& model);

struct TemplateSet {
  int num_layers = 0;
  int devices_per_node = 0;
  int microbatch_size = 1;
  std::vector<Template> templates;  // one per feasible node count, ascending

  // Fewest nodes that fit the model (n0); nullopt when none does.
  std::optional<int> min_nodes() const;
  const Template* find(int num_nodes) const;
};

// Closed-form 1F1B estimate of a template's stages (the default evaluator's "1f1b").
ScheduleEstimate one_f_one_b_estimate(const Template& t);

TemplateSet generate_templates(const Profile& profile, const Cluster& cluster,
                               const TemplateOptions& options);

// The schedule-aware step of generate_templates on its own: re-evaluates each template of `set`
// under options.schedule_kinds (nothing when empty) and keeps the fastest kind that fits.
void choose_schedules(TemplateSet& set, const Profile& profile, const Cluster& cluster,
                      const TemplateOptions& options);

// Builds a Template from a stage shape (fills times, memory, node placement). Used by the
// search and by tests.
Template make_template(const CostModel& model, const std::vector<StageShape>& shape, int num_nodes);

}  // namespace bw::plan
