// The coordinator's commit of a sharded checkpoint, in real runs (docs/checkpoints.md "Crash
// safety"). Oracle: the same run without interruption.
//
// 1. `breakwater train` (the coordinator) SIGKILLs itself while committing checkpoint K
//    (BW_KILL_AT_COMMIT, checkpointing.cc): before anything is written, during the manifest's
//    write (its temporary file fsynced, not renamed) and after the publication. Its agents and
//    workers are all gone within a deadline (none is left behind); the newest committed
//    checkpoint is K-1, K-1 and K; every committed checkpoint loads, verified (no manifest names
//    a missing or damaged shard); and the run resumed from the newest in the same out_dir ends
//    bitwise where the uninterrupted run ends.
// 2. A checkpoint's bytes never pass through the control store in a local run: the loopback
//    traffic of a run inside a private network namespace grows by a few hundred bytes per
//    checkpoint and shard when it checkpoints every step, while the store path of a multi-host
//    run without checkpoint.dir (coordinator and agent on loopback) grows by more than the
//    checkpoint's size, which shows that the measurement sees checkpoint bytes.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_runs.h"
#include "cli_runner.h"
#include "core/error.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;
using bw::testing::expect_bitwise_equal;
using bw::testing::run_cli;
using bw::testing::ScopedEnv;

constexpr double kDeadlineS = 90.0;
// The coordinator's agents and workers die with it (PR_SET_PDEATHSIG, or exit 3 on the lost
// store): well within this.
constexpr double kOrphanDeadlineS = 20.0;

std::string work_dir() {
  static const std::string dir = bw::testing::scratch_dir(
      (fs::path(::testing::TempDir()) / fmt::format("bw_commit_fault_{}", getpid())).string());
  return dir;
}

std::string corpus() {
  static const std::string path = bw::testing::write_word_corpus(
      (fs::path(work_dir()) / "corpus.txt").string(),
      {"commit", "manifest", "shard", "kill", "the", "a", "of", "rename"});
  return path;
}

// Three stages of the tiny model, one worker each: three shards of 100 to 260 KB.
const std::vector<std::string> kPlan = {"--devices=3", "--pipeline.pipelines=[3]",
                                        "--pipeline.schedule=1f1b", "--pipeline.fault_tolerance=0"};

std::vector<std::string> train_args(const std::string& out_dir, int steps,
                                    const std::vector<std::string>& extra) {
  return bw::testing::tiny_train_args(corpus(), out_dir, steps, extra);
}

struct TrainRun {
  int status = -1;
  std::string out_dir, log;
};

TrainRun train(const std::string& name, int steps, std::vector<std::string> extra) {
  TrainRun run;
  run.out_dir = (fs::path(work_dir()) / name).string();
  auto args = train_args(run.out_dir, steps, extra);
  args.insert(args.begin(), "train");
  auto r = run_cli(args, run.out_dir + ".log", kDeadlineS);
  run.status = r.timed_out ? -1 : r.status;
  run.log = r.output;
  return run;
}

// While it lives this process is a child subreaper: the descendants of a child that dies (the
// coordinator's agents and workers) are reparented here rather than to init, so they can be
// found and reaped.
struct Subreaper {
  Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
};

// The live processes whose parent is this process, with their command lines.
std::map<pid_t, std::string> children() {
  std::map<pid_t, std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    std::istringstream fields(line.substr(line.rfind(')') + 1));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != getpid() || state == 'Z') continue;
    std::string cmdline = bw::testing::read_text((e.path() / "cmdline").string());
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    out[std::stoi(name)] = cmdline;
  }
  return out;
}

