// bw_runtime_bench [--steps N] [--model small]: the runtime's figures, as one table of ratios.
//
//  1. Per schedule on one 2-device pipeline: the step's pipeline part (slowest rank's action
//     list) measured vs the simulator's prediction (sim::predict) from per-layer times measured
//     on this machine by the profiler (model/profiler.h), with the runtime's own layer split.
//  2. Throughput of the 2-device pipeline (1 thread per worker) vs one process with 2 threads.
//  3. The runtime's overhead per action: time in the action list outside LibTorch compute and
//     outside waiting for peers, divided by the number of actions.
//  4. `breakwater train` with the default config (4 workers): tokens/s and peak RSS per worker.
// Medians over the steps after the first (which includes start-up). CPU only; the figures are
// noisy on a shared machine, so read the ratios, not the last digit.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "data/dataset.h"
#include "elastic/planning.h"
#include "model/gpt.h"
#include "model/profiler.h"
#include "runtime/config.h"
#include "schedule/generate.h"
#include "sim/cost_model.h"
#include "sim/predict.h"
#include "sim/timeline.h"

namespace fs = std::filesystem;

namespace {

using bw::bench::median;

struct RunFigures {
  double step_ms = 0;      // coordinator's wall time per step
  double pipeline_ms = 0;  // slowest rank's action list
  double tokens_per_s = 0;
  double overhead_us = 0;  // per action
  std::vector<double> peak_rss_mib;
  std::vector<std::array<double, 4>> chunk_ms;  // per chunk: mean F, B, I, W ms per step
  bool ok = false;
};

RunFigures run(const std::string& out_dir, const std::vector<std::string>& args) {
  std::string cmd = fmt::format("'{}' train --quiet --train.sample_tokens=0 --train.out_dir='{}'",
                                BW_BINARY, out_dir);
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += fmt::format(" > '{}.log' 2>&1", out_dir);
  RunFigures f;
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s (see %s.log)\n", cmd.c_str(), out_dir.c_str());
    return f;
  }
  std::ifstream in(fs::path(out_dir) / "metrics.jsonl");
  std::vector<double> step, pipe, tps, over;
  int line_no = 0;
  for (std::string line; std::getline(in, line); ++line_no) {
    auto j = nlohmann::json::parse(line);
    const auto& ranks = j.at("ranks");
    f.peak_rss_mib.assign(ranks.size(), 0);
    for (size_t r = 0; r < ranks.size(); ++r) {
      f.peak_rss_mib[r] = ranks[r].at("peak_rss_kb").get<double>() / 1024.0;
    }
    if (line_no == 0) continue;
    step.push_back(j.at("step_s").get<double>() * 1000);
    tps.push_back(j.at("tokens_per_s").get<double>());
    double slowest = 0, o = 0;
    for (const auto& r : ranks) {
      const double exec = r.at("exec_ms"), compute = r.at("compute_ms"), wait = r.at("wait_ms");
      slowest = std::max(slowest, exec);
      o += 1000.0 * std::max(0.0, exec - compute - wait) /
           std::max(1, r.at("num_actions").get<int>());
    }
    pipe.push_back(slowest);
    over.push_back(o / ranks.size());
    for (const auto& r : ranks) {
      auto chunks = r.at("chunk_ms").get<std::vector<std::array<double, 4>>>();
      if (f.chunk_ms.size() < chunks.size()) f.chunk_ms.resize(chunks.size(), {0, 0, 0, 0});
      for (size_t c = 0; c < chunks.size(); ++c) {
        for (int k = 0; k < 4; ++k) f.chunk_ms[c][k] += chunks[c][k];
      }
    }
  }
  for (auto& c : f.chunk_ms) {
    for (auto& v : c) v /= std::max<size_t>(1, step.size());
  }
  f.step_ms = median(step);
  f.pipeline_ms = median(pipe);
  f.tokens_per_s = median(tps);
  f.overhead_us = median(over);
  f.ok = !step.empty();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8;
  std::string model_name = "small";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    if (k == "--model") model_name = argv[i + 1];
  }
  const auto dir = fs::temp_directory_path() / fmt::format("bw_runtime_bench_{}", getpid());
  fs::create_directories(dir);
  const std::string data_path =
      bw::bench::corpus_or_generated(dir, "the wave turns back at the last device");
  const int mbs = 4, microbatches = 8, devices = 2;
  const auto model = bw::model::named_config(model_name, 256);

  bw::model::ProfileOptions po;
  po.model = model_name;
  po.microbatch_size = mbs;
  po.threads = 1;
  const auto profile = bw::model::measure_profile(po);
  std::vector<bw::sim::LayerCost> costs;
  for (const auto& l : profile.layers) {
    bw::sim::LayerCost c;
    c.forward_ms = l.forward_ms;
    c.backward_ms = l.backward_ms;
    c.backward_input_ms = l.backward_input_ms;
    c.backward_weight_ms = l.backward_weight_ms;
    c.activation_bytes = double(l.activation_bytes);
    c.output_bytes = double(l.output_bytes);
    c.param_bytes = double(l.param_bytes);
    costs.push_back(c);
  }
  const std::vector<std::string> common = {"--model.name=" + model_name,
                                           "--data.path=" + data_path,
                                           fmt::format("--train.steps={}", steps),
                                           fmt::format("--pipeline.microbatches={}", microbatches),
                                           fmt::format("--pipeline.microbatch_size={}", mbs),
                                           "--train.threads_per_worker=1"};

  fmt::print(
      "model {} ({} layers), {} microbatches of {}, {} steps per run, median after step 1\n\n",
      model_name, bw::model::num_layers(model), microbatches, mbs, steps);
  fmt::print("predicted A: the simulator on per-layer times from the profiler (isolated layers)\n");
  fmt::print(
      "predicted B: the simulator on the run's own per-chunk F/B/I/W times (same op timings)\n");
  fmt::print(
      "predicted C: B plus the runtime's measured overhead per action (CostModel::"
      "action_overhead_ms)\n");
  fmt::print(
      "measured: the slowest rank's action list; step: the whole step incl. sync + AdamW\n\n");
  fmt::print("{:<12} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>13}\n", "schedule",
             "pred A", "pred B", "pred C", "measured", "meas/A", "meas/B", "meas/C", "step ms",
             "overhead us/a");
  RunFigures one_f_one_b;
  for (const std::string kind : {"gpipe", "1f1b", "interleaved", "hanayo", "zb-h1"}) {
    bw::runtime::RunConfig config;
    config.model.name = model_name;
    config.pipeline.schedule = kind;
    config.pipeline.waves = 1;
    config.pipeline.chunks_per_device = 2;
    config.pipeline.microbatches = microbatches;
    config.pipeline.microbatch_size = mbs;
    config.pipeline.pipelines = {devices};
    auto plan = bw::elastic::plan_layout(config, model, devices, 0);
    const auto& pl = plan.layout.pipelines[0];
    std::vector<int> stage_begin;
    for (const auto& [b, e] : pl.chunk_layers) stage_begin.push_back(b);
    stage_begin.push_back(pl.chunk_layers.back().second);
    bw::schedule::ScheduleSpec spec{kind, devices, microbatches, 2, 1};
    const double predicted =
        bw::sim::predict(spec, bw::sim::layer_costs(costs, stage_begin, {})).iteration_ms;
    auto f = run((dir / kind).string(), [&] {
      auto a = common;
      a.push_back(fmt::format("--devices={}", devices));
      a.push_back("--pipeline.pipelines=[2]");
      a.push_back("--pipeline.fault_tolerance=0");
      a.push_back("--pipeline.schedule=" + kind);
      a.push_back("--pipeline.waves=1");
      return a;
    }());
    if (kind == std::string("1f1b")) one_f_one_b = f;
    // The same schedule on the run's own op timings, per microbatch.
    bw::sim::CostModel own;
    for (const auto& c : f.chunk_ms) {
      bw::sim::ChunkCost cc;
      cc.forward_ms = c[0] / microbatches;
      cc.backward_ms = (c[1] + c[2] + c[3]) / microbatches;
      cc.backward_input_ms = c[2] / microbatches;
      cc.backward_weight_ms = c[3] / microbatches;
      own.chunks.push_back(cc);
    }
    double predicted_own = 0, predicted_full = 0;
    if (own.chunks.size() == static_cast<size_t>(pl.schedule.num_chunks)) {
      predicted_own = bw::sim::predict(spec, own).iteration_ms;
      // The same, with the runtime's measured per-action overhead charged to every action of the
      // lowered lists the workers execute (sends and receives included, as the runtime counts).
      own.action_overhead_ms = f.overhead_us / 1000.0;
      predicted_full =
          bw::sim::simulate(bw::schedule::lower(bw::schedule::generate(spec)), own).makespan_ms;
    }
    fmt::print(
        "{:<12} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>8.3f} {:>8.3f} {:>8.3f} {:>9.1f} "
        "{:>13.1f}\n",
        kind, predicted, predicted_own, predicted_full, f.pipeline_ms, f.pipeline_ms / predicted,
        f.pipeline_ms / std::max(1e-9, predicted_own),
        f.pipeline_ms / std::max(1e-9, predicted_full), f.step_ms, f.overhead_us);
  }

  auto single_run = [&](int threads) {
    auto a = common;
    a.push_back("--devices=1");
    a.push_back(fmt::format("--train.threads_per_worker={}", threads));
    return run((dir / fmt::format("single{}", threads)).string(), a);
  };
  auto single = single_run(2);
  auto single1 = single_run(1);
  fmt::print("\n{:<44} {:>10.0f} tokens/s\n", "single process, 2 threads", single.tokens_per_s);
  fmt::print("{:<44} {:>10.0f} tokens/s\n", "single process, 1 thread", single1.tokens_per_s);
  fmt::print("{:<44} {:>10.0f} tokens/s\n", "1F1B pipeline, 2 workers x 1 thread",
             one_f_one_b.tokens_per_s);
  fmt::print("{:<44} {:>10.3f}\n", "ratio pipeline / single (2 threads)",
             one_f_one_b.tokens_per_s / std::max(1.0, single.tokens_per_s));
  fmt::print("{:<44} {:>10.3f}\n", "ratio pipeline / single (1 thread)",
             one_f_one_b.tokens_per_s / std::max(1.0, single1.tokens_per_s));

  auto def = run((dir / "default").string(), {fmt::format("--train.steps={}", steps)});
  fmt::print(
      "\n`breakwater train` default config ({} steps): {:.0f} tokens/s; peak RSS MiB per "
      "worker:",
      steps, def.tokens_per_s);
  for (double m : def.peak_rss_mib) fmt::print(" {:.0f}", m);
  fmt::print("\n");
  fs::remove_all(dir);
  return 0;
}
