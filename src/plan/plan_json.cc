// JSON form of templates and plans (plan.h).
#include <fmt/format.h>

#include <limits>

#include "plan/plan.h"

namespace bw::plan {
namespace {

int get_int(const json::Json& j, const char* key, const std::string& where) {
  return static_cast<int>(json::get_int_in(j, key, where, std::numeric_limits<int>::min(),
                                           std::numeric_limits<int>::max()));
}

const json::Json& get_array(const json::Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw ConfigError(fmt::format("{}: missing field '{}'", where, key));
  const auto& v = j.at(key);
  if (!v.is_array())
    throw ConfigError(
        fmt::format("{}: field '{}' must be an array, got {}", where, key, v.type_name()));
  return v;
}

}  // namespace

json::Json to_json(const Template& t) {
  json::Json j;
  j["nodes"] = t.num_nodes;
  j["devices_per_node"] = t.devices_per_node;
  j["schedule"] = t.schedule;
  j["microbatches"] = t.microbatches;
  j["iteration_ms"] = t.iteration_ms(t.microbatches);
  j["fixed_ms"] = t.estimate.fixed_ms;
  j["per_microbatch_ms"] = t.estimate.per_microbatch_ms;
  j["sum_stage_ms"] = t.sum_stage_ms;
  j["max_stage_ms"] = t.max_stage_ms;
  j["bottleneck_stage"] = t.bottleneck;
  j["peak_memory_bytes"] = t.peak_memory_bytes;
  j["stages"] = json::Json::array();
  for (const auto& s : t.stages) {
    j["stages"].push_back({{"first_layer", s.first_layer},
                           {"num_layers", s.num_layers},
                           {"node", s.node},
                           {"first_device", s.first_device},
                           {"num_devices", s.num_devices},
                           {"sharded", s.sharded()},
                           {"forward_ms", s.forward_ms},
                           {"backward_ms", s.backward_ms},
                           {"shard_comm_ms", s.shard_comm_ms},
                           {"comm_ms", s.comm_ms},
                           {"stage_ms", s.stage_ms},
                           {"param_bytes", s.param_bytes},
                           {"memory_bytes", s.memory_bytes}});
  }
  j["chunks"] = json::Json::array();
  for (const auto& c : t.chunks)
    j["chunks"].push_back(
        {{"first_layer", c.first_layer}, {"num_layers", c.num_layers}, {"stage", c.stage}});
  return j;
}

Template template_from_json(const json::Json& j) {
  const std::string where = "template";
  Template t;
  t.num_nodes = get_int(j, "nodes", where);
  t.devices_per_node = get_int(j, "devices_per_node", where);
  t.schedule = json::get_string(j, "schedule", where);
  t.microbatches = get_int(j, "microbatches", where);
  t.estimate.fixed_ms = json::get_number(j, "fixed_ms", where);
  t.estimate.per_microbatch_ms = json::get_number(j, "per_microbatch_ms", where);
  t.sum_stage_ms = json::get_number(j, "sum_stage_ms", where);
  t.max_stage_ms = json::get_number(j, "max_stage_ms", where);
  t.bottleneck = get_int(j, "bottleneck_stage", where);
  t.peak_memory_bytes = json::get_number(j, "peak_memory_bytes", where);
  t.estimate.peak_memory_bytes = t.peak_memory_bytes;
  const auto& stages = get_array(j, "stages", where);
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string sw = fmt::format("template stage {}", i);
    const auto& sj = stages[i];
    Stage s;
    s.first_layer = get_int(sj, "first_layer", sw);
    s.num_layers = get_int(sj, "num_layers", sw);
    s.node = get_int(sj, "node", sw);
    s.first_device = get_int(sj, "first_device", sw);
    s.num_devices = get_int(sj, "num_devices", sw);
    s.forward_ms = json::get_number(sj, "forward_ms", sw);
    s.backward_ms = json::get_number(sj, "backward_ms", sw);
    s.shard_comm_ms = json::get_number(sj, "shard_comm_ms", sw);
    s.comm_ms = json::get_number(sj, "comm_ms", sw);
    s.stage_ms = json::get_number(sj, "stage_ms", sw);
    s.param_bytes = json::get_number(sj, "param_bytes", sw);
    s.memory_bytes = json::get_number(sj, "memory_bytes", sw);
    t.stages.push_back(s);
  }
  const auto& chunks = get_array(j, "chunks", where);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string cw = fmt::format("template chunk {}", i);
    Chunk c;
    c.first_layer = get_int(chunks[i], "first_layer", cw);
    c.num_layers = get_int(chunks[i], "num_layers", cw);
    c.stage = get_int(chunks[i], "stage", cw);
    t.chunks.push_back(c);
  }
  return t;
}

json::Json to_json(const Plan& plan) {
  json::Json j;
  j["generation"] = plan.generation;
  j["num_layers"] = plan.num_layers;
  j["devices_per_node"] = plan.devices_per_node;
  j["microbatch_size"] = plan.microbatch_size;
  j["global_microbatches"] = plan.global_microbatches;
  j["pipeline_ms"] = plan.pipeline_ms;
  j["allreduce_ms"] = plan.allreduce_ms;
  j["step_ms"] = plan.step_ms;
  j["samples_per_s"] = plan.samples_per_s;
  j["pipelines"] = json::Json::array();
  for (const auto& p : plan.pipelines) {
    json::Json pj;
    pj["nodes"] = json::Json::array();
    for (NodeId n : p.nodes) pj["nodes"].push_back(n.value());
    pj["microbatches"] = p.microbatches;
    pj["iteration_ms"] = p.iteration_ms;
    pj["template"] = to_json(p.tmpl);
    j["pipelines"].push_back(std::move(pj));
  }
  return j;
}

Plan plan_from_json(const json::Json& j) {
  const std::string where = "plan";
  Plan plan;
  plan.generation = get_int(j, "generation", where);
  plan.num_layers = get_int(j, "num_layers", where);
  plan.devices_per_node = get_int(j, "devices_per_node", where);
  plan.microbatch_size = get_int(j, "microbatch_size", where);
  plan.global_microbatches = get_int(j, "global_microbatches", where);
  plan.pipeline_ms = json::get_number(j, "pipeline_ms", where);
  plan.allreduce_ms = json::get_number(j, "allreduce_ms", where);
  plan.step_ms = json::get_number(j, "step_ms", where);
  plan.samples_per_s = json::get_number(j, "samples_per_s", where);
  const auto& pipelines = get_array(j, "pipelines", where);
  for (size_t i = 0; i < pipelines.size(); ++i) {
    const std::string pw = fmt::format("plan pipeline {}", i);
    const auto& pj = pipelines[i];
    Pipeline p;
    for (const auto& n : get_array(pj, "nodes", pw)) {
      if (!n.is_number_integer())
        throw ConfigError(fmt::format("{}: node ids must be integers", pw));
      p.nodes.emplace_back(n.get<int>());
    }
    p.microbatches = get_int(pj, "microbatches", pw);
    p.iteration_ms = json::get_number(pj, "iteration_ms", pw);
    if (!pj.contains("template"))
      throw ConfigError(fmt::format("{}: missing field 'template'", pw));
    p.tmpl = template_from_json(pj.at("template"));
    plan.pipelines.push_back(std::move(p));
  }
  return plan;
}

}  // namespace bw::plan
