// trace compare: a "measured" trace is built by hand from the simulator's own trace, in the format
// `breakwater train` writes (a process per pipeline, a thread per device and one for its sends
// and receives, a slice per action with args.step), with every duration a known multiple of its
// prediction; the comparison must recover the multiples, the makespan of the layout, the order of
// the gaps, and refuse other schedules.
#include "sim/trace_compare.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "schedule/generate.h"
#include "sim/render.h"

namespace bw::sim {
namespace {

using nlohmann::json;

// factor(device, class, step): measured duration / predicted duration.
using Factor = std::function<double(int, const std::string&, int)>;

struct Measured {
  json doc;
  std::vector<double> makespan_ms;           // per step, every slice
  std::vector<double> pipeline_makespan_ms;  // per step, the schedule's actions only
};

constexpr double kSyncMs = 0.5, kOptimizerMs = 0.25;

std::string class_of(const json& e) {
  const std::string cat = e["cat"];
  if (cat != "comm") return cat;
  return e["name"].get<std::string>().find("SEND") != std::string::npos ? "SEND" : "RECV";
}

// The simulated device tracks of `sim`, laid out back to back per device from each step's start
// (1 s apart), each action taking factor x its predicted time, then GRAD_SYNC and OPTIMIZER.
Measured measure(const json& sim, long long pid, int steps, const Factor& factor) {
  const int devices = sim["otherData"]["devices"];
  Measured m;
  m.doc = {{"displayTimeUnit", "ms"}, {"otherData", {{"source", "breakwater train"}}}};
  json events = json::array();
  events.push_back(
      {{"ph", "M"},
       {"pid", pid},
       {"name", "process_name"},
       {"args", {{"name", fmt::format("generation {} pipeline {}", pid / 1000, pid % 1000)}}}});
  for (int d = 0; d < devices; ++d)
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"tid", d},
                      {"name", "thread_name"},
                      {"args", {{"name", fmt::format("device {} (rank {})", d, 10 + d)}}}});
  for (int step = 0; step < steps; ++step) {
    const double start_ms = 1000.0 * step;
    double end_ms = start_ms, pipeline_end_ms = start_ms;
    for (int d = 0; d < devices; ++d) {
      double t = start_ms;
      auto slice = [&](const std::string& name, const std::string& cat, double ms) {
        // As the real trace: sends and receives on a track of their own, args.device naming
        // their device.
        const bool comm = cat == "comm";
        json args = {{"step", step}};
        if (comm) args["device"] = d;
        events.push_back({{"ph", "X"},
                          {"pid", pid},
                          {"tid", comm ? (1 << 21) + d : d},
                          {"name", name},
                          {"cat", cat},
                          {"ts", t * 1000},
                          {"dur", ms * 1000},
                          {"args", args}});
        t += ms;
      };
      for (const json& e : sim["traceEvents"]) {
        if (e["ph"] != "X" && e["ph"] != "i") continue;
        if (e["tid"].get<int>() != d) continue;
        const double predicted =
            e["ph"] == "X" ? e["dur"].get<double>() / 1000
                           : e["args"]["done_ms"].get<double>() - e["ts"].get<double>() / 1000;
        slice(e["name"], e["cat"], predicted * factor(d, class_of(e), step));
      }
      pipeline_end_ms = std::max(pipeline_end_ms, t);
      slice("GRAD_SYNC", "sync", kSyncMs);
      slice("OPTIMIZER", "optimizer", kOptimizerMs);
      end_ms = std::max(end_ms, t);
    }
    m.makespan_ms.push_back(end_ms - start_ms);
    m.pipeline_makespan_ms.push_back(pipeline_end_ms - start_ms);
  }
  m.doc["traceEvents"] = events;
  return m;
}

struct Simulated {
  schedule::Schedule s;
  SimResult r;
  json doc;
};

