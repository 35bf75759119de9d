// Turning a run config into a plan with node identities (plan::Plan, with the templates that
// reconfiguration draws from), and a plan into a generation's run layout: how many pipelines of
// how many devices, which microbatches each computes, its schedule (generated, lowered and
// validated by schedule/), its chunks' layer ranges, and which worker runs each rank. The
// coordinator publishes the result (runtime/layout.h).
//
// Nodes and workers: node n has cluster.devices_per_node devices; worker id n * g + d runs local
// device d of node n in every generation (its rank changes with the plan). A template stage on
// d devices of one node runs sharded on d ranks (runtime/shard.h); one the runtime cannot run (d
// above the microbatch size, a zero-bubble schedule on a sharded stage) is a ConfigError, never a
// silent change of plan.
//
// Templates for every config path: with a profile, the planner's (plan::make_plan); otherwise
// uniform templates for every node count 1..N: the config's schedule on all n * g devices, the
// layers split evenly over the chunks, costs uniform per layer (so the batch split follows the
// device counts). When a pipeline's microbatch count after a re-split is too small for its
// schedule, the schedule is re-fitted (fewer waves, then 1f1b, then gpipe) and a note says so.
//
// Pipelines come from `pipeline.pipelines` when given (microbatches then split in proportion to
// device counts; the config's schedule kind on even layer ranges); else, with a profile
// (`pipeline.profile`, e.g. from `breakwater profile measure`), from the planner (plan::make_plan:
// Oobleck's templates and instantiation with schedule-aware templates, at least
// fault_tolerance + 1 pipelines): each pipeline then runs its template's schedule kind and chunks,
// and the planner splits the microbatches; else, on a uniform per-device estimate,
// fault_tolerance + 1 pipelines of nearly equal size with the config's schedule.
// When a wave or interleaved schedule would need more chunks than the model has layers, the wave
// count (or chunks per device) is lowered to the largest that fits, and the change is reported in
// `notes`.
//
// The memory check (cluster.memory_gb > 0) estimates each device's need as parameters, gradients
// and two AdamW moments (16 bytes per parameter) plus the activations of the microbatches it keeps
// in flight; a device over the limit is a ConfigError naming the device, its layers, the numbers
// and the fix.
#pragma once

#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/placement.h"
#include "plan/plan.h"
#include "plan/templates.h"
#include "runtime/config.h"
#include "runtime/layout.h"
#include "schedule/schedule.h"

namespace bw::elastic {

struct LayoutPlan {
  runtime::RunLayout layout;
  std::vector<std::string> notes;  // adjustments worth telling the user
};

// A generation's plan and what it means to the workers.
struct RunPlan {
  plan::Plan plan;  // node identities; plan.generation is the layout's generation
  runtime::RunLayout layout;
  std::vector<int> workers;  // rank -> worker id
  std::vector<std::string> notes;
};

// What reconfiguration needs besides the current plan.
struct PlanContext {
  plan::TemplateSet templates;
  plan::Cluster cluster;
  int devices_per_node = 1;
  runtime::RunConfig config;
  model::GptConfig model;
};

// Generation 0: the context and the first plan. `world_size` devices in total; when it differs
// from cluster.nodes * cluster.devices_per_node (--devices), each device is a node.
std::pair<PlanContext, RunPlan> initial_plan(const runtime::RunConfig& config,
                                             const model::GptConfig& model, int world_size);

// The layout of `plan` (any generation).
RunPlan layout_plan(const PlanContext& context, const plan::Plan& plan);

// Generation 0's layout only (benchmarks).
LayoutPlan plan_layout(const runtime::RunConfig& config, const model::GptConfig& model,
                       int world_size, int generation);

// One process running the whole model: a single pipeline of one device, F then B per microbatch.
runtime::RunLayout single_device_layout(const runtime::RunConfig& config,
                                        const model::GptConfig& model, int generation);

// ConfigError when a device's estimate exceeds cluster.memory_gb (> 0).
void check_memory(const runtime::RunLayout& layout, const model::GptConfig& model,
                  const runtime::RunConfig& config);

// Estimated bytes device `device` of pipeline `pipeline` needs (see above).
// `recompute`: pipeline.recompute = "full" (a microbatch in flight keeps each layer's input).
// `precision`: train.precision (activation bytes, bf16's weight copies).
double estimate_device_bytes(const runtime::RunLayout& layout, const model::GptConfig& model,
                             int pipeline, int device, bool recompute = false,
                             model::Precision precision = model::Precision::kFp32);

}  // namespace bw::elastic
