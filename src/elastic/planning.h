// Turning a run config into a generation's run layout: how many pipelines of how many devices,
// which microbatches each computes, its schedule (generated, lowered and validated by schedule/),
// and its chunks' layer ranges. The coordinator publishes the result (runtime/layout.h).
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
#include "runtime/config.h"
#include "runtime/layout.h"
#include "schedule/schedule.h"

namespace bw::elastic {

struct LayoutPlan {
  runtime::RunLayout layout;
  std::vector<std::string> notes;  // adjustments worth telling the user
};

// `world_size` devices in total (nodes * devices_per_node).
LayoutPlan plan_layout(const runtime::RunConfig& config, const model::GptConfig& model,
                       int world_size, int generation);

// One process running the whole model: a single pipeline of one device, F then B per microbatch.
runtime::RunLayout single_device_layout(const runtime::RunConfig& config,
                                        const model::GptConfig& model, int generation);

// ConfigError when a device's estimate exceeds cluster.memory_gb (> 0).
void check_memory(const runtime::RunLayout& layout, const model::GptConfig& model,
                  const runtime::RunConfig& config);

// Estimated bytes device `device` of pipeline `pipeline` needs (see above).
double estimate_device_bytes(const runtime::RunLayout& layout, const model::GptConfig& model,
                             int pipeline, int device);

}  // namespace bw::elastic
