// bw_sharded_step_bench [--steps N] [--rounds R] [--model small]: the step of one stage sharded
// over 2 devices (docs/runtime.md "Sharded stages"), measured, against the simulator's prediction.
//
// Measure, then model: the prediction takes
//   - each layer's forward and backward time from the profiler (model/profiler.h) at the rows one
//     rank computes (2 of a microbatch of 4), and
//   - each layer's all-gather and all-reduce time measured on a 2-rank Gloo group over loopback
//     at that layer's parameter size, by two single-threaded processes that wait for collectives
//     as the run's workers do (train.spin_wait_us resolved alike); the mean, since a step pays
//     the sum of its collectives and their times have a long tail on a shared machine,
// charges a layer's forward with one all-gather and its backward with one all-gather and one
// all-reduce (the runtime's order; nothing overlaps), and lets sim::predict run the stage's 1F1B
// over the step's microbatches. The measured figure is the slowest rank's action list
// (exec_ms in metrics.jsonl), median over the steps after the first.
// Also printed: the planner's closed form (compute x ceil(b/d)/b from the full-microbatch
// profile), to show what the sample split costs against perfect halving; and prediction B, the
// run's own layer compute (compute_ms without gathers and reductions) with the calibrated
// collectives, as bw_runtime_bench's prediction B: it separates the collectives' model from
// the layers' speed inside a run. Each round also runs the stage with sleeping waits
// (train.spin_wait_us = 0) to show what polling saves.
#include <fmt/format.h>
#include <sys/wait.h>
#include <torch/torch.h>
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
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <vector>

#include "bench_util.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "model/profiler.h"
#include "runtime/comm.h"
#include "sim/cost_model.h"
#include "sim/predict.h"

namespace fs = std::filesystem;

namespace {

using bw::bench::median;

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// One rank of the collective calibration, run as its own single-threaded process as a worker
// is: for every size in `sizes`, the median ms of an all-gather of half a layer and of an
// all-reduce of a whole layer of that many floats, written by rank 0 to `result`.
int calibrate_rank(int rank, const std::string& store_path, const std::vector<int64_t>& sizes,
                   int reps, const std::string& result) {
  torch::set_num_threads(1);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bw::runtime::set_collective_spin(
      std::chrono::microseconds(bw::runtime::resolve_collective_spin_us(-1, 2, 1, cores)));
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
  auto t = bw::runtime::make_gloo_transport(store, "calibrate", rank, 2,
                                            std::chrono::milliseconds(120000));
  nlohmann::json out = nlohmann::json::object();
  for (const int64_t numel : sizes) {
    const int64_t half = (numel + 1) / 2;
    auto in = torch::ones({half});
    auto gathered = torch::empty({2 * half});
    auto full = torch::ones({numel});
    std::vector<double> ag, ar;
    for (int i = 0; i < reps + 2; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      t->allgather(in, gathered);
      auto t1 = std::chrono::steady_clock::now();
      t->allreduce_sum(full);
      auto t2 = std::chrono::steady_clock::now();
      if (i >= 2) {
        ag.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        ar.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      }
    }
    out[std::to_string(numel)] = {mean(ag), mean(ar)};
  }
  if (rank == 0) std::ofstream(result) << out.dump();
  return 0;
}

// Median ms of an all-gather and an all-reduce at each layer size, measured by two processes.
std::map<int64_t, std::pair<double, double>> collectives_ms(const std::vector<int64_t>& sizes,
                                                            int reps, const fs::path& dir) {
  std::string list;
  for (auto n : sizes) list += (list.empty() ? "" : ",") + std::to_string(n);
  const auto store = dir / "calibrate.store", result = dir / "calibrate.json";
  const auto self = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string r = std::to_string(rank), reps_s = std::to_string(reps);
      execl(self.c_str(), self.c_str(), "--calibrate-rank", r.c_str(), "--store", store.c_str(),
            "--sizes", list.c_str(), "--reps", reps_s.c_str(), "--result", result.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "calibration rank failed\n");
      std::exit(1);
    }
  }
  const auto j = nlohmann::json::parse(std::ifstream(result));
  std::map<int64_t, std::pair<double, double>> out;
  for (auto n : sizes) {
    const auto& v = j.at(std::to_string(n));
    out[n] = {v.at(0).get<double>(), v.at(1).get<double>()};
  }
  return out;
}

