// Child processes of the coordinator (the local agent's job in docs/design.md "Elastic control
// plane"): spawn a worker with fork + exec of our own binary, poll it without blocking, kill it.
// A child asks the kernel to kill it when the coordinator dies (PR_SET_PDEATHSIG), so a crashed
// coordinator never leaves workers behind.
//
// Thread-safety: use one ChildProcess from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace bw::elastic {

class ChildProcess {
 public:
  // Starts `exe` with `args` (args[0] is the program name); InternalError if fork/exec fails.
  static ChildProcess spawn(const std::string& exe, const std::vector<std::string>& args);

  ChildProcess() = default;
  pid_t pid() const { return pid_; }
  // The exit status once the child has ended (128 + signal when killed); nullopt while running.
  std::optional<int> poll();
  // SIGKILL (if still running) and reap.
  void kill();
  // Waits up to `timeout` for the child to exit by itself; kills it afterwards.
  int wait_or_kill(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Path of the running executable (/proc/self/exe), so the coordinator can exec itself.
std::string self_executable();

}  // namespace bw::elastic
