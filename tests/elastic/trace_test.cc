// The trace of the real run (train.trace_steps, runtime/trace_events.h).
//
// TraceSteps / RankTraceJson / MergedTrace: the parser of train.trace_steps, the worker's store
// message and the coordinator's merge, against values written out by hand.
// TracedRun (end to end, worker processes): every rank's compute actions appear on its
// pipeline's device track in exactly the order the simulator runs that device's schedule
// (`breakwater schedule --trace`, the reference), one slice per send and receive on its device's
// tracks of sends and receives, every track of the real and the simulated trace nests (Chrome's
// format: tracks_nest), every receive completes after its sender posted it (the ranks' clocks
// agree), each rank reduces gradients and steps its optimizer once per traced step, and `trace
// compare` reports the F and B means computed here from the two files; and a step traced after a
// recovery is drawn with the new generation's plan.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../runtime/cli_runner.h"
#include "../sim/trace_nesting.h"
#include "core/error.h"
#include "run_files.h"
#include "runtime/trace_events.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(TraceSteps, ParsesStepsRangesAndListsInOrder) {
  EXPECT_TRUE(parse_trace_steps("", 10).empty());
  EXPECT_EQ(parse_trace_steps("7", 10), std::vector<int>({7}));
  EXPECT_EQ(parse_trace_steps("8-9", 10), std::vector<int>({8, 9}));
  EXPECT_EQ(parse_trace_steps("6-7,0, 3", 10), std::vector<int>({0, 3, 6, 7}));
  EXPECT_EQ(parse_trace_steps("0-63", 100).size(), 64u);
}

TEST(TraceSteps, RefusesWhatIsNotAStepOfTheRunNamingTheKey) {
  for (const char* bad :
       {"10", "9-10", "5-3", "a", "3,3", "2-4,4", "-1", "3-", "1,,2", "1.5", "0-64", " "}) {
    SCOPED_TRACE(bad);
    try {
      (void)parse_trace_steps(bad, 10 + (std::string(bad) == "0-64" ? 100 : 0));
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train.trace_steps"), std::string::npos) << e.what();
    }
  }
}

TEST(RankTraceJson, ReadsBackWhatItWritesAndRefusesBadSpans) {
  RankTrace t{3, 1, {{"0F1", "F", 100, 250}, {"GRAD_SYNC", "sync", 300, 300}}};
  const auto back = rank_trace_from_json(to_json(t), "test");
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.spans, t.spans);
  for (const char* bad :
       {R"({"step":0,"rank":0,"spans":[["0F1","F",10,5]]})",
        R"({"step":0,"rank":0,"spans":[["0F1","F",-1,5]]})",
        R"({"step":0,"rank":0,"spans":[["0F1","F",1]]})",
        R"({"step":0,"rank":0,"spans":[[1,"F",1,2]]})",
        R"({"step":0,"rank":0,"spans":[["0F1","F",1.5,2]]})", R"({"step":0,"rank":0,"spans":{}})",
        R"({"step":-1,"rank":0,"spans":[]})", R"({"rank":0,"spans":[]})", R"([1])"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(rank_trace_from_json(json::parse(bad), "test"), ConfigError);
  }
}

