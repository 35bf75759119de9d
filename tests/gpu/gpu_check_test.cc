// The GPU check's verdict (scripts/gpu_verdict.py, run by scripts/gpu_check.sh), without a GPU:
// a fake nvidia-smi first on PATH says how many GPUs the machine has, and GoogleTest XML of the
// GPU tests (as bw_gpu_test writes it: each test's gpus_needed and exercises properties) says
// what ran. A skip the machine does not explain fails the check, a test the machine cannot run
// leaves it incomplete (exit 3, never "passed"), and only every test run and passed passes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace bw {
namespace {

namespace fs = std::filesystem;

// Removed at exit (kept when BW_KEEP_TEST_FILES is set, for debugging).
fs::path work_dir() {
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("bw_gpu_check_" + std::to_string(getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      if (std::getenv("BW_KEEP_TEST_FILES") == nullptr) fs::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

struct Case {
  std::string name;     // Suite.Test
  std::string result;   // "passed", "failed", "skipped"
  int gpus_needed = 1;  // 0: no property recorded
  std::string exercises;
};

// GoogleTest's XML, in the layout its --gtest_output=xml writes (1.12).
std::string gtest_xml(const std::vector<Case>& cases) {
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"" << cases.size()
    << "\" name=\"AllTests\">\n  <testsuite name=\"Gpu\">\n";
  for (const Case& c : cases) {
    const auto dot = c.name.find('.');
    x << "    <testcase name=\"" << c.name.substr(dot + 1) << "\" file=\"gpu_test.cc\" line=\"1\" "
      << "status=\"run\" result=\"" << (c.result == "skipped" ? "skipped" : "completed")
      << "\" time=\"1.5\" classname=\"" << c.name.substr(0, dot) << "\">\n";
    if (c.result == "skipped")
      x << "      <skipped message=\"gpu_test.cc:1&#x0A;needs " << c.gpus_needed
        << " visible GPU(s), this machine has 0\"><![CDATA[gpu_test.cc:1\nneeds " << c.gpus_needed
        << " visible GPU(s), this machine has 0]]></skipped>\n";
    if (c.result == "failed")
      x << "      <failure message=\"gpu_test.cc:9&#x0A;losses differ\" type=\"\">"
        << "<![CDATA[gpu_test.cc:9\nlosses differ]]></failure>\n";
    if (c.gpus_needed > 0) {
      x << "      <properties>\n        <property name=\"gpus_needed\" value=\"" << c.gpus_needed
        << "\"/>\n";
      if (!c.exercises.empty())
        x << "        <property name=\"exercises\" value=\"" << c.exercises << "\"/>\n";
      x << "      </properties>\n";
    }
    x << "    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

struct Verdict {
  int status = -1;
  std::string output;
};

// Runs the verdict on `xml` (none: no results file) with a fake nvidia-smi listing `gpus` GPUs
// (-1: no nvidia-smi on PATH at all; -2: one that fails as it does without a driver).
Verdict verdict(const std::string& name, int gpus, const std::string* xml) {
  const fs::path dir = work_dir() / name;
  fs::create_directories(dir / "bin");
  if (gpus != -1) {
    std::ofstream smi(dir / "bin" / "nvidia-smi");
    smi << "#!/bin/sh\n";
    if (gpus == -2) {
      smi << "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
             "driver.'\nexit 9\n";
    } else {
      for (int i = 0; i < gpus; ++i)
        smi << "echo 'GPU " << i << ": NVIDIA H200 (UUID: GPU-0000000" << i << ")'\n";
    }
    smi.close();
    fs::permissions(dir / "bin" / "nvidia-smi", fs::perms::owner_all);
  }
  const fs::path results = dir / "gpu_tests.xml";
  if (xml != nullptr) std::ofstream(results) << *xml;
  const fs::path log = dir / "verdict.log";
  // Only the fake's folder and the system's: a real nvidia-smi elsewhere on PATH stays out.
  const std::string command = "timeout 60 env PATH='" + (dir / "bin").string() +
                              ":/usr/bin:/bin' '" BW_PYTHON "' '" BW_SOURCE_DIR
                              "/scripts/gpu_verdict.py' '" +
                              results.string() + "' >'" + log.string() + "' 2>&1";
  const int raw = std::system(command.c_str());
  Verdict v;
  v.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  v.output = ss.str();
  return v;
}

Verdict verdict(const std::string& name, int gpus, const std::vector<Case>& cases) {
  const std::string xml = gtest_xml(cases);
  return verdict(name, gpus, &xml);
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

const Case kNccl{"GpuTraining.NcclPipelinesMatchOneProcess", "passed", 2, "NCCL transport"};

std::vector<Case> with(std::vector<Case> cases, const std::string& result, int nccl_gpus = 2) {
  for (Case& c : cases) c.result = result;
  cases.back().gpus_needed = nccl_gpus;
  return cases;
}

const std::vector<Case> kSuite = {{"GpuDevice.TensorsAndKernels", "passed", 1, ""},
                                  {"GpuTraining.Fp32OnTheGpuMatchesTheCpu", "passed", 1, ""},
                                  kNccl};

TEST(GpuCheckVerdict, EveryTestRunAndPassedIsAPass) {
  const Verdict v = verdict("all_passed", 2, kSuite);
  EXPECT_EQ(v.status, 0) << v.output;
  EXPECT_TRUE(has(v.output, "verdict: passed (3 tests on 2 GPU(s))")) << v.output;
}

TEST(GpuCheckVerdict, ASkipWhileNvidiaSmiListsTheGpusItNeedsFails) {
  // Everything skipped on a machine with a GPU: the tests did not see it (the old check passed).
  auto cases = with(kSuite, "skipped");
  Verdict v = verdict("skipped_with_gpu", 1, cases);
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v.output, "FAILED   GpuDevice.TensorsAndKernels: skipped")) << v.output;
  EXPECT_TRUE(has(v.output, "nvidia-smi -L lists 1 GPU(s)")) << v.output;
  EXPECT_TRUE(has(v.output, "verdict: FAILED (2 of 3 tests)")) << v.output;
  // The NCCL test skipped on a machine with its two GPUs.
  cases = kSuite;
  cases.back().result = "skipped";
  v = verdict("nccl_skipped_with_two", 2, cases);
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v.output, "FAILED   GpuTraining.NcclPipelinesMatchOneProcess: skipped"))
      << v.output;
}

TEST(GpuCheckVerdict, OneGpuLeavesNcclUnexercisedAndTheCheckIncomplete) {
  auto cases = kSuite;
  cases.back().result = "skipped";
  const Verdict v = verdict("one_gpu", 1, cases);
  EXPECT_EQ(v.status, 3) << v.output;
  EXPECT_TRUE(has(v.output,
                  "NOT RUN  GpuTraining.NcclPipelinesMatchOneProcess: needs 2 GPU(s), "
                  "the machine has 1: the NCCL transport is unexercised"))
      << v.output;
  EXPECT_TRUE(has(v.output, "verdict: INCOMPLETE, not a pass")) << v.output;
  EXPECT_FALSE(has(v.output, "verdict: passed")) << v.output;
}

TEST(GpuCheckVerdict, NoGpuAtAllRunsNothingAndIsNoPass) {
  const auto cases = with(kSuite, "skipped");
  for (const int gpus : {0, -1, -2}) {
    SCOPED_TRACE(gpus);
    const Verdict v = verdict("no_gpu" + std::to_string(-gpus), gpus, cases);
    EXPECT_EQ(v.status, 3) << v.output;
    EXPECT_TRUE(has(v.output, "0 of 3 tests passed")) << v.output;
  }
  EXPECT_TRUE(has(verdict("no_smi", -1, cases).output, "no nvidia-smi on PATH"));
  EXPECT_TRUE(has(verdict("failing_smi", -2, cases).output, "nvidia-smi -L failed (exit 9"));
}

TEST(GpuCheckVerdict, AFailureAnUnexplainedSkipOrNoResultsFail) {
  auto cases = kSuite;
  cases[1].result = "failed";
  Verdict v = verdict("failed", 2, cases);
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v.output, "FAILED   GpuTraining.Fp32OnTheGpuMatchesTheCpu: losses differ"))
      << v.output;
  // A skip that records no GPU count: nothing says the machine explains it.
  cases = kSuite;
  cases[0].result = "skipped";
  cases[0].gpus_needed = 0;
  v = verdict("unexplained", 0, cases);
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v.output, "skipped without recording the GPUs it needs")) << v.output;
  // The binary crashed before writing its results, or wrote none.
  v = verdict("no_results", 1, nullptr);
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v.output, "no test results")) << v.output;
  v = verdict("empty", 1, std::vector<Case>{});
  EXPECT_EQ(v.status, 1) << v.output;
}

}  // namespace
}  // namespace bw
