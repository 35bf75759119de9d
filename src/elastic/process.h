// Child processes of the coordinator (the local agent's job in docs/design.md "Elastic control
// plane"): spawn a worker with fork + exec of our own binary, poll it without blocking, kill it.
// A child asks the kernel to kill it when the coordinator dies (PR_SET_PDEATHSIG), so a crashed
// coordinator never leaves workers behind. When this process installed a fork server
// (fork_server.h), children come from it instead, without LibTorch's start-up; if that server is
// gone, spawn forks and execs again and says so once on stderr.
//
// Thread-safety: use one ChildProcess from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace bw::elastic {

class ForkServer;

class ChildProcess {
 public:
  // Starts `exe` with `args` (args[0] is the program name); InternalError if fork/exec fails.
  // With `output`, its standard output and error go to that file (created or truncated);
  // without, it shares this process's.
  static ChildProcess spawn(const std::string& exe, const std::vector<std::string>& args,
                            const std::string& output = "");

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
  ForkServer* server_ = nullptr;  // the installed server that started it, if one did
};

// In a child just forked to be spawned: its own process group (so kill() also ends what it
// starts), SIGKILL when `parent` dies (PR_SET_PDEATHSIG), and its standard output and error to
// `output` when not empty. _exit(127) if `parent` is already gone or `output` cannot be opened.
void prepare_spawned_child(pid_t parent, const std::string& output);

// The process that spawned this one with ChildProcess::spawn: the owner of the fork server that
// forked or exec'd it (an exec'd one reads it from BW_SPAWNED_BY, fork_server.h), else the
// parent.
pid_t spawner_pid();

// Path of the running executable (/proc/self/exe), so the coordinator can exec itself.
std::string self_executable();

// The numeric fields of /proc/self/stat, indexed as proc(5) numbers them (1 and 2, the pid and
// the name, and 3, the state, read as 0); empty when unreadable.
std::vector<unsigned long long> self_stat_fields();

// Milliseconds since this process was created (its fork, from /proc/self/stat, so an exec, the
// dynamic loading of LibTorch and static initialisers are all included); NaN when unknown.
double process_age_ms();

// This executable's own start-up: process_age_ms() as main() saw it (note_main_entered(), called
// first thing in main). The coordinator uses it as the measured start-up of an agent, which runs
// the same binary on the same kind of machine (docs/elastic.md "Start-up"). NaN until noted.
void note_main_entered();
double main_entered_ms();

}  // namespace bw::elastic
