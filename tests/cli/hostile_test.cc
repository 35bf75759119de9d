// The hostile-input suite (issue "Hardening"): every subcommand fed what a hostile or careless
// user gives it, one row per case: arguments, where stdout goes, the exit status and a phrase the
// output must contain. Classes: endless or special files (/dev/zero, FIFOs, directories), numbers
// without bound (counts that wrap, 1e30, a CSV cell that would size a table of billions), invalid
// values (NaN, Inf, negative, zero costs, rates, bandwidths, memory), contradicting options, write
// errors (/dev/full for every output, standard output included), unusable out_dirs and
// checkpoints. Each case runs as a child process with an address-space limit (RLIMIT_AS) and a
// deadline, so a regression that allocates without bound or blocks fails here instead of
// stalling CI. Exit status: 2 for bad input, never 0, never 1 (a bug), never a crash.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "../scratch.h"

namespace {
namespace fs = std::filesystem;

constexpr double kDeadlineS = 30;
constexpr rlim_t kAddressSpaceBytes = rlim_t{6} << 30;  // LibTorch maps ~1-2 GiB at start

std::string dir() {
  static const std::string d = [] {
    return bw::testing::process_scratch("bw_hostile").string();
  }();
  return d;
}

std::string file(const std::string& name, const std::string& text) {
  const std::string p = dir() + "/" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string fifo() {
  const std::string p = dir() + "/fifo";
  if (!fs::exists(p)) mkfifo(p.c_str(), 0600);
  return p;
}

// 1 M + 1 trace events (9 MB): over the event limit, well under the file-size limit.
std::string many_events() {
  std::string text;
  text.reserve(9'000'100);
  for (int i = 0; i <= 1'000'000; ++i) text += "0,add,n\n";
  return file("many_events.csv", text);
}

std::string profile_json(const std::string& layer_fields) {
  std::string layers;
  for (int i = 0; i < 4; ++i) {
    layers += fmt::format(
        "{}{{\"name\": \"l{}\", {}, \"activation_bytes\": 1000, \"output_bytes\": 100, "
        "\"param_bytes\": 1000000}}",
        i ? ", " : "", i, layer_fields);
  }
  return fmt::format("{{\"model\": \"m\", \"microbatch_size\": 1, \"layers\": [{}]}}", layers);
}

std::string good_profile() {
  return file("good_profile.json", profile_json("\"forward_ms\": 1, \"backward_ms\": 2"));
}

// A sidecar written under a global batch of 8 x 4 = 32 and data seed 42 (read at config load).
std::string sidecar_g32() {
  const std::string d = dir() + "/ckpt/checkpoint-000004";
  fs::create_directories(d);
  std::ofstream(d + "/checkpoint.json")
      << R"({"format": "breakwater-checkpoint", "version": 2, "step": 4, "next_sample": 128,
            "weights": "model.safetensors", "optimizer": "optimizer.safetensors",
            "config": "[pipeline]\nmicrobatches = 8\nmicrobatch_size = 4\n[data]\nseed = 42\n",
            "extra": {}, "files": {"model.safetensors": {"bytes": 1, "crc32c": "00000000"},
            "optimizer.safetensors": {"bytes": 1, "crc32c": "00000000"}}})";
  fs::create_directories(dir() + "/ckpt/checkpoint-000008.tmp");
  return d;
}

// An out_dir whose file `name` is a symbolic link to `target` (e.g. /dev/full): the run's write
// of that file fails the way a full disk or an unwritable file does.
std::string out_dir_with_link(const std::string& dir_name, const std::string& name,
                              const std::string& target) {
  const std::string d = dir() + "/" + dir_name;
  fs::create_directories(d);
  fs::remove_all(d + "/" + name);
  if (target.empty()) {
    fs::create_directories(d + "/" + name);  // a directory where the file goes
  } else {
    fs::create_symlink(target, d + "/" + name);
  }
  return d;
}