TEST(MergedTrace, OneProcessPerPipelineOneTrackPerDeviceTimesFromTheFirstSpan) {
  TracedStep a;
  a.step = 4;
  a.generation = 0;
  a.pipeline_kinds = {"1f1b", "gpipe"};
  // Ranks 0, 1: pipeline 0 devices 0, 1; ranks 2, 3: pipeline 1's one sharded stage.
  a.rank_at = {{0, 0}, {0, 1}, {1, 0}, {1, 0}};
  a.workers = {5, 6, 7, 8};
  a.ranks = {
      {4, 1, {{"1F0", "F", 1'000'200, 1'000'500}}},
      {4,
       0,
       {{"0F0", "F", 1'000'000, 1'000'100}, {"OPTIMIZER", "optimizer", 1'000'600, 1'000'700}}},
      {4, 3, {{"0B0", "B", 1'000'300, 1'000'900}}}};
  a.missing = {2};
  TracedStep b = a;
  b.step = 9;
  b.generation = 1;
  b.pipeline_kinds = {"hanayo"};
  b.rank_at = {{0, 0}};
  b.workers = {6};
  b.ranks = {{9, 0, {{"0F0", "F", 2'000'000, 2'000'050}}}};
  b.missing = {};
  const json doc = json::parse(merged_chrome_trace({a, b}, true));
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  std::vector<std::tuple<int, int, std::string, double, double, int>> slices;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      processes[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (e.at("ph") == "X") {
      slices.emplace_back(e.at("pid"), e.at("tid"), e.at("name"), e.at("ts"), e.at("dur"),
                          e.at("args").at("step"));
    }
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "generation 0 pipeline 0 (1f1b)"},
                                                   {1, "generation 0 pipeline 1 (gpipe)"},
                                                   {1000, "generation 1 pipeline 0 (hanayo)"}}));
  EXPECT_EQ(threads.at({0, 0}), "device 0 (rank 0, worker 5)");
  EXPECT_EQ(threads.at({0, 1}), "device 1 (rank 1, worker 6)");
  EXPECT_EQ(threads.at({1, 0}), "device 0 (rank 2, worker 7)");
  EXPECT_EQ(threads.at({1, 103}), "device 0 (rank 3, worker 8)");  // a sharded stage's second
  EXPECT_EQ(threads.at({1000, 0}), "device 0 (rank 0, worker 6)");
  std::sort(slices.begin(), slices.end(),
            [](const auto& x, const auto& y) { return std::get<3>(x) < std::get<3>(y); });
  using S = std::tuple<int, int, std::string, double, double, int>;
  EXPECT_EQ(slices,
            (std::vector<S>{S{0, 0, "0F0", 0, 100, 4}, S{0, 1, "1F0", 200, 300, 4},
                            S{1, 103, "0B0", 300, 600, 4}, S{0, 0, "OPTIMIZER", 600, 100, 4},
                            S{1000, 0, "0F0", 1'000'000, 50, 9}}));
  const auto& steps = doc.at("otherData").at("steps");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].at("missing_ranks"), json::array({2}));
  EXPECT_EQ(steps[1].at("generation"), 1);
  EXPECT_EQ(doc.at("otherData").at("origin_unix_us"), 1'000'000);
}

// Sends and receives overlap the compute of their rank and each other (several in flight): they go
// to tracks of their own, per device and direction, as many lanes as are in flight at once, named
// after the device, with args.device naming its track; compute stays on the device's track.
TEST(MergedTrace, SendsAndReceivesGetTracksOfTheirOwnAndEveryTrackNests) {
  TracedStep a;
  a.step = 2;
  a.pipeline_kinds = {"1f1b"};
  a.rank_at = {{0, 0}, {0, 1}};
  a.workers = {5, 6};
  a.ranks = {{2,
              0,
              {{"0F0", "F", 1000, 1100},
               {"0SEND_F0", "comm", 1100, 1250},
               {"0F1", "F", 1100, 1200},
               {"0SEND_F1", "comm", 1200, 1300},
               {"0RECV_B0", "comm", 1050, 1400},
               {"0B0", "B", 1400, 1600},
               {"GRAD_SYNC", "sync", 1600, 1700}}},
             {2, 1, {{"1RECV_F0", "comm", 1000, 1260}, {"1F0", "F", 1260, 1300}}}};
  const json doc = json::parse(merged_chrome_trace({a}, true));
  EXPECT_TRUE(testing::tracks_nest(doc));
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::string, std::pair<std::string, int>> slices;  // name -> (track name, args.device)
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const auto& args = e.at("args");
    slices[e.at("name")] = {threads.at({e.at("pid"), e.at("tid")}),
                            args.contains("device") ? args.at("device").get<int>() : -1};
  }
  using T = std::pair<std::string, int>;
  EXPECT_EQ(slices,
            (std::map<std::string, T>{{"0F0", {"device 0 (rank 0, worker 5)", -1}},
                                      {"0F1", {"device 0 (rank 0, worker 5)", -1}},
                                      {"0B0", {"device 0 (rank 0, worker 5)", -1}},
                                      {"GRAD_SYNC", {"device 0 (rank 0, worker 5)", -1}},
                                      {"0SEND_F0", {"device 0 (rank 0, worker 5) sends", 0}},
                                      {"0SEND_F1", {"device 0 (rank 0, worker 5) sends #2", 0}},
                                      {"0RECV_B0", {"device 0 (rank 0, worker 5) receives", 0}},
                                      {"1RECV_F0", {"device 1 (rank 1, worker 6) receives", 1}},
                                      {"1F0", {"device 1 (rank 1, worker 6)", -1}}}));
}

// --- end to end

std::string dir() {
  static const std::string d = testing::scratch_dir(
      (fs::temp_directory_path() / fmt::format("bw_trace_{}", getpid())).string());
  return d;
}

