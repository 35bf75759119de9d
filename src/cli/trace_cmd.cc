// `breakwater trace`: Chrome traces. `trace compare REAL.json SIM.json` compares a measured trace
// of training steps (`breakwater train` with train.trace_steps) with the simulator's trace of the
// same schedule (`breakwater schedule ... --trace SIM.json`): per pipeline, device and action class
// the measured and predicted mean durations and their ratio, the step makespan, and the actions
// whose measured mean is furthest from the prediction (sim/trace_compare.h).
//
//   breakwater schedule --kind 1f1b --devices 4 --microbatches 8 --trace sim.json
//   breakwater trace compare runs/demo/trace.json sim.json --top 10
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/file_io.h"
#include "core/json.h"
#include "sim/trace_compare.h"

namespace bw::cli {
namespace {

struct CompareArgs {
  std::string real;
  std::string sim;
  long long pipeline = -1;
  int top = 5;
  bool json = false;
};

json::Json read_trace(const std::string& path) {
  return json::parse(io::read_file(path, io::kMaxJsonBytes, "Chrome trace"), path);
}

void compare(const CompareArgs& a, bool pipeline_given) {
  require_count(a.top, 0, 1 << 20, "--top");
  sim::CompareOptions options;
  if (pipeline_given) {
    require_count(a.pipeline, 0, static_cast<long long>(json::kMaxExactInt), "--pipeline");
    options.pipeline = a.pipeline;
  }
  const json::Json real = read_trace(a.real);
  const json::Json simulated = read_trace(a.sim);
  const sim::TraceComparison c = sim::compare_traces(real, a.real, simulated, a.sim, options);
  if (a.json)
    fmt::print("{}\n", sim::comparison_json(c, a.top).dump(2));
  else
    fmt::print("{}", sim::format_comparison(c, a.top));
}

void add(CLI::App& app) {
  CLI::App* trace = app.add_subcommand("trace", "Chrome traces: measured against simulated");
  trace->require_subcommand(1);
  auto a = std::make_shared<CompareArgs>();
  CLI::App* cmd = trace->add_subcommand(
      "compare",
      "Compare a measured trace of training steps with the simulator's trace of the same "
      "schedule, per device and action class, and list the largest gaps (docs/cli.md)");
  cmd->add_option("real", a->real, "measured trace (breakwater train, train.trace_steps)")
      ->required();
  cmd->add_option("sim", a->sim, "simulated trace (breakwater schedule ... --trace)")->required();
  auto* pipeline = cmd->add_option(
      "--pipeline", a->pipeline,
      "compare only this pipeline of the measured trace (its pid: generation * 1000 + pipeline)");
  cmd->add_option("--top", a->top, "largest gaps to list per pipeline")->capture_default_str();
  cmd->add_flag("--json", a->json, "print JSON instead of tables");
  cmd->callback([cmd, a, pipeline] {
    reject_nan_values(*cmd);
    compare(*a, pipeline->count() > 0);
  });
}

const Registrar kRegistrar("trace", 40, add);

}  // namespace
}  // namespace bw::cli
