// Child processes of the coordinator: exit statuses are reported, kill ends a running child, and
// wait_or_kill never waits past its deadline.
#include "elastic/process.h"

#include <gtest/gtest.h>

#include <chrono>

namespace bw::elastic {
namespace {

TEST(ChildProcess, ReportsExitStatus) {
  for (int code : {0, 1, 3, 42}) {
    auto c = ChildProcess::spawn("/bin/sh", {"sh", "-c", "exit " + std::to_string(code)});
    EXPECT_EQ(c.wait_or_kill(std::chrono::seconds(10)), code);
  }
}

TEST(ChildProcess, KillEndsARunningChildWithinTheDeadline) {
  auto c = ChildProcess::spawn("/bin/sh", {"sh", "-c", "exec sleep 30"});
  EXPECT_FALSE(c.poll().has_value());
  const auto t0 = std::chrono::steady_clock::now();
  const int status = c.wait_or_kill(std::chrono::milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(status, 128 + 9);  // SIGKILL
}

TEST(ChildProcess, MissingExecutableExitsWith127) {
  auto c = ChildProcess::spawn("/nonexistent/breakwater", {"breakwater"});
  EXPECT_EQ(c.wait_or_kill(std::chrono::seconds(10)), 127);
}

}  // namespace
}  // namespace bw::elastic
