// The executor and gradient sync with ranks as threads in one process over an in-memory store
// (after Gloo's tests): a grid of schedules x pipeline shapes x microbatch counts, each trained for
// three steps and compared with one Worker holding the whole model, in every precision (as Gloo's
// tests run every algorithm over every element type). Oracle: the single-device Worker on the
// same data in the same precision. One pipeline, untied, sums every gradient's microbatches in the
// single worker's order: bitwise equal (MKL_CBWR fixed below). Otherwise the "same training"
// tolerances of tests/same_training.h (fp32: losses 1e-5, parameters 2^-12 x steps x lr + 1e-4 |p|;
// bf16: 2^-8 for both). A run that loses one microbatch of one step fails them.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../same_training.h"
#include "cli_runner.h"
#include "runtime/layout.h"
#include "runtime/worker.h"
#include "schedule/generate.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

// MKL picks a GEMM kernel path per call under its default conditional numerical reproducibility
// (MKL_CBWR=AUTO), so the same product can come out with other last bits; bitwise comparisons
// need one path. Set before MKL's first call (before main) for this whole test binary and the
// processes it starts; a value already in the environment is kept (MKL_CBWR=AUTO gives MKL's
// default back, to measure the difference).
const bool kFixedMklPath = [] { return setenv("MKL_CBWR", "COMPATIBLE", /*overwrite=*/0) == 0; }();

std::string corpus() {
  static const std::string path = [] {
    auto dir = bw::testing::scratch_dir(
        (fs::path(::testing::TempDir()) / fmt::format("bw_executor_grid_{}", getpid())).string());
    auto p = (fs::path(dir) / "corpus.txt").string();
    std::ofstream out(p);
    std::mt19937 rng(11);
    for (int i = 0; i < 30000; ++i) out << static_cast<char>('a' + rng() % 7) << (i % 9 ? "" : " ");
    return p;
  }();
  return path;
}

RunConfig tiny_config(int microbatches) {
  RunConfig c;
  c.model.name = "tiny";
  c.data.path = corpus();
  c.pipeline.microbatches = microbatches;
  c.pipeline.microbatch_size = 2;
  c.train.steps = 3;
  c.train.warmup_steps = 1;
  c.train.lr = 1e-2;
  c.elastic.step_timeout_s = 30;
  return c;
}

RunLayout layout_for(const std::vector<int>& devices, const std::string& kind, int microbatches) {
  RunLayout layout;
  layout.num_layers = 4;  // tiny
  layout.vocab_size = 256;
  layout.microbatch_size = 2;
  layout.total_microbatches = microbatches;
  std::vector<double> weights(devices.begin(), devices.end());
  auto split = split_microbatches(microbatches, weights);
  int rank = 0, mb = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    PipelineLayout pl;
    pl.first_rank = rank;
    pl.num_devices = devices[i];
    pl.widths.assign(devices[i], 1);
    pl.first_microbatch = mb;
    pl.num_microbatches = split[i];
    if (devices[i] == 1 && kind == "single") {
      pl.schedule.kind = "single";
      pl.schedule.num_devices = 1;
      pl.schedule.num_chunks = 1;
      pl.schedule.num_microbatches = split[i];
      pl.schedule.chunk_device = {0};
      pl.schedule.actions.resize(1);
      for (int m = 0; m < split[i]; ++m) {
        pl.schedule.actions[0].push_back({schedule::ActionKind::F, 0, m});
        pl.schedule.actions[0].push_back({schedule::ActionKind::B, 0, m});
      }
    } else {
      pl.schedule = schedule::lower(schedule::generate({kind, devices[i], split[i], 2, 1}));
    }
    pl.chunk_layers = split_layers(layout.num_layers, pl.schedule.num_chunks);
    layout.pipelines.push_back(pl);
    rank += devices[i];
    mb += split[i];
  }
  validate_layout(layout);
  return layout;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  // Per step, every tied copy's checksum (StepReport::tied) from every rank holding one.
  std::vector<std::vector<int64_t>> tied_sums;
};

