// bw_sharded_step_bench [--steps N] [--model small]: the step of one stage sharded over 2 devices
// (docs/runtime.md "Sharded stages"), measured, against the simulator's prediction.
//
// Measure, then model: the prediction takes
//   - each layer's forward and backward time from the profiler (model/profiler.h) at the rows one
//     rank computes (2 of a microbatch of 4), and
//   - each layer's all-gather and all-reduce time measured on a 2-rank Gloo group over loopback
//     (two threads of this process) at that layer's parameter size,
// charges a layer's forward with one all-gather and its backward with one all-gather and one
// all-reduce (the runtime's order; nothing overlaps), and lets sim::predict run the stage's 1F1B
// over the step's microbatches. The measured figure is the slowest rank's action list
// (exec_ms in metrics.jsonl), median over the steps after the first.
// Also printed: the planner's closed form (compute x ceil(b/d)/b from the full-microbatch
// profile), to show what the sample split costs against perfect halving.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "data/dataset.h"
#include "model/gpt.h"
#include "model/profiler.h"
#include "runtime/comm.h"
#include "sim/cost_model.h"
#include "sim/predict.h"

namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of an all-gather and an all-reduce of a layer of `numel` floats on 2 Gloo ranks.
std::pair<double, double> collectives_ms(int64_t numel, int reps) {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<double> ag(reps), ar(reps);
  auto rank_main = [&](int rank) {
    auto t = bw::runtime::make_gloo_transport(store, fmt::format("bench{}", numel), rank, 2,
                                              std::chrono::milliseconds(60000));
    const int64_t half = (numel + 1) / 2;
    auto in = torch::ones({half});
    auto out = torch::empty({2 * half});
    auto full = torch::ones({numel});
    for (int i = 0; i < reps + 2; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      t->allgather(in, out);
      auto t1 = std::chrono::steady_clock::now();
      t->allreduce_sum(full);
      auto t2 = std::chrono::steady_clock::now();
      if (rank == 0 && i >= 2) {
        ag[i - 2] = std::chrono::duration<double, std::milli>(t1 - t0).count();
        ar[i - 2] = std::chrono::duration<double, std::milli>(t2 - t1).count();
      }
    }
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  return {median(ag), median(ar)};
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
  const int mbs = 4, width = 2, microbatches = 8;
  const auto dir = fs::temp_directory_path() / fmt::format("bw_sharded_step_bench_{}", getpid());
  fs::create_directories(dir);
  const auto model = bw::model::named_config(model_name, 256);
  const int layers = bw::model::num_layers(model);

  auto profile_at = [&](int b) {
    bw::model::ProfileOptions po;
    po.model = model_name;
    po.microbatch_size = b;
    po.threads = 1;
    return bw::model::measure_profile(po);
  };
  const auto rows = profile_at(mbs / width);
  const auto full = profile_at(mbs);

  std::map<int64_t, std::pair<double, double>> comm;
  for (int l = 0; l < layers; ++l) {
    const int64_t n = bw::model::num_parameters(model, l);
    if (!comm.count(n)) comm[n] = collectives_ms(n, 15);
  }

  auto costs = [&](const bw::model::MeasuredProfile& p, double share) {
    std::vector<bw::sim::LayerCost> out;
    for (int l = 0; l < layers; ++l) {
      const auto [ag, ar] = comm.at(bw::model::num_parameters(model, l));
      bw::sim::LayerCost c;
      c.forward_ms = p.layers[l].forward_ms * share + ag;
      c.backward_ms = p.layers[l].backward_ms * share + ag + ar;
      out.push_back(c);
    }
    return out;
  };
  const bw::schedule::ScheduleSpec spec{"1f1b", 1, microbatches, 1, 1};
  const double predicted =
      bw::sim::predict(spec, bw::sim::layer_costs(costs(rows, 1.0), {0, layers}, {})).iteration_ms;
  const double closed_form =
      bw::sim::predict(spec, bw::sim::layer_costs(costs(full, 0.5), {0, layers}, {})).iteration_ms;
  double comm_ms = 0;
  for (int l = 0; l < layers; ++l) {
    const auto [ag, ar] = comm.at(bw::model::num_parameters(model, l));
    comm_ms += microbatches * (2 * ag + ar);
  }

  std::string data_path;
  try {
    data_path = bw::data::default_corpus_path();
  } catch (const std::exception&) {
    data_path = (dir / "corpus.txt").string();
    std::ofstream out(data_path);
    for (int i = 0; i < 200000; ++i) out << "the stage gathers its layer " << i % 97 << "\n";
  }
  const auto out_dir = dir / "run";
  const std::string cmd = fmt::format(
      "'{}' train --quiet --model.name={} --data.path='{}' --cluster.nodes=1 "
      "--cluster.devices_per_node={} --pipeline.pipelines=[{}] --pipeline.devices_per_stage={} "
      "--pipeline.schedule=1f1b --pipeline.fault_tolerance=0 --pipeline.microbatches={} "
      "--pipeline.microbatch_size={} --train.steps={} --train.sample_tokens=0 "
      "--train.threads_per_worker=1 --train.out_dir='{}' > '{}.log' 2>&1",
      BW_BINARY, model_name, data_path, width, width, width, microbatches, mbs, steps,
      out_dir.string(), out_dir.string());
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", cmd.c_str());
    return 1;
  }
  std::vector<double> exec, step;
  std::ifstream in(out_dir / "metrics.jsonl");
  int line_no = 0;
  for (std::string line; std::getline(in, line); ++line_no) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("ranks") || line_no == 0) continue;
    double slowest = 0;
    for (const auto& r : j.at("ranks")) slowest = std::max(slowest, r.at("exec_ms").get<double>());
    exec.push_back(slowest);
    step.push_back(j.at("step_s").get<double>() * 1000);
  }
  const double measured = median(exec);
  fmt::print("model {} ({} layers), one stage on {} devices, {} microbatches of {}, {} steps\n",
             model_name, layers, width, microbatches, mbs, steps);
  fmt::print("collectives per step (measured on 2 Gloo ranks): {:.1f} ms\n", comm_ms);
  fmt::print("{:<52} {:>9.1f} ms\n", "predicted (profile at 2 rows + measured collectives)",
             predicted);
  fmt::print("{:<52} {:>9.1f} ms\n", "planner closed form (profile at 4 rows x 1/2)", closed_form);
  fmt::print("{:<52} {:>9.1f} ms\n", "measured (slowest rank's action list, median)", measured);
  fmt::print("{:<52} {:>9.1f} ms\n", "measured whole step (incl. sync + AdamW)", median(step));
  fmt::print("{:<52} {:>9.3f}\n", "measured / predicted", measured / predicted);
  fmt::print("{:<52} {:>9.3f}\n", "measured / closed form", measured / closed_form);
  fs::remove_all(dir);
  return 0;
}
