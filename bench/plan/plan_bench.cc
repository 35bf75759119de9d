// Planner benchmarks: template generation, instantiation + batch split, reconfiguration.
//
//   build-pure/bench/plan/bw_plan_bench --benchmark_filter=Templates
//
// Each benchmark reports wall time per iteration and the process's peak resident set size
// (peak_rss_mb, whole process so far) as a counter. Profiles are synthetic (plan/synth.h).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "plan/reconfigure.h"
#include "plan/schedule_aware.h"
#include "plan/synth.h"

namespace bw::plan {
namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux reports KiB
}

Cluster cluster_of(int nodes, int g, double memory_gb) {
  Cluster c;
  c.num_nodes = nodes;
  c.devices_per_node = g;
  c.device_memory_gb = memory_gb;
  c.intra_node_gbps = 2400;
  c.inter_node_gbps = 200;
  return c;
}

// A GPT-3 175B profile, or its first `blocks` blocks for the 48-layer case, at microbatch size b
// (b = 1: no stage can be sharded; b = 8: stages may shard over all 8 devices of a node).
Profile gpt3(int blocks, int microbatch_size = 1) {
  ModelSpec m = find_model("gpt3-175b");
  m.n_blocks = blocks;
  return synthesize_profile(m, find_device("a100"), microbatch_size);
}

TemplateOptions options(int microbatches) {
  TemplateOptions o;
  o.cost.microbatches = microbatches;
  return o;
}

// args: blocks, nodes, devices per node, device memory in GB (1e6: memory never binds, the
// search's worst case; 80: A100-80GB, where memory prunes most stage shapes; 141: H200, where
// GPT-3 175B fits with sharded stages), microbatch size b.
void BM_Templates(benchmark::State& state) {
  const int blocks = static_cast<int>(state.range(0));
  const int nodes = static_cast<int>(state.range(1));
  const int g = static_cast<int>(state.range(2));
  Profile p = gpt3(blocks, static_cast<int>(state.range(4)));
  Cluster c = cluster_of(nodes, g, static_cast<double>(state.range(3)));
  size_t count = 0;
  for (auto _ : state) {
    TemplateSet set = generate_templates(p, c, options(64));
    count = set.templates.size();
    benchmark::DoNotOptimize(set);
  }
  state.counters["templates"] = static_cast<double>(count);
  state.counters["peak_rss_mb"] = peak_rss_mb();
}
BENCHMARK(BM_Templates)
    ->ArgNames({"blocks", "nodes", "g", "mem_gb", "b"})
    ->ArgsProduct({{48}, {8}, {1, 2, 4, 8}, {80, 1000000}, {1, 8}})
    ->ArgsProduct({{96}, {4}, {1}, {80, 1000000}, {1}})
    ->ArgsProduct({{96}, {32}, {1, 2, 4, 8}, {80, 1000000}, {1, 8}})
    ->ArgsProduct({{96}, {64}, {8}, {80, 141, 1000000}, {1, 8}})
    ->Unit(benchmark::kMillisecond);

// Schedule-aware: the search, then each template simulated under 1f1b, interleaved and Hanayo
// W = 1, 2 (two simulations each) to pick its schedule. args: blocks, nodes, g, memory GB, b.
void BM_TemplatesScheduleAware(benchmark::State& state) {
  const int blocks = static_cast<int>(state.range(0));
  Profile p = gpt3(blocks, static_cast<int>(state.range(4)));
  Cluster c = cluster_of(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)),
                         static_cast<double>(state.range(3)));
  TemplateOptions o = options(64);
  o.schedule_kinds = simulated_schedule_kinds();
  o.evaluator = simulator_evaluator(p, c);
  size_t count = 0;
  for (auto _ : state) {
    TemplateSet set = generate_templates(p, c, o);
    count = set.templates.size();
    benchmark::DoNotOptimize(set);
  }
  state.counters["templates"] = static_cast<double>(count);
  state.counters["peak_rss_mb"] = peak_rss_mb();
}
BENCHMARK(BM_TemplatesScheduleAware)
    ->ArgNames({"blocks", "nodes", "g", "mem_gb", "b"})
    ->Args({96, 64, 8, 80, 1})
    ->Args({96, 64, 8, 141, 8})
    ->Unit(benchmark::kMillisecond);

// Templates for a GPT-3 6.7B-class profile so that small pipelines exist at every scale, then
// instantiation + batch split for N nodes (f = 2, 8 microbatches per node).
void BM_Instantiate(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Profile p = synthesize_profile(find_model("gpt3-6.7b"), find_device("a100"), 1);
  Cluster c = cluster_of(nodes, 8, 80);
  TemplateOptions o = options(32);
  o.max_nodes = std::min(nodes, p.num_layers());
  TemplateSet set = generate_templates(p, c, o);
  double step = 0;
  for (auto _ : state) {
    Plan plan = instantiate(set, nodes, 2, 8 * nodes, c);
    step = plan.step_ms;
    benchmark::DoNotOptimize(plan);
  }
  state.counters["step_ms"] = step;
  state.counters["peak_rss_mb"] = peak_rss_mb();
}
BENCHMARK(BM_Instantiate)
    ->ArgName("nodes")
    ->Arg(16)
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond);

void BM_ReconfigureOneFailure(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Profile p = synthesize_profile(find_model("gpt3-6.7b"), find_device("a100"), 1);
  Cluster c = cluster_of(nodes, 8, 80);
  TemplateOptions o = options(32);
  o.max_nodes = std::min(nodes, p.num_layers());
  TemplateSet set = generate_templates(p, c, o);
  Plan plan = instantiate(set, nodes, 2, 8 * nodes, c);
  NodeId victim = plan.pipelines.front().nodes.front();
  size_t copies = 0;
  for (auto _ : state) {
    Reconfiguration r = reconfigure(plan, set, {victim}, c);
    copies = r.copies.size();
    benchmark::DoNotOptimize(r);
  }
  state.counters["copies"] = static_cast<double>(copies);
  state.counters["peak_rss_mb"] = peak_rss_mb();
}
BENCHMARK(BM_ReconfigureOneFailure)
    ->ArgName("nodes")
    ->Arg(64)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bw::plan

BENCHMARK_MAIN();