std::string corpus() { return testing::letters_corpus(dir(), 7); }

struct Slice {
  int pid, tid;
  std::string name, cat;
  double ts, dur;
  int step;
  int device;  // the device track it belongs to: args.device for sends and receives, else tid
};

std::vector<Slice> slices_of(const json& doc) {
  std::vector<Slice> out;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    // The simulator's slices have no step.
    const json args = e.value("args", json::object());
    out.push_back({e.at("pid"), e.at("tid"), e.at("name"), e.at("cat"), e.at("ts"), e.at("dur"),
                   args.value("step", -1), args.value("device", e.at("tid").get<int>())});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Slice& a, const Slice& b) { return a.ts < b.ts; });
  return out;
}

// Device d's compute actions of the simulated schedule, in the order the simulator runs them.
std::map<int, std::vector<std::string>> simulated_order(const std::string& kind, int devices,
                                                        int microbatches, int waves) {
  const auto path =
      (fs::path(dir()) / fmt::format("sim_{}_{}_{}.json", kind, devices, microbatches)).string();
  auto r = testing::run_cli(
      {"schedule", "--kind", kind, "-P", std::to_string(devices), "-B",
       std::to_string(microbatches), "--waves", std::to_string(waves), "--trace", path},
      path + ".log", 60);
  EXPECT_EQ(r.status, 0) << r.output;
  const json doc = json::parse(testing::read_text(path));
  EXPECT_TRUE(testing::tracks_nest(doc)) << path;
  std::map<int, std::vector<std::string>> order;
  for (const auto& s : slices_of(doc)) {
    if (s.cat == "F" || s.cat == "B" || s.cat == "I" || s.cat == "W")
      order[s.tid].push_back(s.name);
  }
  return order;
}

// Per (pipeline, device, class) of F and B: the mean duration in ms of the measured trace's
// slices (every traced step), and of the simulated trace's (the predictions, one per action;
// every action runs once per step, so the mean of the predictions is what compare weighs).
struct Means {
  std::map<std::tuple<int, int, std::string>, std::pair<double, int>> measured;  // sum ms, count
  std::map<std::pair<int, std::string>, std::pair<double, int>> predicted;
  std::map<std::tuple<int, int, std::string>, int> comm;  // (pid, device, SEND/RECV) -> slices
};

Means means_of(const json& real, const json& sim) {
  Means m;
  for (const auto& s : slices_of(real)) {
    if (s.cat == "F" || s.cat == "B") {
      auto& [sum, n] = m.measured[{s.pid, s.tid, s.cat}];
      sum += s.dur / 1000, ++n;
    } else if (s.cat == "comm") {
      ++m.comm[{s.pid, s.device, s.name.find("SEND") != std::string::npos ? "SEND" : "RECV"}];
    }
  }
  for (const auto& s : slices_of(sim)) {
    if (s.cat != "F" && s.cat != "B") continue;
    auto& [sum, n] = m.predicted[{s.tid, s.cat}];
    sum += s.dur / 1000, ++n;
  }
  return m;
}

// `trace compare --json`: every F and B row holds the means computed from the files, and the
// sends and receives counted on their device.
void expect_compare_reports_the_means(const json& real, const json& sim, const std::string& out) {
  const Means m = means_of(real, sim);
  const json report = json::parse(out.substr(out.find('{')));
  std::set<std::tuple<int, int, std::string>> seen;
  for (const auto& p : report.at("pipelines")) {
    const int pid = p.at("pid");
    for (const auto& row : p.at("classes")) {
      const int device = row.at("device");
      const std::string cls = row.at("class");
      SCOPED_TRACE(fmt::format("pipeline {} device {} class {}", pid, device, cls));
      if (cls == "SEND" || cls == "RECV") {
        EXPECT_EQ(row.at("slices").get<int>(), m.comm.at({pid, device, cls}));
        continue;
      }
      if (cls != "F" && cls != "B") continue;
      seen.insert({pid, device, cls});
      const auto [sum, n] = m.measured.at({pid, device, cls});
      const auto [psum, pn] = m.predicted.at({device, cls});
      const double measured = sum / n, predicted = psum / pn;
      EXPECT_EQ(row.at("slices").get<int>(), n);
      EXPECT_NEAR(row.at("measured_ms").get<double>(), measured, 1e-9 * measured);
      EXPECT_NEAR(row.at("predicted_ms").get<double>(), predicted, 1e-9 * predicted);
      EXPECT_NEAR(row.at("ratio").get<double>(), measured / predicted, 1e-9 * measured / predicted);
    }
  }
  std::set<std::tuple<int, int, std::string>> want;
  for (const auto& [key, unused] : m.measured) want.insert(key);
  EXPECT_EQ(seen, want);
}