Simulated simulated(const schedule::ScheduleSpec& spec) {
  Simulated out;
  out.s = schedule::lower(schedule::generate(spec));
  out.r =
      simulate(out.s, stage_costs(out.s, {.forward_ms = 1, .backward_ms = 2, .output_bytes = 1e6},
                                  {.latency_ms = 0.02, .bandwidth_gbps = 100}));
  out.doc = json::parse(chrome_trace(out.s, out.r));
  return out;
}

const ClassComparison* row(const PipelineComparison& p, int device, const std::string& cls) {
  for (const auto& k : p.classes)
    if (k.device == device && k.cls == cls) return &k;
  ADD_FAILURE() << "no row for device " << device << " class " << cls;
  return nullptr;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / v.size();
}

// Device 1's forwards take 1.5x then 2.5x (mean 2x), its backwards 1.5x then 2x (mean 1.75x),
// device 0's sends 4x; everything else as predicted.
double skewed(int device, const std::string& cls, int step) {
  if (device == 1 && cls == "F") return step == 0 ? 1.5 : 2.5;
  if (device == 1 && cls == "B") return step == 0 ? 1.5 : 2.0;
  if (device == 0 && cls == "SEND") return 4;
  return 1;
}

TEST(TraceCompare, RecoversRatiosMakespanAndTheLargestGaps) {
  const Simulated sim = simulated({.kind = "1f1b", .devices = 3, .microbatches = 4});
  const Measured real = measure(sim.doc, 0, 2, skewed);
  const TraceComparison c = compare_traces(real.doc, "real.json", sim.doc, "sim.json");
  ASSERT_EQ(c.pipelines.size(), 1u);
  EXPECT_EQ(c.kind, "1f1b");
  EXPECT_EQ(c.devices, 3);
  EXPECT_EQ(c.microbatches, 4);
  const PipelineComparison& p = c.pipelines[0];
  EXPECT_EQ(p.name, "generation 0 pipeline 0");
  EXPECT_EQ(p.steps, 2);
  ASSERT_EQ(p.threads.size(), 3u);
  EXPECT_EQ(p.threads[1], "device 1 (rank 11)");

  const auto* f1 = row(p, 1, "F");
  const auto* b1 = row(p, 1, "B");
  const auto* f0 = row(p, 0, "F");
  const auto* send0 = row(p, 0, "SEND");
  const auto* recv2 = row(p, 2, "RECV");
  ASSERT_TRUE(f1 && b1 && f0 && send0 && recv2);
  EXPECT_NEAR(f1->ratio, 2.0, 1e-9);
  EXPECT_NEAR(f1->measured_ms, 2.0, 1e-9);  // forward_ms 1, twice as long on average
  EXPECT_NEAR(f1->predicted_ms, 1.0, 1e-9);
  EXPECT_EQ(f1->slices, 8);  // 4 microbatches x 2 steps
  EXPECT_DOUBLE_EQ(f1->per_step, 4);
  EXPECT_NEAR(b1->ratio, 1.75, 1e-9);
  EXPECT_NEAR(b1->predicted_ms, 2.0, 1e-9);
  EXPECT_NEAR(f0->ratio, 1.0, 1e-9);
  EXPECT_NEAR(send0->ratio, 4.0, 1e-9);
  EXPECT_GT(send0->predicted_ms, 0);
  EXPECT_NEAR(recv2->ratio, 1.0, 1e-9);

  for (int d = 0; d < 3; ++d) {
    const auto* sync = row(p, d, "sync");
    const auto* opt = row(p, d, "optimizer");
    ASSERT_TRUE(sync && opt);
    EXPECT_FALSE(sync->simulated);
    EXPECT_TRUE(std::isnan(sync->predicted_ms));
    EXPECT_TRUE(std::isnan(sync->ratio));
    EXPECT_NEAR(sync->measured_ms, kSyncMs, 1e-9);
    EXPECT_NEAR(opt->measured_ms, kOptimizerMs, 1e-9);
    EXPECT_DOUBLE_EQ(sync->per_step, 1);
  }
  // Rows by device, then F, B, SEND, RECV, then the measured-only classes.
  std::vector<std::string> order;
  for (const auto& k : p.classes)
    if (k.device == 1) order.push_back(k.cls);
  EXPECT_EQ(order, (std::vector<std::string>{"F", "B", "SEND", "RECV", "optimizer", "sync"}));

  EXPECT_NEAR(p.measured_makespan_ms, mean(real.makespan_ms), 1e-9);
  EXPECT_NEAR(p.measured_pipeline_makespan_ms, mean(real.pipeline_makespan_ms), 1e-9);
  EXPECT_DOUBLE_EQ(p.predicted_makespan_ms, sim.r.makespan_ms);
  EXPECT_NE(real.makespan_ms[0], real.makespan_ms[1]);  // the mean is over different steps

  // Device 1's backwards miss by 1.5 ms, its forwards by 1 ms, device 0's sends by 3 x 0.1 ms.
  ASSERT_GE(p.actions.size(), 9u);
  std::vector<std::pair<int, std::string>> top;
  for (size_t i = 0; i < 5; ++i) top.emplace_back(p.actions[i].device, p.actions[i].name);
  EXPECT_EQ(top, (std::vector<std::pair<int, std::string>>{
                     {1, "1B0"}, {1, "1B1"}, {1, "1B2"}, {1, "1B3"}, {1, "1F0"}}));
  EXPECT_NEAR(p.actions[0].gap_ms(), 1.5, 1e-9);
  EXPECT_NEAR(p.actions[0].measured_ms, 3.5, 1e-9);
  EXPECT_NEAR(p.actions[0].predicted_ms, 2.0, 1e-9);
  EXPECT_NEAR(p.actions[4].gap_ms(), 1.0, 1e-9);
  EXPECT_EQ(p.actions[8].device, 0);
  EXPECT_NE(p.actions[8].name.find("SEND_F"), std::string::npos) << p.actions[8].name;
  EXPECT_NEAR(p.actions[8].measured_ms, 4 * p.actions[8].predicted_ms, 1e-9);
}