// Per step of a run after the first (its start-up): the report of the rank whose action list
// took longest, and the step's wall time in ms.
std::vector<std::pair<nlohmann::json, double>> slowest_ranks(const fs::path& out_dir) {
  std::vector<std::pair<nlohmann::json, double>> out;
  std::ifstream in(out_dir / "metrics.jsonl");
  int line_no = 0;
  for (std::string line; std::getline(in, line); ++line_no) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("ranks") || line_no == 0) continue;
    const nlohmann::json* slow = nullptr;
    for (const auto& rank : j.at("ranks")) {
      if (slow == nullptr || rank.at("exec_ms").get<double>() > slow->at("exec_ms").get<double>())
        slow = &rank;
    }
    out.emplace_back(*slow, j.at("step_s").get<double>() * 1000);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8, calibrate = -1, reps = 60, rounds = 3;
  std::string model_name = "small", store_path, result, size_list;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    if (k == "--model") model_name = argv[i + 1];
    if (k == "--calibrate-rank") calibrate = std::atoi(argv[i + 1]);
    if (k == "--store") store_path = argv[i + 1];
    if (k == "--result") result = argv[i + 1];
    if (k == "--sizes") size_list = argv[i + 1];
    if (k == "--reps") reps = std::atoi(argv[i + 1]);
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  if (calibrate >= 0) {
    std::vector<int64_t> list;
    for (size_t at = 0; at < size_list.size();) {
      const size_t comma = std::min(size_list.find(',', at), size_list.size());
      list.push_back(std::stoll(size_list.substr(at, comma - at)));
      at = comma + 1;
    }
    return calibrate_rank(calibrate, store_path, list, reps, result);
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
  std::vector<int64_t> sizes;
  for (int l = 0; l < layers; ++l) {
    const int64_t n = bw::model::num_parameters(model, l);
    if (std::find(sizes.begin(), sizes.end(), n) == sizes.end()) sizes.push_back(n);
  }
  const std::string data_path = bw::bench::corpus_or_generated(dir, "the stage gathers its layer");
  const bw::schedule::ScheduleSpec spec{"1f1b", 1, microbatches, 1, 1};

  // One round: the model's inputs measured (layer times, collectives), then the run; rounds
  // interleave the two so that a change of the machine's load reaches both alike.
  struct Round {
    double predicted = 0, closed_form = 0, measured = 0, step = 0;
    double predicted_b = 0;  // the run's own layer compute + the calibrated collectives
    double sleeping = 0;     // measured with train.spin_wait_us = 0
    double compute = 0, gather = 0, reduce = 0;                 // measured parts
    double compute_pred = 0, gather_pred = 0, reduce_pred = 0;  // predicted parts
  };
  auto round = [&](int index) {
    Round r;
    const auto rows = profile_at(mbs / width);
    const auto full = profile_at(mbs);
    const auto comm = collectives_ms(sizes, reps, dir);
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
    r.predicted = bw::sim::predict(spec, bw::sim::layer_costs(costs(rows, 1.0), {0, layers}, {}))
                      .iteration_ms;
    r.closed_form = bw::sim::predict(spec, bw::sim::layer_costs(costs(full, 0.5), {0, layers}, {}))
                        .iteration_ms;
    for (int l = 0; l < layers; ++l) {
      const auto [ag, ar] = comm.at(bw::model::num_parameters(model, l));
      r.gather_pred += microbatches * 2 * ag;
      r.reduce_pred += microbatches * ar;
      r.compute_pred += microbatches * (rows.layers[l].forward_ms + rows.layers[l].backward_ms);
    }
    auto run = [&](const fs::path& out_dir, int spin_us) {
      const std::string cmd = fmt::format(
          "'{}' train --quiet --model.name={} --data.path='{}' --cluster.nodes=1 "
          "--cluster.devices_per_node={} --pipeline.pipelines=[{}] --pipeline.devices_per_stage={} "
          "--pipeline.schedule=1f1b --pipeline.fault_tolerance=0 --pipeline.microbatches={} "
          "--pipeline.microbatch_size={} --train.steps={} --train.sample_tokens=0 "
          "--train.threads_per_worker=1 --train.spin_wait_us={} --train.out_dir='{}' > '{}.log' "
          "2>&1",
          BW_BINARY, model_name, data_path, width, width, width, microbatches, mbs, steps, spin_us,
          out_dir.string(), out_dir.string());
      if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "failed: %s\n", cmd.c_str());
        std::exit(1);
      }
    };
    const auto out_dir = dir / fmt::format("run{}", index);
    run(out_dir, -1);
    run(dir / fmt::format("sleep{}", index), 0);
    std::vector<double> sleeping;
    for (const auto& [slow, step_ms] : slowest_ranks(dir / fmt::format("sleep{}", index))) {
      sleeping.push_back(slow.at("exec_ms").get<double>());
    }
    r.sleeping = median(sleeping);
    std::vector<double> exec, step, gather, reduce, compute;
    for (const auto& [slow, step_ms] : slowest_ranks(out_dir)) {
      exec.push_back(slow.at("exec_ms").get<double>());
      gather.push_back(slow.value("gather_ms", 0.0));
      reduce.push_back(slow.value("reduce_ms", 0.0));
      compute.push_back(slow.at("compute_ms").get<double>() - gather.back() - reduce.back());
      step.push_back(step_ms);
    }
    r.measured = median(exec);
    r.step = median(step);
    r.compute = median(compute);
    r.gather = median(gather);
    r.reduce = median(reduce);
    // B: the layers' compute as the run measured it (its compute_ms without the collectives,
    // spread over the layers as the profile spreads it), the collectives as calibrated.
    r.predicted_b =
        bw::sim::predict(
            spec, bw::sim::layer_costs(costs(rows, r.compute / r.compute_pred), {0, layers}, {}))
            .iteration_ms;
    return r;
  };

  fmt::print("model {} ({} layers), one stage on {} devices, {} microbatches of {}, {} steps\n",
             model_name, layers, width, microbatches, mbs, steps);
  fmt::print("ms per step; measured = the slowest rank's action list, median over the steps\n");
  fmt::print("{:>5} {:>9} {:>9} {:>7} | {:>15} {:>15} {:>15} | {:>9} | {:>9} {:>7} | {:>9}\n",
             "round", "measured", "pred A", "ratio", "compute m/p", "gathers m/p", "reduce m/p",
             "closed", "pred B", "ratio", "sleeping");
  std::vector<double> ratios, closed_ratios, b_ratios, sleep_ratios;
  for (int i = 0; i < rounds; ++i) {
    const Round r = round(i);
    ratios.push_back(r.measured / r.predicted);
    closed_ratios.push_back(r.measured / r.closed_form);
    b_ratios.push_back(r.measured / r.predicted_b);
    sleep_ratios.push_back(r.sleeping / r.measured);
    fmt::print(
        "{:>5} {:>9.1f} {:>9.1f} {:>7.3f} | {:>7.1f}/{:<7.1f} {:>7.1f}/{:<7.1f} "
        "{:>7.1f}/{:<7.1f} | {:>9.1f} | {:>9.1f} {:>7.3f} | {:>9.1f}\n",
        i, r.measured, r.predicted, ratios.back(), r.compute, r.compute_pred, r.gather,
        r.gather_pred, r.reduce, r.reduce_pred, r.closed_form, r.predicted_b, b_ratios.back(),
        r.sleeping);
    std::fflush(stdout);
  }
  fmt::print("median measured / predicted A {:.3f}\n", median(ratios));
  fmt::print("median measured / predicted B {:.3f}\n", median(b_ratios));
  fmt::print("median measured / closed form {:.3f}\n", median(closed_ratios));
  fmt::print("median sleeping waits / polling waits {:.3f}\n", median(sleep_ratios));
  fs::remove_all(dir);
  return 0;
}