// The table: a row "device class per-step measured predicted ratio" per F and B of each pipeline,
// the means to 4 significant digits and the ratio to 3 decimals.
void expect_table_reports_the_means(const json& real, const json& sim, const std::string& out) {
  const Means m = means_of(real, sim);
  std::istringstream lines(out);
  int pid = -1, rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("pipeline ", 0) == 0) pid = std::stoi(line.substr(9));
    std::istringstream words(line);
    int device = 0;
    std::string cls, measured, predicted, ratio;
    double per_step = 0;
    if (!(words >> device >> cls >> per_step >> measured >> predicted >> ratio)) continue;
    if (cls != "F" && cls != "B") continue;
    SCOPED_TRACE(line);
    const auto [sum, n] = m.measured.at({pid, device, cls});
    const auto [psum, pn] = m.predicted.at({device, cls});
    // Within the rounding of what is printed.
    EXPECT_NEAR(std::stod(measured), sum / n, 5e-4 * sum / n);
    EXPECT_NEAR(std::stod(predicted), psum / pn, 5e-4 * psum / pn);
    EXPECT_NEAR(std::stod(ratio), (sum / n) / (psum / pn), 5e-4 + 1e-9);
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(m.measured.size())) << out;
}

struct TracedRunResult {
  int status = -1;
  std::string output;
  json trace;
};

TracedRunResult traced_run(const std::string& name, const std::vector<std::string>& extra) {
  const auto out_dir = (fs::path(dir()) / name).string();
  std::vector<std::string> args = {"train", "--cluster.nodes=4", "--pipeline.pipelines=[2,2]",
                                   "--pipeline.schedule=hanayo", "--pipeline.waves=2",
                                   // 8 blocks: 10 layers, enough for the 8 chunks of 2 waves.
                                   "--model.name=tiny:8", "--data.path=" + corpus(),
                                   "--train.steps=5", "--train.sample_tokens=0",
                                   "--pipeline.microbatches=8", "--pipeline.microbatch_size=2",
                                   "--train.out_dir=" + out_dir};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = testing::run_cli(args, out_dir + ".log", 180);
  TracedRunResult out;
  out.status = r.timed_out ? -1 : r.status;
  out.output = r.output;
  const auto path = fs::path(out_dir) / "trace.json";
  if (fs::exists(path)) out.trace = json::parse(testing::read_text(path.string()));
  return out;
}

