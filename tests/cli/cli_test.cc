// Runs the real `breakwater` binary on the bundled examples and checks what a user sees: exit
// status, JSON for programs, one clear sentence for impossible requests. Every run has a deadline
// (coreutils `timeout`), so a hang fails the test instead of stalling the suite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& args, int deadline_s = 120) {
  std::string cmd = "cd '" BW_SOURCE_DIR "' && timeout -s KILL " + std::to_string(deadline_s) +
                    " '" BW_BINARY "' " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

nlohmann::json parse(const Result& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "output is not JSON (" << e.what() << "):\n" << r.out.substr(0, 2000);
    return {};
  }
}

TEST(Cli, HelpListsEverySubcommand) {
  Result r = run("--help");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* sub : {"plan", "schedule", "simulate", "profile", "data", "trace"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << "missing subcommand " << sub << "\n" << r.out;
}

// `breakwater` (pure) knows the LibTorch subcommands from a table (src/cli/torch_commands.cc);
// `breakwater-torch` registers them from their own files. The two must agree, and --help reads
// the same from both.
TEST(Cli, BothExecutablesKnowTheSameCommands) {
#ifdef BW_TORCH_BINARY
  auto run_torch = [](const std::string& args) {
    Result r;
    std::string cmd = "cd '" BW_SOURCE_DIR "' && timeout -s KILL 120 '" BW_TORCH_BINARY "' " +
                      args + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
    const int raw = pclose(pipe);
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    return r;
  };
  for (const char* args : {"--list-commands", "--help", "profile --help"}) {
    const Result pure = run(args), torch = run_torch(args);
    EXPECT_EQ(pure.status, 0) << args << "\n" << pure.out;
    EXPECT_EQ(pure.out, torch.out) << "`breakwater " << args << "` and `breakwater-torch " << args
                                   << "` differ: add the command to src/cli/torch_commands.cc";
  }
  // A LibTorch command through the pure executable: its own help, from breakwater-torch.
  const Result train = run("train --help");
  EXPECT_EQ(train.status, 0) << train.out;
  EXPECT_NE(train.out.find("Usage: breakwater train"), std::string::npos) << train.out;
#else
  GTEST_SKIP() << "built without LibTorch";
#endif
}

// `trace compare` on the simulator's own trace of `schedule`, turned into a measured trace of two
// steps (train's format) whose device 0 forwards take 3x their prediction.
TEST(Cli, TraceCompareReadsAMeasuredTraceAgainstTheSimulatedOne) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("bw_cli_trace_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string sim = (dir / "sim.json").string(), real = (dir / "real.json").string();
  Result r = run("schedule --kind 1f1b --devices 2 --microbatches 3 --trace '" + sim + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json simulated;
  std::ifstream(sim) >> simulated;
  nlohmann::json events = nlohmann::json::array();
  for (int step = 0; step < 2; ++step) {
    for (const auto& e : simulated["traceEvents"]) {
      if ((e["ph"] != "X" && e["ph"] != "i") || e["tid"].get<int>() >= 2) continue;
      nlohmann::json x = {{"ph", "X"},         {"pid", 0},        {"tid", e["tid"]},
                          {"name", e["name"]}, {"cat", e["cat"]}, {"args", {{"step", step}}}};
      double dur = e["ph"] == "X"
                       ? e["dur"].get<double>()
                       : e["args"]["done_ms"].get<double>() * 1000 - e["ts"].get<double>();
      if (e["cat"] == "F" && e["tid"] == 0) dur *= 3;
      x["ts"] = e["ts"].get<double>() + step * 1e6;
      x["dur"] = dur;
      events.push_back(x);
    }
    events.push_back({{"ph", "X"},
                      {"pid", 0},
                      {"tid", 0},
                      {"name", "OPTIMIZER"},
                      {"cat", "optimizer"},
                      {"ts", step * 1e6},
                      {"dur", 100},
                      {"args", {{"step", step}}}});
  }
  std::ofstream(real) << nlohmann::json{{"traceEvents", events}}.dump();

  r = run("trace compare '" + real + "' '" + sim + "' --json --top 3");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = parse(r);
  ASSERT_EQ(j["pipelines"].size(), 1u) << r.out;
  const auto& p = j["pipelines"][0];
  EXPECT_EQ(p["steps"], 2);
  EXPECT_EQ(p["largest_gaps"].size(), 3u);
  EXPECT_EQ(p["largest_gaps"][0]["device"], 0);  // a forward of device 0: 2 ms late
  EXPECT_NEAR(p["largest_gaps"][0]["gap_ms"].get<double>(), 2.0, 1e-9);
  int checked = 0;
  for (const auto& k : p["classes"]) {
    if (k["device"] == 0 && k["class"] == "F") {
      EXPECT_NEAR(k["ratio"].get<double>(), 3.0, 1e-9);
      EXPECT_EQ(k["per_step"].get<double>(), 3.0);
      ++checked;
    }
    if (k["device"] == 1 && k["class"] == "B") {
      EXPECT_NEAR(k["ratio"].get<double>(), 1.0, 1e-9);
      ++checked;
    }
    if (k["class"] == "optimizer") {
      EXPECT_TRUE(k["ratio"].is_null());
      EXPECT_FALSE(k["simulated"].get<bool>());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3) << r.out;

  r = run("trace compare '" + real + "' '" + sim + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("not simulated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest gaps (5 of "), std::string::npos) << r.out;

  r = run("trace compare '" + sim + "' '" + sim + "'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("this is a simulated trace"), std::string::npos) << r.out;
  r = run("trace compare '" + real + "' '" + (dir / "missing.json").string() + "'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("cannot open Chrome trace"), std::string::npos) << r.out;
  r = run("schedule --kind gpipe --devices 2 --microbatches 3 --trace '" + sim + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("trace compare '" + real + "' '" + sim + "'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("a different schedule"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(Cli, UnknownSubcommandFails) {
  Result r = run("no-such-command");
  EXPECT_NE(r.status, 0) << r.out;
}

TEST(Cli, PlanJsonCoversClusterWithFPlusOnePipelines) {
  const int f = 2, microbatches = 128;
  Result r =
      run("plan --profile examples/gpt3-6.7b-a100.json --cluster "
          "examples/cluster-16x8-a100.json --fault-tolerance 2 --microbatches 128 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json j = parse(r);
  const auto& pipelines = j["plan"]["pipelines"];
  ASSERT_GE(pipelines.size(), static_cast<size_t>(f + 1)) << j["plan"].dump();
  int mb = 0;
  size_t nodes = 0;
  for (const auto& p : pipelines) {
    EXPECT_GE(p["microbatches"].get<int>(), 1);
    mb += p["microbatches"].get<int>();
    nodes += p["nodes"].size();
  }
  EXPECT_EQ(mb, microbatches);
  EXPECT_EQ(nodes, 16u) << "every node of the 16-node cluster is used";
  EXPECT_GT(j["plan"]["samples_per_s"].get<double>(), 0.0);
}

TEST(Cli, PlanWithFailuresStillCoversSurvivors) {
  Result r =
      run("plan --profile examples/gpt3-6.7b-a100.json --cluster "
          "examples/cluster-16x8-a100.json --fault-tolerance 2 --microbatches 128 "
          "--fail 3,7");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("After failure"), std::string::npos) << r.out;
}

TEST(Cli, ImpossibleFaultToleranceIsOneClearError) {
  Result r =
      run("plan --profile examples/gpt3-6.7b-a100.json --nodes 2 --devices-per-node 8 "
          "--fault-tolerance 5 --microbatches 16");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

// Sharded stages: a profile of 8-sample microbatches lets stages span up to 8 devices; the JSON
// shows per stage its width, whether it is sharded and its memory, within the device memory and
// within --max-stage-devices. One device per stage does not fit this model in 40 GB.
TEST(Cli, PlanShardsStagesUpToMaxStageDevices) {
  const std::string profile = testing::TempDir() + "bw_cli_gpt3-6.7b-b8.json";
  Result synth =
      run("profile synth --model gpt3-6.7b --device a100 --microbatch-size 8 -o '" + profile + "'");
  ASSERT_EQ(synth.status, 0) << synth.out;
  const std::string plan = "plan --profile '" + profile +
                           "' --nodes 16 --devices-per-node 8 --memory-gb 40 --fault-tolerance 2 "
                           "--microbatches 128 --json";
  for (int k : {8, 4}) {
    Result r = run(plan + " --max-stage-devices " + std::to_string(k));
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = parse(r);
    int sharded = 0;
    for (const auto& p : j["plan"]["pipelines"])
      for (const auto& st : p["template"]["stages"]) {
        const int d = st["num_devices"].get<int>();
        EXPECT_LE(d, k) << st.dump();
        EXPECT_EQ(st["sharded"].get<bool>(), d >= 2) << st.dump();
        EXPECT_LE(st["memory_bytes"].get<double>(), 40e9) << st.dump();
        EXPECT_GE(st["shard_comm_ms"].get<double>(), 0.0) << st.dump();
        sharded += d >= 2;
      }
    EXPECT_GT(sharded, 0) << "k = " << k;
  }
  Result one = run(plan + " --max-stage-devices 1");
  EXPECT_EQ(one.status, 2) << one.out;
  EXPECT_NE(one.out.find("--max-stage-devices"), std::string::npos) << one.out;
  Result wide = run(plan + " --max-stage-devices 9");
  EXPECT_EQ(wide.status, 2) << wide.out;
  EXPECT_NE(wide.out.find("exceeds the 8 devices of a node"), std::string::npos) << wide.out;
}

// With one sample per microbatch no stage can be sharded; when nothing fits, the error says so
// and names the option that changes it.
TEST(Cli, PlanThatNeedsShardingNamesTheMicrobatchSize) {
  Result r =
      run("plan --profile examples/gpt3-6.7b-a100.json --nodes 16 --devices-per-node 8 "
          "--memory-gb 20 --fault-tolerance 2 --microbatches 128");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("microbatch size = 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--microbatch-size"), std::string::npos) << r.out;
}

TEST(Cli, MalformedProfileNamesTheFile) {
  Result r =
      run("plan --profile no/such/profile.json --nodes 2 --devices-per-node 1 "
          "--fault-tolerance 0 --microbatches 4");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("no/such/profile.json"), std::string::npos) << r.out;
}

TEST(Cli, ScheduleJsonHanayoBeatsOneFOneB) {
  auto bubble = [](const std::string& kind) {
    Result r = run("schedule --kind " + kind + " --waves 2 --devices 4 --microbatches 8 " +
                   "--forward-ms 1 --backward-ms 2 --json");
    EXPECT_EQ(r.status, 0) << r.out;
    return parse(r)["bubble_ratio"].get<double>();
  };
  double hanayo = bubble("hanayo"), one_f_one_b = bubble("1f1b");
  // Closed form for 1F1B: (P-1)/(B+P-1) = 3/11.
  EXPECT_NEAR(one_f_one_b, 3.0 / 11.0, 1e-9);
  EXPECT_LT(hanayo, one_f_one_b);
}

TEST(Cli, InvalidScheduleIsAConfigError) {
  Result r = run("schedule --kind hanayo --waves 0 --devices 4 --microbatches 8");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
}

TEST(Cli, SimulateRanksBreakwaterAboveRestart) {
  Result r =
      run("simulate --model gpt3-medium --nodes 16 --devices-per-node 8 --fault-tolerance 1 "
          "--microbatches 64 --failure-every 30m --hours 2 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json j = parse(r);
  std::map<std::string, nlohmann::json> by_policy;
  for (const auto& res : j["results"]) by_policy[res["policy"].get<std::string>()] = res;
  ASSERT_TRUE(by_policy.count("breakwater") && by_policy.count("restart")) << r.out.substr(0, 2000);
  for (auto& [name, res] : by_policy) {
    // Every millisecond of the run is accounted to exactly one cause.
    double total = 0;
    for (auto& [cause, ms] : res["time_ms"].items()) total += ms.get<double>();
    EXPECT_NEAR(total, res["duration_ms"].get<double>(), 1e-6 * total) << name;
    EXPECT_EQ(res["failures"].get<int>(), 3) << name << ": failures at 30, 60 and 90 minutes";
  }
  EXPECT_GT(by_policy["breakwater"]["samples"].get<double>(),
            by_policy["restart"]["samples"].get<double>());
}

}  // namespace
