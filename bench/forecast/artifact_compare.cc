// Oobleck's SOSP'23 artifact, reproduced: our replay with the artifact's throughput tables and
// costs (data/oobleck-sosp23) on its traces, next to the figures its simulator prints
// (data/oobleck-sosp23/figures.csv). One table: traces x models x policies.
//
//   bw_forecast_artifact [data_dir] [traces_dir]
//   bw_forecast_artifact --timeline data_dir trace.csv model policy
//
// data_dir defaults to data/oobleck-sosp23 (run from the source folder). The fixed-interval
// traces (10m ... 6h) are generated (fixed_removal_trace, as figures.csv was made on them); with
// traces_dir (the shared spot traces: aws-p3.csv, aws-g4dn.csv, scaled-gcp.csv) the spot traces
// are replayed too. figures.csv comes from bench/forecast/artifact_figures.py, which runs the
// artifact's own simulator on the same traces.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "core/error.h"
#include "forecast/artifact.h"

using namespace bw::forecast;

namespace {

struct Figure {
  double printed = 0, wall = 0, wall_fixed = 0;
};

std::map<std::tuple<std::string, std::string, std::string>, Figure> read_figures(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bw::ConfigError(fmt::format("cannot read {}", path));
  std::map<std::tuple<std::string, std::string, std::string>, Figure> out;
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      header = true;
      continue;
    }
    std::stringstream ss(line);
    std::string m, t, p, a, b, c;
    std::getline(ss, m, ',');
    std::getline(ss, t, ',');
    std::getline(ss, p, ',');
    std::getline(ss, a, ',');
    std::getline(ss, b, ',');
    std::getline(ss, c, ',');
    out[{m, t, p}] = {std::stod(a), std::stod(b), std::stod(c)};
  }
  return out;
}

}  // namespace

// One replay's timeline, a line a segment (start_ms end_ms samples_per_s nodes), to set beside
// the artifact simulator's own timeline event by event.
int print_timeline(const std::string& data, const std::string& trace_path, const std::string& mname,
                   const std::string& policy) {
  const auto model = artifact_model(mname);
  const auto table = read_step_table(data + "/" + mname + ".csv", model.samples_per_step);
  auto options = artifact_options(model);
  options.record_timeline = true;
  const auto r =
      replay_artifact(read_trace(trace_path), parse_policy(policy), model, table, options);
  for (const auto& s : r.timeline) {
    fmt::print("{:.0f} {:.0f} {:.4f} {}\n", s.start_ms, s.end_ms, s.samples_per_s, s.nodes);
  }
  fmt::print("useful {:.4f} steps {:.2f} lost_ms {:.0f} checkpoint_ms {:.0f} restart_ms {:.0f}\n",
             r.useful_fraction(), r.steps, r.time.lost_ms, r.time.checkpoint_ms, r.time.restart_ms);
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc == 6 && std::string(argv[1]) == "--timeline") {
      return print_timeline(argv[2], argv[3], argv[4], argv[5]);
    }
    const std::string data = argc > 1 ? argv[1] : "data/oobleck-sosp23";
    const std::string traces_dir = argc > 2 ? argv[2] : "";
    const auto figures = read_figures(data + "/figures.csv");
    std::vector<std::pair<std::string, Trace>> traces = {{"10m", fixed_removal_trace(601.2e3)},
                                                         {"30m", fixed_removal_trace(1800e3)},
                                                         {"1h", fixed_removal_trace(3600e3)},
                                                         {"3h", fixed_removal_trace(10800e3)},
                                                         {"6h", fixed_removal_trace(21600e3)}};
    const std::pair<const char*, const char*> spot[] = {
        {"p3", "aws-p3.csv"}, {"g4dn", "aws-g4dn.csv"}, {"scaled-gcp", "scaled-gcp.csv"}};
    if (!traces_dir.empty()) {
      for (const auto& [name, file] : spot) {
        const auto path = std::filesystem::path(traces_dir) / file;
        if (std::filesystem::exists(path)) traces.emplace_back(name, read_trace(path.string()));
      }
    }
    fmt::print(
        "| trace | model | policy | artifact printed | artifact wall-clock | "
        "wall-clock, fixed (items 3, 8-10) | ours | ours - fixed | "
        "ours, samples/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& [tname, trace] : traces) {
      for (const auto& mname : artifact_model_names()) {
        const auto model = artifact_model(mname);
        const auto table = read_step_table(data + "/" + mname + ".csv", model.samples_per_step);
        for (const auto kind :
             {PolicyKind::kBreakwater, PolicyKind::kRestart, PolicyKind::kRedundant}) {
          const auto r = replay_artifact(trace, kind, model, table, artifact_options(model));
          const auto it = figures.find({mname, tname, to_string(kind)});
          const double ours = r.useful_fraction();
          const double rate = r.samples / (r.duration_ms / 1e3);
          if (it == figures.end()) {
            fmt::print("| {} | {} | {} | - | - | - | {:.1f}% | - | {:.2f} |\n", tname, mname,
                       to_string(kind), 100 * ours, rate);
            continue;
          }
          const auto& f = it->second;
          fmt::print(
              "| {} | {} | {} | {:.1f}% | {:.1f}% | {:.1f}% | {:.1f}% | {:+.1f} | {:.2f} |\n",
              tname, mname, to_string(kind), 100 * f.printed, 100 * f.wall, 100 * f.wall_fixed,
              100 * ours, 100 * (ours - f.wall_fixed), rate);
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
}