TEST(TraceCompare, TablesAndJsonSayTheSame) {
  const Simulated sim = simulated({.kind = "1f1b", .devices = 3, .microbatches = 4});
  const Measured real = measure(sim.doc, 0, 2, skewed);
  const TraceComparison c = compare_traces(real.doc, "real.json", sim.doc, "sim.json");
  const std::string text = format_comparison(c, 2);
  EXPECT_NE(text.find("     1  F                  4            2             1    2.000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("     0  sync               1          0.5  not simulated"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("largest gaps (2 of "), std::string::npos) << text;
  EXPECT_NE(text.find("     1  1B0             3.5             2       +1.5"), std::string::npos)
      << text;

  const json j = comparison_json(c, 2);
  EXPECT_EQ(j["simulated"]["kind"], "1f1b");
  ASSERT_EQ(j["pipelines"].size(), 1u);
  const json& p = j["pipelines"][0];
  EXPECT_EQ(p["pid"], 0);
  EXPECT_EQ(p["steps"], 2);
  EXPECT_NEAR(p["makespan"]["measured_ms"].get<double>(), mean(real.makespan_ms), 1e-9);
  EXPECT_DOUBLE_EQ(p["makespan"]["predicted_ms"].get<double>(), sim.r.makespan_ms);
  ASSERT_EQ(p["largest_gaps"].size(), 2u);
  EXPECT_EQ(p["largest_gaps"][0]["action"], "1B0");
  EXPECT_NEAR(p["largest_gaps"][0]["gap_ms"].get<double>(), 1.5, 1e-9);
  bool saw_sync = false;
  for (const json& k : p["classes"]) {
    if (k["class"] == "F" && k["device"] == 1) {
      EXPECT_NEAR(k["ratio"].get<double>(), 2.0, 1e-9);
      EXPECT_EQ(k["thread_name"], "device 1 (rank 11)");
    }
    if (k["class"] == "sync") {
      saw_sync = true;
      EXPECT_FALSE(k["simulated"].get<bool>());
      EXPECT_TRUE(k["predicted_ms"].is_null());
      EXPECT_TRUE(k["ratio"].is_null());
    }
  }
  EXPECT_TRUE(saw_sync);
}

// Every kind's action names agree between the simulator's trace and to_string(), so a trace that
// runs the same schedule at twice the predicted times reads 2 for every class.
class EveryKind : public ::testing::TestWithParam<schedule::ScheduleSpec> {};

TEST_P(EveryKind, TwiceAsSlowReadsTwo) {
  const Simulated sim = simulated(GetParam());
  const Measured real = measure(sim.doc, 1001, 3, [](int, const std::string&, int) { return 2.0; });
  const TraceComparison c = compare_traces(real.doc, "real.json", sim.doc, "sim.json");
  ASSERT_EQ(c.pipelines.size(), 1u);
  EXPECT_EQ(c.pipelines[0].pid, 1001);
  EXPECT_EQ(c.pipelines[0].steps, 3);
  int simulated_rows = 0;
  for (const auto& k : c.pipelines[0].classes) {
    if (!k.simulated || !(k.predicted_ms > 0)) continue;
    ++simulated_rows;
    EXPECT_NEAR(k.ratio, 2.0, 1e-9) << "device " << k.device << " class " << k.cls;
  }
  EXPECT_GE(simulated_rows, 2 * GetParam().devices);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, EveryKind,
    ::testing::Values(
        schedule::ScheduleSpec{.kind = "gpipe", .devices = 2, .microbatches = 3},
        schedule::ScheduleSpec{.kind = "1f1b", .devices = 4, .microbatches = 8},
        schedule::ScheduleSpec{
            .kind = "interleaved", .devices = 2, .microbatches = 4, .chunks_per_device = 2},
        schedule::ScheduleSpec{.kind = "zb-h1", .devices = 3, .microbatches = 6},
        schedule::ScheduleSpec{.kind = "hanayo", .devices = 2, .microbatches = 4, .waves = 2}));

TEST(TraceCompare, PipelinesAreComparedOneByOneOrByPid) {
  const Simulated sim = simulated({.kind = "1f1b", .devices = 3, .microbatches = 4});
  Measured a = measure(sim.doc, 0, 2, skewed);
  const Measured b = measure(sim.doc, 1001, 1, [](int, const std::string&, int) { return 1.0; });
  for (const json& e : b.doc["traceEvents"]) a.doc["traceEvents"].push_back(e);
  const TraceComparison both = compare_traces(a.doc, "real.json", sim.doc, "sim.json");
  ASSERT_EQ(both.pipelines.size(), 2u);
  EXPECT_EQ(both.pipelines[0].pid, 0);
  EXPECT_EQ(both.pipelines[1].pid, 1001);
  EXPECT_EQ(both.pipelines[1].name, "generation 1 pipeline 1");
  EXPECT_EQ(both.pipelines[1].steps, 1);

  const TraceComparison one =
      compare_traces(a.doc, "real.json", sim.doc, "sim.json", {.pipeline = 1001});
  ASSERT_EQ(one.pipelines.size(), 1u);
  EXPECT_EQ(one.pipelines[0].pid, 1001);
  EXPECT_NEAR(row(one.pipelines[0], 1, "F")->ratio, 1.0, 1e-9);
  EXPECT_NEAR(std::fabs(one.pipelines[0].actions[0].gap_ms()), 0, 1e-9);
}

// The ConfigError message compare_traces throws, or "" when it throws none.
std::string error_of(const json& real, const json& sim, const CompareOptions& options = {}) {
  try {
    compare_traces(real, "real.json", sim, "sim.json", options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceCompare, ADifferentScheduleIsRefusedNamingDeviceAndAction) {
  const Simulated four = simulated({.kind = "1f1b", .devices = 3, .microbatches = 4});
  const Simulated two = simulated({.kind = "1f1b", .devices = 3, .microbatches = 2});
  const auto same = [](int, const std::string&, int) { return 1.0; };
  // The run had more microbatches than the simulation: it ran an action the simulation lacks.
  const std::string more = error_of(measure(four.doc, 0, 1, same).doc, two.doc);
  EXPECT_NE(more.find("real.json: pipeline 0 (generation 0 pipeline 0) device 0 ran 0F2, which "
                      "sim.json does not have on device 0"),
            std::string::npos)
      << more;
  EXPECT_NE(more.find("simulate the same kind, devices, microbatches and chunks"),
            std::string::npos)
      << more;
  // Fewer: a simulated forward never ran.
  const std::string fewer = error_of(measure(two.doc, 0, 1, same).doc, four.doc);
  EXPECT_NE(fewer.find("device 0 never ran 0F2, which sim.json has on device 0"), std::string::npos)
      << fewer;
  // More devices than simulated.
  const Simulated wide = simulated({.kind = "1f1b", .devices = 4, .microbatches = 4});
  const std::string devices = error_of(measure(wide.doc, 0, 1, same).doc, four.doc);
  EXPECT_NE(devices.find("device 3 ran"), std::string::npos) << devices;
  EXPECT_NE(devices.find("simulates 3 devices"), std::string::npos) << devices;
  // Another kind on the same sizes: the same actions in another order.
  const Simulated gpipe = simulated({.kind = "gpipe", .devices = 3, .microbatches = 4});
  const std::string kind = error_of(measure(gpipe.doc, 0, 1, same).doc, four.doc);
  EXPECT_NE(kind.find("device 0 ran 0F3 as compute action 4 of step 0, where sim.json runs 0B0"),
            std::string::npos)
      << kind;
}

TEST(TraceCompare, WhatIsNotATraceIsRefusedNamingTheFileAndTheProblem) {
  const Simulated sim = simulated({.kind = "1f1b", .devices = 2, .microbatches = 2});
  const json real = measure(sim.doc, 0, 1, [](int, const std::string&, int) { return 1.0; }).doc;
  EXPECT_NE(error_of(json::array(), sim.doc).find("real.json: not a Chrome trace"),
            std::string::npos);
  EXPECT_NE(error_of({{"traceEvents", 3}}, sim.doc).find("real.json: not a Chrome trace"),
            std::string::npos);
  EXPECT_NE(error_of(real, {{"events", json::array()}}).find("sim.json: not a Chrome trace"),
            std::string::npos);
  EXPECT_NE(
      error_of(real, {{"traceEvents", json::array()}}).find("sim.json: not a simulated trace"),
      std::string::npos);
  EXPECT_NE(error_of({{"traceEvents", json::array({{{"ph", "M"}, {"name", "x"}}})}}, sim.doc)
                .find("real.json: no slices"),
            std::string::npos);
  EXPECT_NE(error_of(sim.doc, sim.doc).find("real.json: this is a simulated trace"),
            std::string::npos);

  json bad_ts = real;
  for (json& e : bad_ts["traceEvents"])
    if (e["ph"] == "X") {
      e["ts"] = "soon";
      break;
    }
  const std::string ts = error_of(bad_ts, sim.doc);
  EXPECT_NE(ts.find("real.json: traceEvents["), std::string::npos) << ts;
  EXPECT_NE(ts.find("field 'ts' must be a number"), std::string::npos) << ts;

  json no_step = real;
  for (json& e : no_step["traceEvents"])
    if (e["ph"] == "X") e["args"].erase("step");
  EXPECT_NE(error_of(no_step, sim.doc).find("missing field 'step'"), std::string::npos);

  json not_an_action = real;
  for (json& e : not_an_action["traceEvents"])
    if (e["ph"] == "X") {
      e["name"] = "forward";
      break;
    }
  EXPECT_NE(error_of(not_an_action, sim.doc).find("'forward' of cat 'F' is not an action name"),
            std::string::npos);

  const std::string pid = error_of(real, sim.doc, {.pipeline = 7});
  EXPECT_NE(pid.find("real.json: no slices of pipeline 7 (--pipeline); its pids are 0"),
            std::string::npos)
      << pid;
}

}  // namespace
}  // namespace bw::sim