// An out_dir whose lock this test process holds (as a running train would): a run on it is
// refused after planning, before any worker starts.
std::string locked_out_dir() {
  static const std::string d = [] {
    const std::string path = dir() + "/locked_out";
    fs::create_directories(path);
    const int fd = open((path + "/.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    flock(fd, LOCK_EX);  // held until this process exits
    return path;
  }();
  return d;
}

struct Case {
  std::string name;
  std::vector<std::string> args;
  int status;          // expected exit status
  std::string phrase;  // must appear in stdout + stderr
  std::string stdout_to = "";  // "" = captured with stderr; else a path (e.g. /dev/full)
  std::string absent = "";     // must not appear (e.g. the plan, printed before a knowable error)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Result {
  int status = -1;
  bool timed_out = false;
  std::string output;
};

Result run(const Case& c) {
  const std::string log = dir() + "/" + c.name + ".log";
  std::vector<std::string> full = {BW_BINARY};
  full.insert(full.end(), c.args.begin(), c.args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  Result r;
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    rlimit as{kAddressSpaceBytes, kAddressSpaceBytes};
    setrlimit(RLIMIT_AS, &as);
    chdir(BW_SOURCE_DIR);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int out = c.stdout_to.empty() ? fd : open(c.stdout_to.c_str(), O_WRONLY);
    dup2(out, 1);
    dup2(fd, 2);
    execv(BW_BINARY, argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(kDeadlineS * 1000));
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

class Hostile : public ::testing::TestWithParam<Case> {};

TEST_P(Hostile, ExitsWithTheRightStatusAndOneClearMessage) {
  const Case& c = GetParam();
  const Result r = run(c);
  ASSERT_FALSE(r.timed_out) << c.name << " ran past " << kDeadlineS << " s (a hang or a blowup)";
  EXPECT_EQ(r.status, c.status) << c.name << ":\n" << r.output.substr(0, 3000);
  EXPECT_NE(r.output.find(c.phrase), std::string::npos)
      << c.name << ": expected '" << c.phrase << "' in:\n"
      << r.output.substr(0, 3000);
  if (c.status == 2 || c.status == 3) {
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  }
  if (!c.absent.empty()) {
    EXPECT_EQ(r.output.find(c.absent), std::string::npos)
        << c.name << ": '" << c.absent << "' must not appear in:\n"
        << r.output.substr(0, 3000);
  }
}

std::string cases_dir() { return dir(); }

std::vector<Case> schedule_cases() {
  const std::string s = "schedule";
  return {
      {"sched_forward_nan", {s, "--forward-ms", "nan"}, 2, "--forward-ms must be a number"},
      {"sched_forward_neg", {s, "--forward-ms", "-1"}, 2,
       "--forward-ms must be a finite number > 0"},
      {"sched_backward_inf", {s, "--backward-ms", "inf"}, 2, "--backward-ms must be a finite"},
      {"sched_forward_zero", {s, "--forward-ms", "0"}, 2, "--forward-ms"},
      {"sched_bandwidth_neg", {s, "--bandwidth-gbps", "-5"}, 2, "--bandwidth-gbps"},
      {"sched_latency_inf", {s, "--latency-ms", "inf"}, 2, "--latency-ms"},
      {"sched_activation_neg", {s, "--activation-bytes", "-1e9"}, 2, "--activation-bytes"},
      {"sched_devices_zero", {s, "--devices", "0"}, 2, "--devices must be in [1, 4096]"},
      {"sched_devices_wrap", {s, "--devices", "1431655766"}, 2, "--devices must be in"},
      {"sched_devices_overflow", {s, "--devices", "99999999999999"}, 2, "devices"},
      {"sched_microbatches_huge", {s, "--microbatches", "2000000000"}, 2, "--microbatches"},
      {"sched_too_many_actions",
       {s, "--kind", "hanayo", "--waves", "64", "--devices", "4096", "--microbatches", "4096"},
       2,
       "too large"},
      {"sched_csv_dev_zero", {s, "--from-csv", "/dev/zero"}, 2, "character device"},
      {"sched_csv_fifo", {s, "--from-csv", fifo()}, 2, "FIFO"},
      {"sched_csv_huge_cell",
       {s, "--from-csv", file("huge_cell.csv", "0F0,0B0,0F999999999\n")},
       2,
       "the limits are"},
      {"sched_csv_huge_product",
       {s, "--from-csv", file("huge_product.csv", "65000F0,0F999999,0B0\n")},
       2,
       "pairs, more than the limit"},
      {"sched_profile_huge_number",
       {s, "--profile", file("huge_number.json", profile_json("\"forward_ms\": 1e400, "
                                                              "\"backward_ms\": 1"))},
       2,
       "huge_number.json"},
      {"sched_profile_zero_costs",
       {s, "--profile", file("zero.json", profile_json("\"forward_ms\": 0, \"backward_ms\": 0"))},
       2,
       "positive times"},
      {"sched_profile_dev_zero", {s, "--profile", "/dev/zero"}, 2, "character device"},
      {"sched_svg_full", {s, "--svg", "/dev/full"}, 2, "No space left on device"},
      {"sched_trace_full", {s, "--trace", "/dev/full"}, 2, "No space left on device"},
      {"sched_csv_full", {s, "--csv", "/dev/full"}, 2, "No space left on device"},
      {"sched_svg_no_dir", {s, "--svg", "/no/such/dir/t.svg"}, 2, "No such file or directory"},
      {"sched_svg_is_dir", {s, "--svg", "/tmp"}, 2, "Is a directory"},
      {"sched_stdout_full", {s, "--json"}, 2, "cannot write", "/dev/full"},
      {"sched_unknown_flag", {s, "--no-such-flag"}, 2, "no-such-flag"},
      // Huge but legal: says its cost before it starts, then runs.
      {"sched_costly_says_so",
       {s, "--kind", "hanayo", "--waves", "8", "--devices", "32", "--microbatches", "1400"},
       0,
       "note: 2150400 compute actions"},
      {"sched_not_a_number", {s, "--devices", "four"}, 2, "four"},
  };
}

std::vector<Case> simulate_cases() {
  const std::vector<std::string> s = {"simulate", "--model", "gpt3-1.3b", "--nodes", "8",
                                      "--devices-per-node", "8", "--microbatches", "64",
                                      "--throughput", "analytic"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = s;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  return {
      {"sim_hours_huge", with({"--failure-every", "10m", "--hours", "1e30"}), 2, "--hours"},
      {"sim_hours_nan", with({"--failure-every", "10m", "--hours", "nan"}), 2, "--hours"},
      {"sim_hours_neg", with({"--failure-every", "10m", "--hours", "-1"}), 2, "--hours"},
      {"sim_too_many_failures", with({"--failure-every", "1ms", "--hours", "10000"}), 2,
       "more than the limit"},
      {"sim_rate_inf", with({"--failure-rate", "inf"}), 2, "--failure-rate"},
      {"sim_tflops_zero", with({"--failure-every", "10m", "--device-tflops", "0"}), 2,
       "--device-tflops"},
      {"sim_memory_neg", with({"--failure-every", "10m", "--device-memory-gb", "-80"}), 2,
       "--device-memory-gb"},
      {"sim_detection_nan", with({"--failure-every", "10m", "--detection-ms", "nan"}), 2,
       "--detection-ms must be a number"},
      {"sim_restart_neg", with({"--failure-every", "10m", "--restart-ms", "-5"}), 2,
       "--restart-ms"},
      {"sim_gbps_zero", with({"--failure-every", "10m", "--inter-node-gbps", "0"}), 2,
       "--inter-node-gbps"},
      {"sim_useful_share", with({"--failure-every", "10m", "--useful-share", "2"}), 2,
       "--useful-share"},
      {"sim_nodes_wrap", with({"--failure-every", "10m", "--nodes", "1431655766"}), 2, "--nodes"},
      {"sim_trace_dev_zero", with({"--trace", "/dev/zero"}), 2, "character device"},
      {"sim_trace_fifo", with({"--trace", fifo()}), 2, "FIFO"},
      {"sim_trace_dir", with({"--trace", "/tmp"}), 2, "directory"},
      {"sim_trace_too_many_events", with({"--trace", many_events()}), 2,
       "more than the limit of 1000000 events"},
      {"sim_svg_full", with({"--failure-every", "10m", "--hours", "1", "--svg", "/dev/full"}), 2,
       "No space left on device"},
      {"sim_stdout_full", with({"--failure-every", "10m", "--hours", "1", "--json"}), 2,
       "cannot write", "/dev/full"},
      // A list naming an item twice is refused, naming it (never merged).
      {"sim_policy_twice", with({"--failure-every", "10m", "--policy", "restart,breakwater,restart"}),
       2, "--policy names 'restart' twice"},
      {"sim_schedules_twice",
       with({"--failure-every", "10m", "--schedules", "1f1b,1f1b"}), 2,
       "--schedules names '1f1b' twice"},
      // A count of 0 that would read as "not given" is refused when given.
      {"sim_burst_size_zero", with({"--failure-every", "10m", "--burst-size", "0"}), 2,
       "--burst-size must be >= 1, got 0"},
      {"sim_step_ms_zero", with({"--failure-every", "10m", "--step-ms", "0"}), 2,
       "--step-ms must be a finite number > 0, got 0"},
  };
}

std::vector<Case> plan_cases() {
  const std::vector<std::string> p = {"plan", "--microbatches", "16", "--fault-tolerance", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = p;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string prof = good_profile();
  return {
      {"plan_profile_dev_zero", with({"--profile", "/dev/zero", "--nodes", "4"}), 2,
       "character device"},
      {"plan_profile_fifo", with({"--profile", fifo(), "--nodes", "4"}), 2, "FIFO"},
      {"plan_profile_huge_number",
       with({"--profile", cases_dir() + "/huge_number.json", "--nodes", "4"}), 2,
       "huge_number.json"},
      {"plan_profile_zero_costs", with({"--profile", cases_dir() + "/zero.json", "--nodes", "4"}),
       2, "positive times"},
      {"plan_memory_neg", with({"--profile", prof, "--nodes", "4", "--memory-gb", "-1"}), 2,
       "--memory-gb"},
      {"plan_gbps_nan", with({"--profile", prof, "--nodes", "4", "--inter-node-gbps", "nan"}), 2,
       "--inter-node-gbps"},
      {"plan_gbps_zero", with({"--profile", prof, "--nodes", "4", "--intra-node-gbps", "0"}), 2,
       "--intra-node-gbps"},
      {"plan_nodes_wrap", with({"--profile", prof, "--nodes", "1431655766"}), 2, "--nodes"},
      {"plan_microbatches_zero",
       {"plan", "--profile", prof, "--nodes", "4", "--microbatches", "0"}, 2, "--microbatches"},
      {"plan_cluster_huge_nodes",
       with({"--profile", prof, "--cluster",
             file("big_cluster.json",
                  R"({"nodes": 1e30, "devices_per_node": 8, "device_memory_gb": 80})")}),
       2, "out of range"},
      {"plan_cluster_inf_memory",
       with({"--profile", prof, "--cluster",
             file("inf_cluster.json",
                  R"({"nodes": 4, "devices_per_node": 8, "device_memory_gb": 1e400})")}),
       2, "inf_cluster.json"},
      {"plan_stdout_full", with({"--profile", prof, "--nodes", "4", "--json"}), 2, "cannot write",
       "/dev/full"},
      {"plan_fail_twice", with({"--profile", prof, "--nodes", "4", "--fail", "2,1,2"}), 2,
       "--fail names '2' twice"},
      {"plan_schedules_twice",
       with({"--profile", prof, "--nodes", "4", "--schedules", "hanayo-w1,1f1b,hanayo-w1"}), 2,
       "--schedules names 'hanayo-w1' twice"},
  };
}

std::vector<Case> profile_cases() {
  const std::vector<std::string> p = {"profile", "synth", "--model", "gpt3-xl"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = p;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  return {
      {"synth_mbs_zero", with({"--microbatch-size", "0"}), 2, "--microbatch-size"},
      {"synth_mbs_huge", with({"--microbatch-size", "2000000000"}), 2, "--microbatch-size"},
      {"synth_mbs_nan", with({"--microbatch-size", "nan"}), 2, "microbatch-size"},
      {"synth_output_full", with({"--output", "/dev/full"}), 2, "No space left on device"},
      {"synth_output_no_dir", with({"--output", "/no/such/dir/p.json"}), 2, "No such file"},
      {"synth_stdout_full", with({}), 2, "cannot write", "/dev/full"},
  };
}

std::vector<Case> measure_cases() {
#ifdef BW_WITH_TORCH
  const std::vector<std::string> m = {"profile",   "measure", "--model",  "tiny",
                                      "--repeats", "1",       "--warmup", "0"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = m;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  return {
      {"measure_model_unknown",
       {"profile", "measure", "--model", "nosuch"},
       2,
       "unknown model 'nosuch'"},
      {"measure_mbs_zero", with({"--microbatch-size", "0"}), 2, "--microbatch-size"},
      {"measure_mbs_huge", with({"--microbatch-size", "2000000000"}), 2, "--microbatch-size"},
      {"measure_seq_len_neg", with({"--seq-len", "-1"}), 2, "--seq-len"},
      {"measure_vocab_one", with({"--vocab-size", "1"}), 2, "--vocab-size"},
      {"measure_repeats_huge", with({"--repeats", "1000000000"}), 2, "--repeats"},
      {"measure_threads_nan", with({"--threads", "nan"}), 2, "threads"},
      {"measure_output_full", with({"--output", "/dev/full"}), 2, "No space left on device"},
      {"measure_output_no_dir", with({"--output", "/no/such/dir/p.json"}), 2,
       "No such file or directory"},
      {"measure_stdout_full", with({"--json", "--output", dir() + "/m.json"}), 2, "cannot write",
       "/dev/full"},
      // Huge but legal: says its cost before it starts, and finds the unusable output before it
      // measures for hours.
      {"measure_costly_says_so",
       {"profile", "measure", "--model", "gpt2-124m", "--microbatch-size", "4096", "--seq-len",
        "65536", "--output", "/no/such/dir/p.json"},
       2,
       "note: measuring gpt2-124m at microbatch 4096"},
  };
#else
  return {};
#endif
}

std::vector<Case> train_cases() {
#ifdef BW_WITH_TORCH
  const std::string corpus = file("corpus.txt", std::string(20000, 'a'));
  const std::vector<std::string> t = {"train", "--quiet", "--model.name=tiny",
                                      "--data.path=" + corpus, "--train.steps=1"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = t;
    a.push_back("--train.out_dir=" + cases_dir() + "/train_out");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string ckpt = sidecar_g32();
  return {
      {"train_world_wraps", with({"--cluster.nodes=1431655766", "--cluster.devices_per_node=3"}), 2,
       "cluster.nodes"},
      {"train_world_limit", with({"--cluster.nodes=1000", "--cluster.devices_per_node=64"}), 2,
       "more than the limit of 1024"},
      {"train_number_huge", with({"--train.lr=1e400"}), 2, "train.lr"},
      {"train_int_huge", with({"--train.steps=1e30"}), 2, "train.steps"},
      {"train_microbatches_huge", with({"--pipeline.microbatches=2000000000"}), 2,
       "pipeline.microbatches"},
      {"train_fault_tolerance_vs_nodes", with({"--pipeline.fault_tolerance=9"}), 2,
       "raise cluster.nodes"},
      {"train_fault_tolerance_vs_pipelines", with({"--pipeline.pipelines=[4]"}), 2,
       "--pipeline.fault_tolerance=0"},
      {"train_tiny_step_timeout", with({"--elastic.step_timeout_s=0.001"}), 2,
       "elastic.step_timeout_s"},
      {"train_config_dev_zero", {"train", "/dev/zero"}, 2, "character device"},
      {"train_config_fifo", {"train", fifo()}, 2, "FIFO"},
      {"train_config_huge",
       {"train", file("huge.toml", std::string(2 << 20, '#'))},
       2,
       "more than the limit"},
      {"train_data_fifo",
       {"train", "--quiet", "--model.name=tiny", "--data.path=" + fifo()},
       2,
       "not a regular file"},
      {"train_data_dev_zero",
       {"train", "--quiet", "--model.name=tiny", "--data.path=/dev/zero"},
       2,
       "not a regular file"},
      {"train_out_dir_is_file", with({"--train.out_dir=" + corpus}), 2, "not a directory"},
      {"train_out_dir_under_file", with({"--train.out_dir=/dev/null/run"}), 2, "not a directory"},
      {"train_resume_partial",
       with({"--train.resume=" + cases_dir() + "/ckpt/checkpoint-000008.tmp"}), 2,
       "partial checkpoint"},
      {"train_resume_missing", with({"--train.resume=" + cases_dir() + "/no_such_ckpt"}), 2,
       "no checkpoint"},
      {"train_resume_other_batch",
       with({"--train.resume=" + ckpt, "--train.steps=10", "--pipeline.microbatches=8",
             "--pipeline.microbatch_size=2"}),
       2, "--pipeline.microbatches=8 --pipeline.microbatch_size=4"},
      {"train_resume_other_seed",
       with({"--train.resume=" + ckpt, "--train.steps=10", "--pipeline.microbatches=8",
             "--pipeline.microbatch_size=4", "--data.seed=1"}),
       2, "--data.seed=42"},
      // Outputs of a run: the resolved config and metrics.jsonl are checked writes.
      {"train_config_toml_full",
       with({"--devices=1",
             "--train.out_dir=" + out_dir_with_link("config_full", "config.toml", "/dev/full")}),
       2, "cannot write resolved config"},
      {"train_metrics_full",
       with({"--train.out_dir=" + out_dir_with_link("metrics_full", "metrics.jsonl", "/dev/full")}),
       2, "cannot write metrics file"},
      {"train_metrics_full_one_process",
       with({"--devices=1", "--train.out_dir=" +
                                out_dir_with_link("metrics_full1", "metrics.jsonl", "/dev/full")}),
       2, "No space left on device"},
      {"train_metrics_is_dir",
       with({"--devices=1",
             "--train.out_dir=" + out_dir_with_link("metrics_dir", "metrics.jsonl", "")}),
       2, "Is a directory"},
      // Divergence options.
      {"train_nonfinite_unknown", with({"--train.nonfinite=ignore"}), 2,
       "train.nonfinite must be \"stop\" or \"skip\""},
      {"train_recompute_unknown", with({"--pipeline.recompute=selective"}), 2,
       "pipeline.recompute must be \"none\" or \"full\""},
      {"train_precision_unknown", with({"--train.precision=fp16"}), 2,
       "train.precision must be \"auto\", \"fp32\" or \"bf16\""},
      {"train_spin_wait_negative", with({"--train.spin_wait_us=-2"}), 2, "train.spin_wait_us"},
      {"train_skip_limit_zero", with({"--train.skip_limit=0"}), 2, "train.skip_limit"},
      {"train_skip_limit_huge", with({"--train.skip_limit=2000000000"}), 2, "train.skip_limit"},
      {"train_inject_nan_phase", with({"--elastic.inject=nan:node=0:step=1:phase=forward"}), 2,
       "its phase is grad_sync"},
      {"train_inject_startup_nan", with({"--elastic.inject=nan:node=0:step=0:phase=startup"}), 2,
       "its phase is grad_sync"},
      {"train_inject_startup_agent", with({"--elastic.inject=agent:node=0:step=0:phase=startup"}),
       2, "takes kill or hang"},
      {"train_inject_agent_startup_agent",
       with({"--elastic.inject=agent:node=0:step=0:phase=agent_startup"}), 2,
       "phase agent_startup (before the agent's first heartbeat) takes kill or hang"},
      {"train_inject_agent_startup_node",
       with({"--elastic.inject=hang:node=99:step=0:phase=agent_startup"}), 2,
       "elastic.inject names node 99"},
      {"train_inject_kill_one_process",
       with({"--devices=1", "--elastic.inject=kill:node=0:step=0"}), 2, "takes only nan"},
      {"train_diverged_stop_one_process",
       with({"--devices=1", "--train.steps=4", "--elastic.inject=nan:node=0:step=2"}), 2,
       "training diverged at step 2"},
      {"train_diverged_skip_limit_one_process",
       with({"--devices=1", "--train.steps=4", "--train.nonfinite=skip", "--train.skip_limit=1",
             "--elastic.inject=nan:node=0:step=1,nan:node=0:step=2"}),
       2, "after 1 skipped steps in a row"},
      // Invalid values and contradictions of train's own.
      {"train_lr_nan", with({"--train.lr=nan"}), 2, "train.lr must be > 0"},
      {"train_memory_neg", with({"--cluster.memory_gb=-1"}), 2, "cluster.memory_gb"},
      {"train_memory_tiny", with({"--cluster.memory_gb=1e-9"}), 2, "raise cluster.memory_gb"},
      {"train_heartbeat_inf", with({"--elastic.heartbeat_timeout_s=inf"}), 2,
       "elastic.heartbeat_timeout_s"},
      {"train_one_device_with_pipelines", with({"--devices=1", "--pipeline.pipelines=[2,2]"}), 2,
       "drop one of the two"},
      {"train_devices_vs_pipelines", with({"--devices=3", "--pipeline.pipelines=[2,2]"}), 2,
       "make them agree"},
      {"train_inject_unknown_action", with({"--elastic.inject=boom:node=0:step=0"}), 2,
       "unknown action 'boom'"},
      {"train_inject_no_such_node", with({"--elastic.inject=kill:node=9:step=0"}), 2,
       "name a node, device and step of this run"},
      {"train_inject_past_the_end", with({"--elastic.inject=kill:node=1:step=5"}), 2, "steps 0..0"},
      {"train_inject_slow_factor_zero", with({"--elastic.inject=slow:node=1:factor=0"}), 2,
       "factor must be a number >= 1"},
      {"train_inject_slow_factor_negative", with({"--elastic.inject=slow:node=1:factor=-3"}), 2,
       "factor must be a number >= 1"},
      {"train_inject_slow_no_such_node", with({"--elastic.inject=slow:node=9:factor=2"}), 2,
       "name a node, device and step of this run"},
      {"train_inject_kill_coordinator_embedded",
       with({"--elastic.inject=kill_coordinator:step=0"}), 2, "elastic.control = \"etcd\""},
      {"train_inject_kill_coordinator_with_a_node",
       with({"--elastic.inject=kill_coordinator:node=0:step=0"}), 2, "kill_coordinator takes step="},
      {"train_standbys_without_etcd", with({"--elastic.standbys=1"}), 2,
       "elastic.standbys = 1 needs a control store"},
      {"train_control_not_a_store", with({"--elastic.control=zookeeper"}), 2, "elastic.control"},
      {"train_control_with_devices",
       with({"--elastic.control=etcd://127.0.0.1:1", "--devices", "1"}), 2,
       "drop --devices"},
      {"train_slow_threshold_one", with({"--elastic.slow_threshold=1"}), 2,
       "elastic.slow_threshold"},
      {"train_slow_window_zero", with({"--elastic.slow_window=0"}), 2, "elastic.slow_window"},
      {"train_rebalance_gain_zero", with({"--elastic.rebalance_gain=0"}), 2,
       "elastic.rebalance_gain"},
      {"train_rebalance_gain_nan", with({"--elastic.rebalance_gain=nan"}), 2,
       "elastic.rebalance_gain"},
      {"train_trace_steps_past_the_run", with({"--train.trace_steps=1-99999"}), 2,
       "train.trace_steps"},
      {"train_trace_steps_reversed", with({"--train.trace_steps=5-3"}), 2, "ends before it begins"},
      {"train_trace_steps_twice", with({"--train.trace_steps=0,0"}), 2, "names step 0 twice"},
      {"train_trace_steps_not_a_step", with({"--train.trace_steps=x"}), 2, "not a step number"},
      // Huge but legal: says its cost before it starts (here it then diverges at its first
      // step, injected).
      {"train_costly_says_so",
       with({"--devices=1", "--train.steps=2000000000", "--elastic.inject=nan:node=0:step=0"}), 2,
       "note: this run needs at least"},
      // A count of 0 is refused, not read as "not given".
      {"train_devices_zero", with({"--devices=0"}), 2, "--devices must be >= 1, got 0"},
      // Errors knowable before the start come before the config and the plan are printed.
      {"train_data_missing_first",
       {"train", "--model.name=tiny", "--data.path=" + cases_dir() + "/no_such_corpus.txt",
        "--train.steps=1", "--train.out_dir=" + cases_dir() + "/train_out"},
       2, "no_such_corpus.txt", "", "plan (generation"},
      {"train_out_dir_locked_first",
       {"train", "--model.name=tiny", "--data.path=" + corpus, "--train.steps=1",
        "--train.out_dir=" + locked_out_dir()},
       2, "in use by another run", "", "plan (generation"},
      {"train_config_toml_full_first",
       {"train", "--model.name=tiny", "--data.path=" + corpus, "--train.steps=1", "--devices=1",
        "--train.out_dir=" + out_dir_with_link("config_full2", "config.toml", "/dev/full")},
       2, "cannot write resolved config", "", "plan (generation"},
      {"train_inject_no_such_node_first",
       {"train", "--model.name=tiny", "--data.path=" + corpus, "--train.steps=1",
        "--train.out_dir=" + cases_dir() + "/train_out", "--elastic.inject=kill:node=9:step=0"},
       2, "name a node, device and step of this run", "", "config:"},
      {"train_resume_past_end",
       with({"--train.resume=" + ckpt, "--train.steps=4", "--pipeline.microbatches=8",
             "--pipeline.microbatch_size=4"}),
       2, "raise train.steps"},
  };
#else
  return {};
#endif
}

// Multi-host commands (docs/multihost.md): addresses, tokens, node counts.
std::vector<Case> multihost_cases() {
#ifdef BW_WITH_TORCH
  const std::string corpus = file("corpus.txt", std::string(20000, 'a'));
  auto coordinator = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {
        "coordinator",       "--quiet",
        "--model.name=tiny", "--data.path=" + corpus,
        "--train.steps=1",   "--train.out_dir=" + cases_dir() + "/coordinator_out",
        "--wait-s",          "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string token = "--elastic.run_token=hostile";
  return {
      {"coord_no_listen", {"coordinator"}, 2, "--listen is required"},
      {"coord_no_token", coordinator({"--listen", "127.0.0.1:0"}), 2, "needs a run token"},
      {"coord_listen_no_port", coordinator({"--listen", "127.0.0.1", token}), 2,
       "is not ADDRESS:PORT"},
      {"coord_listen_bad_port", coordinator({"--listen", "127.0.0.1:70000", token}), 2,
       "a port in 0-65535"},
      {"coord_listen_unknown_host", coordinator({"--listen", "no-such-host.invalid:0", token}), 2,
       "cannot resolve 'no-such-host.invalid'"},
      {"coord_listen_foreign_address", coordinator({"--listen", "192.0.2.1:0", token}), 2,
       "cannot host the store on 192.0.2.1"},
      {"coord_expect_zero", coordinator({"--listen", "127.0.0.1:0", token, "--expect-nodes", "0"}),
       2, "--expect-nodes must be >= 1"},
      {"coord_one_device", coordinator({"--listen", "127.0.0.1:0", token, "--expect-nodes", "1"}),
       2, "needs at least 2 devices"},
      {"coord_expect_names_twice",
       coordinator({"--listen", "127.0.0.1:0", token, "--expect-names", "a,b,a"}), 2,
       "--expect-names names 'a' twice"},
      {"coord_agents_missing",
       coordinator(
           {"--listen", "127.0.0.1:0", token, "--expect-nodes", "2", "--expect-names", "a,b"}),
       3, "missing 2: a, b"},
      {"agent_no_coordinator", {"agent"}, 2, "give --coordinator ADDR:PORT"},
      {"agent_coordinator_malformed",
       {"agent", "--coordinator", "10.0.0.1"},
       2,
       "is not ADDRESS:PORT"},
      {"agent_coordinator_port_zero",
       {"agent", "--coordinator", "10.0.0.1:0"},
       2,
       "needs the coordinator's port"},
      {"agent_devices_zero",
       {"agent", "--coordinator", "127.0.0.1:1", "--devices", "0", "--wait-s", "1"},
       2,
       "--devices must be >= 1, got 0"},
      {"agent_unreachable",
       {"agent", "--coordinator", "127.0.0.1:1", "--wait-s", "1"},
       3,
       "could not be reached for 1 s"},
  };
#else
  return {};
#endif
}

#ifdef BW_WITH_TORCH
// A process started in its own process group, output to `log`; the test waits for or kills it.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> full = {BW_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    setenv("BW_RUN_TOKEN", "hostile-lost-peer", 1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(BW_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `done` every 20 ms until it holds or `seconds` pass.
bool wait_for(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// The exit status of `pid`, or -1 (then it is killed) when it runs past `seconds`.
int wait_status(pid_t pid, double seconds) {
  int status = 0;
  if (!wait_for([&] { return waitpid(pid, &status, WNOHANG) == pid; }, seconds)) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// An agent whose coordinator dies mid-run has lost a peer: exit 3, and the message names the
// coordinator it lost (never "internal error", exit 1). Two agents on this host (loopback), a
// tiny model; the coordinator is killed (SIGKILL) once the first step is in metrics.jsonl.
TEST(LostPeer, AnAgentWhoseCoordinatorDiesExits3NamingIt) {
  const std::string corpus = file("corpus.txt", std::string(20000, 'a'));
  const std::string out = dir() + "/lost_peer_out";
  const std::string clog = dir() + "/lost_peer_coordinator.log";
  const pid_t coordinator = spawn(
      {"coordinator", "--listen", "127.0.0.1:0", "--wait-s", "30", "--log-level=info",
       "--model.name=tiny", "--data.path=" + corpus, "--train.steps=100000",
       "--train.sample_tokens=0", "--cluster.nodes=2", "--pipeline.fault_tolerance=0",
       "--elastic.heartbeat_timeout_s=2", "--train.out_dir=" + out},
      clog);
  std::string port;
  ASSERT_TRUE(wait_for(
      [&] {
        const auto text = read_text(clog);
        const auto at = text.find("listening on 127.0.0.1:");
        if (at == std::string::npos) return false;
        const auto begin = at + std::string("listening on 127.0.0.1:").size();
        port = text.substr(begin, text.find_first_not_of("0123456789", begin) - begin);
        return !port.empty();
      },
      kDeadlineS))
      << read_text(clog);
  const std::string where = "127.0.0.1:" + port;
  std::vector<pid_t> agents;
  for (const char* name : {"lost-a", "lost-b"}) {
    agents.push_back(spawn({"agent", "--coordinator", where, "--node-name", name, "--wait-s", "2"},
                           dir() + "/lost_peer_" + name + ".log"));
  }
  const bool stepped = wait_for([&] { return !read_text(out + "/metrics.jsonl").empty(); },
                                2 * kDeadlineS);
  kill(-coordinator, SIGKILL);
  waitpid(coordinator, nullptr, 0);
  ASSERT_TRUE(stepped) << read_text(clog);
  for (const char* name : {"lost-a", "lost-b"}) {
    const pid_t agent = agents.front();
    agents.erase(agents.begin());
    const int status = wait_status(agent, kDeadlineS);
    const std::string log = read_text(dir() + "/lost_peer_" + std::string(name) + ".log");
    EXPECT_EQ(status, 3) << name << ":\n" << log;
    EXPECT_NE(log.find(where), std::string::npos) << name << " does not name " << where << ":\n"
                                                  << log;
    EXPECT_EQ(log.find("internal error"), std::string::npos) << name << ":\n" << log;
  }
}
#endif

// A minimal byte-level BPE tokenizer.json: enough for `data prepare` to start.
std::string tiny_tokenizer(const std::string& model_type = "BPE") {
  return file("tok_" + model_type + ".json",
              R"({"version": "1.0", "model": {"type": ")" + model_type +
                  R"(", "vocab": {"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3},
                 "merges": [["a", "b"]]},
                 "added_tokens": [{"id": 3, "content": "<|endoftext|>", "special": true}],
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
                 "decoder": {"type": "ByteLevel"}})");
}

std::vector<Case> data_cases() {
  const std::string tok = tiny_tokenizer();
  const std::string in = file("docs.jsonl", "{\"text\": \"ab ab\"}\n{\"text\": \"ba\"}\n");
  const auto prepare = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> a = {"data", "prepare", "--tokenizer", tok, "--out", dir() + "/" + out};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  return {
      {"data_input_fifo", prepare({fifo()}, "d1"), 2, "is a FIFO"},
      {"data_input_dev_zero", prepare({"/dev/zero"}, "d2"), 2, "is a character device"},
      {"data_input_directory_empty", prepare({out_dir_with_link("empty_in", "x.md", "")}, "d3"), 2,
       "has no .txt or .jsonl files"},
      {"data_tokenizer_dev_zero",
       {"data", "prepare", "--tokenizer", "/dev/zero", "--out", dir() + "/d4", in}, 2,
       "is a character device"},
      {"data_tokenizer_fifo",
       {"data", "prepare", "--tokenizer", fifo(), "--out", dir() + "/d5", in}, 2, "is a FIFO"},
      {"data_tokenizer_unsupported",
       {"data", "prepare", "--tokenizer", tiny_tokenizer("WordPiece"), "--out", dir() + "/d6", in},
       2, "the model WordPiece is not supported"},
      {"data_out_dev_full",
       {"data", "prepare", "--tokenizer", tok, "--out", "/dev/full", in}, 2, "is not a folder"},
      {"data_shard_tokens_wrap", prepare({"--shard-tokens", "99999999999", in}, "d7"), 2,
       "--shard-tokens must be in [1, 2147483647]"},
      {"data_threads_huge", prepare({"--threads", "100000", in}, "d8"), 2,
       "--threads must be in [1, 1024]"},
      {"data_val_fraction_inf", prepare({"--val-fraction", "inf", in}, "d9"), 2,
       "--val-fraction must be in (0, 1)"},
      {"data_both_val_options", prepare({"--val-docs", "1", "--val-fraction", "0.5", in}, "d10"),
       2, "not both"},
      {"data_stdout_full", prepare({in}, "d11"), 2, "cannot write", "/dev/full"},
      {"data_input_twice", prepare({in, in}, "d12"), 2, "the input list names '" + in + "' twice"},
  };
}

// `trace compare`: special files, JSON that is not a trace, a trace of another schedule, numbers
// of the wrong type, a full standard output.
std::vector<Case> trace_cases() {
  const std::string sim =
      file("trace_sim.json",
           R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "name": "0F0", "cat": "F", "ts": 0,
          "dur": 1000}, {"ph": "X", "pid": 0, "tid": 0, "name": "0B0", "cat": "B", "ts": 1000,
          "dur": 2000}], "otherData": {"makespan_ms": 3, "devices": 1}})");
  const std::string real =
      file("trace_real.json",
           R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "name": "0F0", "cat": "F", "ts": 0,
          "dur": 1500, "args": {"step": 0}}, {"ph": "X", "pid": 0, "tid": 0, "name": "0B0",
          "cat": "B", "ts": 1500, "dur": 2500, "args": {"step": 0}}]})");
  const std::string other =
      file("trace_other.json",
           R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "name": "0F1", "cat": "F", "ts": 0,
          "dur": 1500, "args": {"step": 0}}]})");
  const std::string bad_dur =
      file("trace_bad_dur.json",
           R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "name": "0F0", "cat": "F", "ts": 0,
          "dur": -5, "args": {"step": 0}}]})");
  const std::string t = "trace", c = "compare";
  return {
      {"trace_ok", {t, c, real, sim}, 0, "largest gaps", "", "error"},
      {"trace_real_dev_zero", {t, c, "/dev/zero", sim}, 2, "character device"},
      {"trace_sim_fifo", {t, c, real, fifo()}, 2, "FIFO"},
      {"trace_real_dir", {t, c, "/tmp", sim}, 2, "directory"},
      {"trace_not_json",
       {t, c, file("trace_not_json.json", "{\"traceEvents\": ["), sim},
       2,
       "is not valid JSON"},
      {"trace_not_a_trace",
       {t, c, file("trace_list.json", "[1, 2]"), sim},
       2,
       "not a Chrome trace"},
      {"trace_sim_not_simulated", {t, c, real, real}, 2, "not a simulated trace"},
      {"trace_other_schedule", {t, c, other, sim}, 2, "device 0 ran 0F1"},
      {"trace_negative_dur", {t, c, bad_dur, sim}, 2, "field 'dur' must be >= 0"},
      {"trace_top_negative", {t, c, real, sim, "--top", "-1"}, 2, "--top must be in"},
      {"trace_stdout_full", {t, c, real, sim, "--json"}, 2, "cannot write", "/dev/full"},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part : {schedule_cases(), simulate_cases(), plan_cases(), profile_cases(), data_cases(),
                    trace_cases(), measure_cases(), train_cases(), multihost_cases()}) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(AllSubcommands, Hostile, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// The limit and the deadline themselves work: a run within them succeeds (so a failure above is
// the input's fault, not the harness's).
TEST(HostileHarness, ValidRunsPassUnderTheSameLimits) {
  for (const Case& c : std::vector<Case>{
           {"ok_schedule", {"schedule", "--kind", "hanayo", "--waves", "2", "--devices", "4",
                            "--microbatches", "8", "--svg", dir() + "/ok.svg"}, 0, "makespan"},
           {"ok_simulate", {"simulate", "--model", "gpt3-1.3b", "--nodes", "8",
                            "--throughput", "analytic", "--failure-every", "10m", "--hours", "1"},
            0, "breakwater"},
           {"ok_synth", {"profile", "synth", "--model", "gpt3-xl", "--output",
                         dir() + "/p.json"}, 0, "wrote"}}) {
    const Result r = run(c);
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_EQ(r.status, 0) << c.name << ":\n" << r.output;
    EXPECT_NE(r.output.find(c.phrase), std::string::npos) << c.name << ":\n" << r.output;
  }
}

}  // namespace