Trained train_threads(const RunConfig& config, const RunLayout& layout) {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  const int world = layout.world_size();
  std::vector<Trained> per_rank(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto model = model::named_config(config.model.name, layout.vocab_size);
        model.tie_embeddings = config.model.tie_embeddings;
        ModelState state(config.train, model, static_cast<uint64_t>(config.model.seed));
        state.keep_only(layout.layers_of(r));
        TransportFactory factory = [&](const std::string& prefix, int rank, int size) {
          TransportOptions options;
          options.timeout = std::chrono::seconds(60);
          return make_transport(options, store, prefix, rank, size);
        };
        std::unique_ptr<Transport> group;
        if (world > 1) group = factory("g0/world", r, world);
        Worker w(config, layout, r, state, std::move(group), factory);
        per_rank[r].tied_sums.resize(config.train.steps);
        for (int s = 0; s < config.train.steps; ++s) {
          const auto report = w.run_step(s);
          per_rank[r].losses.push_back(report.loss);
          for (const auto& [group, sums] : report.tied) {
            auto& into = per_rank[r].tied_sums[s];
            into.insert(into.end(), sums.begin(), sums.end());
          }
        }
        for (auto& [name, t] : w.owned_parameters()) per_rank[r].params[name] = t.clone();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  Trained out;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(per_rank[r].losses, per_rank[0].losses) << "ranks disagree on the global loss";
    for (auto& kv : per_rank[r].params) out.params.insert(kv);
  }
  out.losses = per_rank[0].losses;
  out.tied_sums.resize(config.train.steps);
  for (int s = 0; s < config.train.steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const auto& sums = per_rank[r].tied_sums.at(s);
      out.tied_sums[s].insert(out.tied_sums[s].end(), sums.begin(), sums.end());
    }
  }
  return out;
}

struct GridCase {
  std::string kind;
  std::vector<int> devices;
  int microbatches;
  std::string precision = "fp32";
  bool tied = false;  // model.tie_embeddings
};

void PrintTo(const GridCase& c, std::ostream* os) {
  *os << c.kind << " " << fmt::format("{}", fmt::join(c.devices, "+")) << " mb" << c.microbatches
      << " " << c.precision << (c.tied ? " tied" : "");
}

class ExecutorGrid : public ::testing::TestWithParam<GridCase> {};

TEST_P(ExecutorGrid, ThreadsMatchOneWorker) {
  torch::set_num_threads(1);
  const auto& c = GetParam();
  auto config = tiny_config(c.microbatches);
  config.train.precision = c.precision;
  config.model.tie_embeddings = c.tied;
  const bool bf16 = c.precision == "bf16";
  // One pipeline adds each gradient's microbatches in the single worker's order; a tied matrix's
  // two copies are summed across ranks instead.
  const bool same_order = c.devices.size() == 1 && !c.tied;
  const auto tol = same_order ? bw::testing::kBitwise
                   : bf16     ? bw::testing::bf16_same_training(config.train.steps, config.train.lr)
                              : bw::testing::fp32_same_training(config.train.steps, config.train.lr);
  ASSERT_TRUE(kFixedMklPath);
  const RunLayout layout = layout_for(c.devices, c.kind, c.microbatches);
  auto got = train_threads(config, layout);
  auto want = train_threads(config, layout_for({1}, "single", c.microbatches));
  EXPECT_EQ(bw::testing::compare_losses(got.losses, want.losses, tol.loss_rel), "");
  const auto cmp = bw::testing::compare_state(got.params, want.params, tol);
  EXPECT_TRUE(cmp.ok()) << (same_order ? "bitwise" : "within the tolerance") << ", MKL_CBWR="
                        << (std::getenv("MKL_CBWR") ? std::getenv("MKL_CBWR") : "unset") << ":\n" << cmp.first;
  std::printf("%s: max |param diff| %.3g (%s)\n", ::testing::PrintToString(c).c_str(),
              cmp.max_abs_diff, same_order ? "bitwise" : "tolerance");
  if (!c.tied) return;
  // Tied: the matrix is written once (layer 0's copy), and before every step every copy, on
  // every rank of every pipeline, held the same bits.
  EXPECT_EQ(got.params.count("layers.3.lm_head.weight"), 0u);
  EXPECT_EQ(got.params.count("layers.0.wte.weight"), 1u);
  for (size_t s = 0; s < got.tied_sums.size(); ++s) {
    const auto& sums = got.tied_sums[s];
    EXPECT_EQ(sums.size(), 2 * c.devices.size()) << "step " << s;  // two copies per pipeline
    for (int64_t v : sums) EXPECT_EQ(v, sums.front()) << "step " << s << ": copies differ";
  }
}

// One worker for every step, on `layout_of(step)`.
Trained train_one_worker(const RunConfig& config, const std::function<RunLayout(int)>& layout_of) {
  auto model = model::named_config(config.model.name, 256);
  ModelState state(config.train, model, static_cast<uint64_t>(config.model.seed));
  state.keep_only(layout_of(0).layers_of(0));
  Trained out;
  for (int s = 0; s < config.train.steps; ++s) {
    Worker w(config, layout_of(s), 0, state, nullptr, {});
    out.losses.push_back(w.run_step(s).loss);
    if (s + 1 == config.train.steps) {
      for (auto& [name, t] : w.owned_parameters()) out.params[name] = t.clone();
    }
  }
  return out;
}