TEST(TracedRun, EveryActionOfEveryRankIsOnItsTrackInScheduleOrderWithAlignedClocks) {
  const auto run = traced_run("two_pipelines", {"--train.trace_steps=2-3"});
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.trace.is_object()) << run.output;
  EXPECT_NE(run.output.find("trace.json"), std::string::npos) << run.output;
  EXPECT_TRUE(testing::tracks_nest(run.trace));
  const auto sim = simulated_order("hanayo", 2, 4, 2);
  ASSERT_EQ(sim.size(), 2u);
  const auto slices = slices_of(run.trace);
  std::set<int> pids;
  for (const auto& s : slices) pids.insert(s.pid);
  EXPECT_EQ(pids, (std::set<int>{0, 1}));  // generation 0's two pipelines
  for (int step : {2, 3}) {
    for (int pid : {0, 1}) {
      // Sends posted on this pipeline, by name, for the causality check.
      std::map<std::string, double> send_posted;
      for (const auto& s : slices)
        if (s.step == step && s.pid == pid && s.name.find("SEND") != std::string::npos)
          send_posted[s.name] = s.ts;
      for (int tid : {0, 1}) {
        SCOPED_TRACE(fmt::format("step {} pipeline {} device {}", step, pid, tid));
        std::vector<std::string> compute;
        double last_end = -1;
        int sync = 0, optimizer = 0, comm = 0;
        for (const auto& s : slices) {
          if (s.step != step || s.pid != pid || s.device != tid) continue;
          EXPECT_GE(s.dur, 0);
          EXPECT_EQ(s.cat == "comm", s.tid != tid) << s.name << " on track " << s.tid;
          if (s.cat == "F" || s.cat == "B") {
            compute.push_back(s.name);
            EXPECT_GE(s.ts, last_end) << s.name << " overlaps the compute before it";
            last_end = s.ts + s.dur;
          } else if (s.cat == "sync") {
            ++sync;
          } else if (s.cat == "optimizer") {
            ++optimizer;
          } else if (s.cat == "comm") {
            ++comm;
            // A receive completes only after its sender (the chunk before for activations, the
            // chunk after for gradients) posted the send: both clocks tell the same time.
            const auto at = s.name.find("RECV_");
            if (at != std::string::npos) {
              const int chunk = std::stoi(s.name.substr(0, at));
              const bool fwd = s.name[at + 5] == 'F';
              const std::string mb = s.name.substr(at + 6);
              const std::string send =
                  fmt::format("{}SEND_{}{}", fwd ? chunk - 1 : chunk + 1, fwd ? 'F' : 'B', mb);
              auto it = send_posted.find(send);
              ASSERT_NE(it, send_posted.end()) << s.name << " has no " << send;
              EXPECT_LE(it->second, s.ts + s.dur)
                  << s.name << " completed before " << send << " was posted";
            }
          }
        }
        EXPECT_EQ(compute, sim.at(tid));
        EXPECT_EQ(sync, 1);
        EXPECT_EQ(optimizer, 1);
        EXPECT_GT(comm, 0);
      }
    }
  }
  // The simulator's trace of the same schedule compares with it, action by action.
  const auto sim_path = (fs::path(dir()) / "sim_hanayo_2_4.json").string();
  const auto real_path = (fs::path(dir()) / "two_pipelines" / "trace.json").string();
  auto cmp = testing::run_cli({"trace", "compare", real_path, sim_path, "--json"},
                              real_path + ".compare.log", 60);
  ASSERT_EQ(cmp.status, 0) << cmp.output;
  expect_compare_reports_the_means(run.trace, json::parse(testing::read_text(sim_path)),
                                   cmp.output);
  auto table =
      testing::run_cli({"trace", "compare", real_path, sim_path}, real_path + ".table.log", 60);
  ASSERT_EQ(table.status, 0) << table.output;
  expect_table_reports_the_means(run.trace, json::parse(testing::read_text(sim_path)),
                                 table.output);
  // Against another schedule (GPipe of the same size) it is refused, naming the action.
  const auto gpipe = (fs::path(dir()) / "sim_gpipe.json").string();
  auto g = testing::run_cli({"schedule", "--kind", "gpipe", "-P", "2", "-B", "4", "--trace", gpipe},
                            gpipe + ".log", 60);
  ASSERT_EQ(g.status, 0) << g.output;
  auto bad = testing::run_cli({"trace", "compare", real_path, gpipe}, gpipe + ".compare.log", 60);
  EXPECT_EQ(bad.status, 2) << bad.output;
}

TEST(TracedRun, AStepTracedAfterARecoveryIsDrawnWithTheNewPlan) {
  // Node 3 (pipeline 1's second device) dies in step 1's forward; steps 1.. then run in
  // generation 1 on the three nodes left.
  const auto run = traced_run("recovered", {"--train.trace_steps=0,1,4",
                                            "--elastic.inject=kill:node=3:step=1:phase=forward"});
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.trace.is_object()) << run.output;
  EXPECT_TRUE(testing::tracks_nest(run.trace));
  const auto& steps = run.trace.at("otherData").at("steps");
  ASSERT_EQ(steps.size(), 3u) << steps.dump();
  EXPECT_EQ(steps[0].at("generation"), 0);
  EXPECT_EQ(steps[0].at("ranks"), 4);
  EXPECT_EQ(steps[1].at("generation"), 1);
  EXPECT_EQ(steps[1].at("ranks"), 3);
  EXPECT_EQ(steps[2].at("generation"), 1);
  std::map<int, std::set<int>> pids_of_step;
  bool transfer = false;
  for (const auto& s : slices_of(run.trace)) {
    pids_of_step[s.step].insert(s.pid / 1000);
    if (s.cat == "state") {
      EXPECT_EQ(s.step, 1);
      transfer = true;
    }
  }
  EXPECT_EQ(pids_of_step[0], std::set<int>{0});
  EXPECT_EQ(pids_of_step[1], std::set<int>{1});
  EXPECT_EQ(pids_of_step[4], std::set<int>{1});
  EXPECT_TRUE(transfer) << "generation 1 moved node 3's layers: its first step shows the transfer";
}

TEST(TracedRun, AStepOutsideTheRunIsOneErrorAndExit2) {
  const auto run = traced_run("outside", {"--train.trace_steps=4-5"});
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("train.trace_steps"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("0..4"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace bw::runtime
