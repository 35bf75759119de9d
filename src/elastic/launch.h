// `breakwater launch` (docs/multihost.md "Launch"): a multi-host run from one command. It reads
// a DeepSpeed-style hostfile (`host slots=g`, one host a line, `#` comments), runs the coordinator
// in this process, and starts one agent per host through a remote shell (`ssh -o BatchMode=yes`
// by default; any command that runs its arguments on the named host will do). Each agent gets
// the run token on its standard input, never on a command line, and ends when that input closes,
// so stopping the launcher (the end of the run, an error, Ctrl-C) stops every agent with it.
//
// Thread-safety: one thread uses a Launcher.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace bw::elastic {

struct HostEntry {
  std::string host;
  int slots = 1;
};

// The hostfile's hosts in order. ConfigError for a malformed line (with its number), a repeated
// host, an empty file, or slot counts that differ (every node of a run has the same devices).
std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& path);

// The agents of a launch, one remote-shell process per host.
class Launcher {
 public:
  Launcher(std::vector<std::string> remote_shell, std::string remote_binary)
      : shell_(std::move(remote_shell)), binary_(std::move(remote_binary)) {}
  ~Launcher() { stop(5000); }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts `<shell> <host> <binary> agent --coordinator ADDR:PORT --node-name host --devices g
  // --token-stdin` and writes the token to its input.
  void start(const HostEntry& host, const std::string& coordinator, const std::string& token);
  // Closes every agent's input, waits up to `timeout_ms` for the shells to end, then kills them.
  void stop(double timeout_ms);
  // The command line of host `host` (for messages and tests).
  std::vector<std::string> command(const HostEntry& host, const std::string& coordinator) const;

 private:
  struct Child {
    pid_t pid = -1;
    int input = -1;  // write end of its stdin
  };
  std::vector<std::string> shell_;
  std::string binary_;
  std::vector<Child> children_;
};

}  // namespace bw::elastic