// What the tolerance exists to catch: a run that loses one microbatch of one step (its forward and
// backward never run, so its gradient is missing from the step's sum) fails the fp32 "same
// training" bound of the grid, and its largest difference exceeds the widest bound any test uses
// (150 steps, tests/same_training.h), whichever microbatch and step it loses.
TEST(ExecutorGridTolerance, ALostMicrobatchAlwaysFails) {
  torch::set_num_threads(1);
  const int microbatches = 4;
  const auto config = tiny_config(microbatches);
  const RunLayout full = layout_for({1}, "single", microbatches);
  const auto want = train_one_worker(config, [&](int) { return full; });
  // The oracle of this check: the same worker on the full layout each step is bitwise the run.
  const auto again = train_one_worker(config, [&](int) { return full; });
  EXPECT_TRUE(bw::testing::compare_state(again.params, want.params, bw::testing::kBitwise).ok());
  const auto tol = bw::testing::fp32_same_training(config.train.steps, config.train.lr);
  const auto widest = bw::testing::fp32_same_training(150, 1e-2);
  for (const auto& [step_, lost_] : std::vector<std::pair<int, int>>{{0, 0}, {1, 3}, {2, 1}}) {
    const int step = step_, lost = lost_;
    RunLayout lossy = full;
    auto& actions = lossy.pipelines[0].schedule.actions[0];
    std::erase_if(actions, [&](const schedule::Action& a) { return a.microbatch == lost; });
    const auto got = train_one_worker(config, [&](int s) { return s == step ? lossy : full; });
    const auto cmp = bw::testing::compare_state(got.params, want.params, tol);
    EXPECT_FALSE(cmp.ok()) << "losing microbatch " << lost << " of step " << step
                           << " passed as the same training (max |diff| " << cmp.max_abs_diff
                           << ")";
    EXPECT_GT(cmp.max_abs_diff, widest.param_abs)
        << "losing microbatch " << lost << " of step " << step;
    EXPECT_FALSE(bw::testing::compare_state(got.params, want.params, widest).ok());
    std::printf("lost microbatch %d of step %d: max |param diff| %.3g, %d elements outside the "
                "3-step bound %.3g\n",
                lost, step, cmp.max_abs_diff, cmp.bad, tol.param_abs);
  }
}

// Tied embeddings (model.tie_embeddings) on schedules that put the head on the embedding's
// device (Hanayo: a local sum) and on another device (1F1B, GPipe: a sum across ranks), on
// heterogeneous pipelines, in fp32 and bf16.
std::vector<GridCase> tied_grid() {
  std::vector<GridCase> out;
  for (const std::string kind : {"1f1b", "hanayo", "gpipe"}) {
    for (const auto& devices : std::vector<std::vector<int>>{{2}, {1, 2}, {2, 2}}) {
      out.push_back({kind, devices, 4, "fp32", true});
    }
  }
  out.push_back({"1f1b", {1, 2}, 4, "bf16", true});
  out.push_back({"hanayo", {2, 2}, 5, "bf16", true});
  return out;
}


std::vector<GridCase> grid() {
  std::vector<GridCase> out;
  for (const std::string kind : {"gpipe", "1f1b", "interleaved", "hanayo", "zb-h1", "zb-v"}) {
    for (const auto& devices : std::vector<std::vector<int>>{{2}, {1, 2}, {2, 2}}) {
      for (int mb : {2, 4, 5}) {
        if (mb < static_cast<int>(devices.size())) continue;
        try {
          layout_for(devices, kind, mb);  // e.g. interleaved needs mb % devices in {0, >= P}
        } catch (const ConfigError&) {
          continue;
        }
        for (const std::string precision : {"fp32", "bf16"}) {
          out.push_back({kind, devices, mb, precision});
        }
      }
    }
  }
  return out;
}

TEST(ExecutorGridCases, CoverEverySchedule) {
  const auto cases = grid();
  EXPECT_GE(cases.size(), 80u);
  std::set<std::string> kinds;
  for (const auto& c : cases) kinds.insert(c.kind);
  EXPECT_EQ(kinds.size(), 6u);
}

std::string case_name(const ::testing::TestParamInfo<GridCase>& info) {
  std::string name = info.param.kind + "_";
  for (int d : info.param.devices) name += std::to_string(d);
  name += "_mb" + std::to_string(info.param.microbatches) + "_" + info.param.precision;
  if (info.param.tied) name += "_tied";
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Grid, ExecutorGrid, ::testing::ValuesIn(grid()), case_name);
INSTANTIATE_TEST_SUITE_P(Tied, ExecutorGrid, ::testing::ValuesIn(tied_grid()), case_name);

}  // namespace
}  // namespace bw::runtime
