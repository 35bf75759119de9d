// Schedule-aware templates: predicts a template's iteration time and peak memory under a
// schedule kind with the timeline simulator (bw::sim), for TemplateOptions::evaluator.
//
// The template's stages become the schedule's devices: a stage's d devices act as one, sharded
// as in cost_model.h (each computes ceil(b/d) of every microbatch's b samples and keeps that
// share of the activations and 1/d of the parameter state; every layer of every chunk it holds
// adds its all-gathers to forward and backward and its gradient all-reduce to backward, and
// memory adds twice the largest layer it holds). Kinds:
//   "1f1b"        the template's own partition, one stage per device;
//   "interleaved" Megatron interleaved 1F1B, v = 2 chunks per device;
//   "hanayo-w1", "hanayo-w2"  Hanayo waves with W = 1, 2 (Hanayo, SC'23).
// The last three re-partition the layers evenly over their chunks (sim::balanced_partition) and
// need every stage of the template to have the same device count (else nullopt). Links: the
// inter-node link when the template spans nodes, the intra-node link otherwise.
//
// The estimate is linear in the microbatch count, fitted through simulations at m and 2m
// (m = the template's microbatches); peak memory is the simulation's at m, like the closed-form
// model's (a plan that gives a pipeline more microbatches than m may hold more in flight).
#pragma once

#include <string>
#include <vector>

#include "plan/plan_cost.h"
#include "plan/templates.h"
#include "schedule/generate.h"

namespace bw::plan {

// "1f1b", "interleaved", "hanayo-w1", "hanayo-w2".
std::vector<std::string> simulated_schedule_kinds();

// The schedule a pipeline of template `t` runs with `microbatches`: devices = t's stages (stage
// s = schedule device s), chunk c = t.chunks[c]. For schedule::generate. ConfigError for a kind
// not in simulated_schedule_kinds().
schedule::ScheduleSpec schedule_spec(const Template& t, int microbatches);

// The evaluator for TemplateOptions. Unknown kinds are a ConfigError listing the known ones;
// kinds that cannot run a template (too few layers or microbatches, mixed device counts) give
// nullopt. `recompute`: activation recomputation, as CostOptions::recompute.
// `work`, when given, counts the simulated slots (plan_cost.h); it must outlive the evaluator.
ScheduleEvaluator simulator_evaluator(const Profile& profile, const Cluster& cluster,
                                      double state_bytes_per_param_byte = kStateBytesPerParamByte,
                                      bool recompute = false, PlanWork* work = nullptr);

}  // namespace bw::plan
