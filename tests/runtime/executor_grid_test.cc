// The executor and gradient sync with ranks as threads in one process over an in-memory store
// (after Gloo's tests): a grid of schedules x pipeline shapes x microbatch counts, each trained for
// three steps and compared with one Worker holding the whole model, in every precision (as Gloo's
// tests run every algorithm over every element type). Oracle: the single-device Worker on the
// same data in the same precision; tolerances as in transparency_test.cc (fp32: 1e-5; bf16: one
// bf16 ulp, 2^-8, of the loss and lr * steps * 2^-8 of a parameter, derived there).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "cli_runner.h"
#include "runtime/layout.h"
#include "runtime/worker.h"
#include "schedule/generate.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

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
  const double ulp = std::ldexp(1.0, -8);
  const double loss_rel = bf16 ? ulp : 1e-5;
  const double param_abs = bf16 ? ulp * config.train.lr * config.train.steps : 1e-5;
  const RunLayout layout = layout_for(c.devices, c.kind, c.microbatches);
  auto got = train_threads(config, layout);
  auto want = train_threads(config, layout_for({1}, "single", c.microbatches));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], loss_rel * std::abs(want.losses[s]))
        << "step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  int bad = 0;
  for (const auto& [name, ref] : want.params) {
    const auto& t = got.params.at(name);
    auto excess = (t - ref).abs() - (param_abs + 1e-4 * ref.abs());
    if (name.size() > 13 && name.compare(name.size() - 13, 13, "attn.qkv.bias") == 0) {
      // The key bias's exact gradient is zero (softmax shift invariance): its trajectory is
      // rounding noise that AdamW scales to up to lr per step (transparency_test.cc).
      const int64_t d = ref.numel() / 3;
      excess.narrow(0, d, d)
          .copy_((t - ref).abs().narrow(0, d, d) - 2 * config.train.lr * config.train.steps);
    }
    if (excess.max().item<double>() > 0 && bad++ < 5) {
      ADD_FAILURE() << name << ": max |diff| " << (t - ref).abs().max().item<double>();
    }
  }
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