// Under a Subreaper, once the coordinator has died: reaps its descendants as they exit, until
// none is left or the deadline passes. Returns those still alive then (and kills them, so a
// failing test leaves nothing behind), and the exit statuses of the others in `statuses`.
std::map<pid_t, std::string> reap_descendants(double deadline_s, std::vector<int>* statuses) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(deadline_s * 1000));
  while (true) {
    int status = 0;
    for (pid_t p; (p = waitpid(-1, &status, WNOHANG)) > 0;) {
      statuses->push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    auto alive = children();
    if (alive.empty()) return alive;
    if (std::chrono::steady_clock::now() > deadline) {
      // Killing a child may hand its own children over to this process: repeat, for a while.
      for (int round = 0; round < 250 && !children().empty(); ++round) {
        for (const auto& [pid, cmd] : children()) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        while (waitpid(-1, &status, WNOHANG) > 0) {
        }
      }
      return alive;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

struct KillCase {
  std::string phase;  // BW_KILL_AT_COMMIT's
  int newest;         // the newest committed checkpoint the kill leaves
};

void PrintTo(const KillCase& c, std::ostream* os) { *os << c.phase; }

class CoordinatorKilledAtCommit : public ::testing::TestWithParam<KillCase> {};

constexpr int kSteps = 4;
constexpr int kKillAt = 2;

TEST_P(CoordinatorKilledAtCommit, LeavesTheOldOrNewCheckpointAndResumesBitwise) {
  const auto& c = GetParam();
  auto plan = kPlan;
  plan.push_back("--train.checkpoint_every=1");
  TrainRun killed;
  std::map<pid_t, std::string> left;
  std::vector<int> statuses;
  {
    ScopedEnv kill("BW_KILL_AT_COMMIT", fmt::format("{}:{}", c.phase, kKillAt));
    Subreaper subreaper;
    killed = train(c.phase, kSteps, plan);
    left = reap_descendants(kOrphanDeadlineS, &statuses);
  }
  ASSERT_EQ(killed.status, 128 + SIGKILL) << "the coordinator was not killed\n" << killed.log;
  for (const auto& [pid, cmd] : left) {
    ADD_FAILURE() << "process " << pid << " outlived its coordinator by " << kOrphanDeadlineS
                  << " s: " << cmd;
  }
  EXPECT_FALSE(statuses.empty()) << "no agent or worker was reparented here: the check saw nothing";

  // Where the kill landed (the hook does what it says).
  const fs::path dir = checkpoint_dir(killed.out_dir, kKillAt), staging = staging_dir(dir);
  if (c.phase == "after") {
    EXPECT_TRUE(fs::exists(dir / "checkpoint.json"));
  } else {
    EXPECT_FALSE(fs::exists(dir));
    EXPECT_TRUE(fs::exists(staging / "shard-0.model.safetensors")) << "no shards were staged";
    EXPECT_EQ(fs::exists(staging / "checkpoint.json.tmp"), c.phase == "during");
    EXPECT_FALSE(fs::exists(staging / "checkpoint.json"));
  }

  // (a) The newest committed checkpoint is the old one or the new one, and every committed
  // checkpoint loads with each shard verified against the manifest.
  int newest = -1;
  latest_checkpoint(killed.out_dir, &newest);
  EXPECT_EQ(newest, c.newest) << killed.log;
  for (const auto& e : fs::directory_iterator(killed.out_dir)) {
    // Published checkpoint-NNNNNN directories (.tmp and .old ones are never loaded).
    const auto name = e.path().filename().string();
    if (name.find('.') != std::string::npos || !fs::exists(e.path() / "checkpoint.json")) continue;
    try {
      const auto loaded = load_checkpoint(e.path().string());
      EXPECT_FALSE(loaded.info.shards.empty()) << e.path();
    } catch (const ConfigError& err) {
      ADD_FAILURE() << "a committed checkpoint does not load: " << err.what();
    }
  }
  ASSERT_EQ(newest, c.newest);

  // (b) Restarted in the same out_dir from the newest committed checkpoint, the run ends where
  // the uninterrupted run ends, bitwise.
  const auto full = train(c.phase + "_uninterrupted", kSteps, plan);
  ASSERT_EQ(full.status, 0) << full.log;
  auto resume = plan;
  resume.push_back("--train.resume=" + checkpoint_dir(killed.out_dir, newest));
  const auto resumed = train(c.phase, kSteps, resume);
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  expect_bitwise_equal(checkpoint_dir(resumed.out_dir, kSteps),
                       checkpoint_dir(full.out_dir, kSteps));
  EXPECT_FALSE(fs::exists(staging)) << "the restarted run left the killed run's staging";
}

INSTANTIATE_TEST_SUITE_P(Phases, CoordinatorKilledAtCommit,
                         ::testing::Values(KillCase{"before", kKillAt - 1},
                                           KillCase{"during", kKillAt - 1},
                                           KillCase{"after", kKillAt}),
                         [](const auto& info) { return info.param.phase; });

TEST(KillAtCommitHook, AMalformedValueIsAConfigErrorNamingTheVariable) {
  ScopedEnv kill("BW_KILL_AT_COMMIT", "during-2");
  const auto run = train("malformed", 1, kPlan);
  EXPECT_EQ(run.status, 2) << run.log;
  EXPECT_NE(run.log.find("BW_KILL_AT_COMMIT='during-2' is not <phase>:<steps>"), std::string::npos)
      << run.log;
}

// ---- Store traffic, measured on the loopback interface of a private network namespace.

// Why a private network namespace with its own sysfs cannot be made here, or nullopt.
std::optional<std::string> netns_unavailable() {
  if (geteuid() != 0) return "a private network namespace needs root (unshare -n)";
  if (std::system("command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1") != 0) {
    return "`unshare` (util-linux) or `ip` (iproute2) is missing";
  }
  if (std::system("unshare -n -m --propagation private sh -c 'ip link set lo up && mount -t sysfs "
                  "bw-sysfs /sys && test -r /sys/class/net/lo/statistics/rx_bytes' "
                  ">/dev/null 2>&1") != 0) {
    return "`unshare -n -m` with lo up and a fresh sysfs is not permitted here";
  }
  return std::nullopt;
}

std::string quoted(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    std::string q = "'";
    for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += q + "' ";
  }
  return out;
}

struct Traffic {
  int status = -1;
  std::string log;
  int64_t bytes = 0, packets = 0;
  // TCP payload: every packet here is IPv4 TCP on lo (c10d's sockets are IPv6 ones with
  // v4-mapped addresses, which send IPv4) with Linux's default timestamp option, so it carries
  // 14 (Ethernet) + 20 (IPv4) + 32 (TCP with timestamps) = 66 bytes of headers. Without them,
  // the many small polls whose number grows with the wall time (the coordinator's 3 ms tick,
  // each worker's 10 ms abort watch, heartbeats) weigh about 4 bytes each instead of 70.
  int64_t payload() const { return bytes - 66 * packets; }
};

// Runs the shell lines `body` in a private network namespace (its own lo) and mount namespace
// (a sysfs of that network namespace: the host's sysfs shows the host's lo) and returns what
// crossed lo meanwhile. lo counts each packet once received and once sent: rx is the traffic.
Traffic in_private_netns(const std::string& name, const std::string& body) {
  const auto log = (fs::path(work_dir()) / (name + ".log")).string();
  const auto counters = (fs::path(work_dir()) / (name + ".counters")).string();
  const std::string script =
      "ip link set lo up && mount -t sysfs bw-sysfs /sys || exit 97\n"
      "s=/sys/class/net/lo/statistics\n"
      "before=\"$(cat $s/rx_bytes) $(cat $s/rx_packets)\"\n" +
      body +
      "\nrc=$?\n"
      "echo \"$before $(cat $s/rx_bytes) $(cat $s/rx_packets)\" > \"$0\"\n"
      "exit $rc\n";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execlp("unshare", "unshare", "-n", "-m", "--propagation", "private", "sh", "-c", script.c_str(),
           counters.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  Traffic t;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(kDeadlineS * 1000));
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);  // the shell's group: the runs started in it (their workers die too)
      waitpid(pid, &status, 0);
      t.log = "timed out\n" + bw::testing::read_text(log);
      return t;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  t.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  t.log = bw::testing::read_text(log);
  std::istringstream in(bw::testing::read_text(counters));
  int64_t b0 = 0, p0 = 0, b1 = 0, p1 = 0;
  if (in >> b0 >> p0 >> b1 >> p1) {
    t.bytes = b1 - b0;
    t.packets = p1 - p0;
  }
  return t;
}

// 8 steps of the three-stage plan: a final checkpoint, and with checkpoint_every = 1 seven more.
constexpr int kTrafficSteps = 8;
constexpr int kExtraCheckpoints = kTrafficSteps - 1;

Traffic local_run(const std::string& name, int every) {
  auto args = kPlan;
  args.push_back(fmt::format("--train.checkpoint_every={}", every));
  std::vector<std::string> cmd = {BW_BINARY, "train"};
  for (auto& a : train_args((fs::path(work_dir()) / name).string(), kTrafficSteps, args)) {
    cmd.push_back(a);
  }
  return in_private_netns(name, quoted(cmd));
}

// The same run as a multi-host run on one host: `breakwater coordinator` and one agent with the
// three workers, on loopback, without checkpoint.dir, so every checkpoint goes through the store.
Traffic store_run(const std::string& name, int every) {
  std::vector<std::string> config = {"--cluster.nodes=1",
                                     "--cluster.devices_per_node=3",
                                     "--pipeline.pipelines=[3]",
                                     "--pipeline.schedule=1f1b",
                                     "--pipeline.fault_tolerance=0",
                                     fmt::format("--train.checkpoint_every={}", every)};
  std::vector<std::string> coordinator = {BW_BINARY,         "coordinator", "--listen",
                                          "127.0.0.1:29500", "--wait-s",    "60"};
  for (auto& a : train_args((fs::path(work_dir()) / name).string(), kTrafficSteps, config)) {
    coordinator.push_back(a);
  }
  const std::vector<std::string> agent = {BW_BINARY,         "agent",       "--coordinator",
                                          "127.0.0.1:29500", "--node-name", "local",
                                          "--wait-s",        "60"};
  return in_private_netns(name, "export BW_RUN_TOKEN=checkpoint-traffic-test\n" +
                                    quoted(coordinator) + " & c=$!\n" + quoted(agent) +
                                    "; a=$?\nwait $c; c=$?\n[ $c -eq 0 ] && [ $a -eq 0 ]");
}

// The extra payload per extra checkpoint and shard of local runs, measured on a 2-core machine
// idle and busy (another build and two spinning processes): 0.4 to 0.8 KiB for the quieter of
// two runs, where one run that stalled alone reached 5.2 KiB with its extra polls (and, headers
// counted, single runs differed by -1.9 to +82 KiB: hence payload, and the quieter run). An
// acknowledgement is a few hundred bytes of JSON, set, counted, read and erased. 8 KiB is ten
// times what the quieter runs showed and under a tenth of the smallest shard (100 KB here, which
// the test requires); a shard sent through the store adds twice its size.
constexpr double kMaxExtraPerShardBytes = 8 * 1024;

// Of two runs of a config, the one with the least payload: a run slowed by the machine (a stall
// of seconds on a busy 2-core machine) adds polls, never checkpoint bytes.
Traffic quieter(const Traffic& a, const Traffic& b) { return a.payload() <= b.payload() ? a : b; }

TEST(CheckpointTraffic, ShardBytesNeverPassThroughTheStore) {
  if (auto why = netns_unavailable()) GTEST_SKIP() << "skipped: " << *why;
  std::vector<Traffic> every, never;
  for (int i = 0; i < 2; ++i) {
    every.push_back(local_run("local_every_step", 1));
    ASSERT_EQ(every.back().status, 0) << every.back().log;
    never.push_back(local_run("local_end_only", 0));
    ASSERT_EQ(never.back().status, 0) << never.back().log;
  }
  // The shards' sizes, from the files the workers wrote.
  const auto final_dir =
      checkpoint_dir((fs::path(work_dir()) / "local_every_step").string(), kTrafficSteps);
  const auto info = read_checkpoint_info(final_dir);
  ASSERT_EQ(info.shards.size(), 3u);
  int64_t checkpoint_bytes = 0, smallest_shard = std::numeric_limits<int64_t>::max();
  for (const auto& sh : info.shards) {
    const int64_t b = info.files.at(sh.model).bytes + info.files.at(sh.optimizer).bytes;
    checkpoint_bytes += b;
    smallest_shard = std::min(smallest_shard, b);
  }
  const double units = kExtraCheckpoints * static_cast<double>(info.shards.size());
  const auto e = quieter(every[0], every[1]), n = quieter(never[0], never[1]);
  const double per_shard = double(e.payload() - n.payload()) / units;
  const std::string measured = fmt::format(
      "loopback payload {} and {} B every step vs {} and {} B at the end only ({} and {} vs {} and "
      "{} B with headers, {} and {} vs {} and {} packets): {:.0f} B more per checkpoint and shard "
      "(quieter runs; {:.0f} B with headers); a shard is {} B on average, {} B at least",
      every[0].payload(), every[1].payload(), never[0].payload(), never[1].payload(),
      every[0].bytes, every[1].bytes, never[0].bytes, never[1].bytes, every[0].packets,
      every[1].packets, never[0].packets, never[1].packets, per_shard,
      double(e.bytes - n.bytes) / units,
      checkpoint_bytes / static_cast<int64_t>(info.shards.size()), smallest_shard);
  std::cout << "[ files ] " << measured << "\n";
  ASSERT_LT(10 * kMaxExtraPerShardBytes, smallest_shard)
      << "shards too small to tell: " << measured;
  EXPECT_LT(per_shard, kMaxExtraPerShardBytes) << measured;

  // Positive control: the store path carries each shard (uploaded, then read back by the
  // coordinator), and the same measurement sees it.
  const auto store_every = store_run("store_every_step", 1);
  ASSERT_EQ(store_every.status, 0) << store_every.log;
  const auto store_never = store_run("store_end_only", 0);
  ASSERT_EQ(store_never.status, 0) << store_never.log;
  const double store_per_checkpoint =
      double(store_every.payload() - store_never.payload()) / kExtraCheckpoints;
  const std::string store_measured = fmt::format(
      "through the store: loopback payload {} B every step vs {} B at the end only: {:.0f} B more "
      "per checkpoint ({:.0f} per shard) for checkpoints of {} B",
      store_every.payload(), store_never.payload(), store_per_checkpoint,
      store_per_checkpoint / info.shards.size(), checkpoint_bytes);
  std::cout << "[ store ] " << store_measured << "\n";
  EXPECT_GT(store_per_checkpoint, double(checkpoint_bytes)) << store_measured;
}

}  // namespace
}  // namespace bw::runtime
