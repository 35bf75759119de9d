// The fork server: children of `breakwater-torch` (a local agent, a worker) that start without
// paying LibTorch's start-up again (docs/cli.md, "Children without LibTorch's start-up").
//
// Exec'ing our own executable costs every child LibTorch's static initialisers: 0.3-0.45 s of CPU
// on a 2-core machine, more than a worker's set-up. A process that will spawn children (`train`,
// `coordinator`, `agent`) therefore forks a server first thing in main(), while it still has one
// thread. The server keeps that initialised, single-threaded image and forks a copy of it for
// each child, which runs the subcommand in place of an exec: `entry` (main's body) with the
// child's own argv, shown as its /proc/<pid>/cmdline as an exec would.
//
// A child is exec'd instead, as before, when its executable is another one (etcd), when the
// spawning process's environment differs from the server's (a variable read while libraries
// load, such as OMP_NUM_THREADS, must reach them), or when the kernel lets no process set its own
// command line (PR_SET_MM_MAP, Linux 3.18 with CONFIG_CHECKPOINT_RESTORE).
//
// Protocol, over a stream socketpair; a frame is a u32 length, a type byte, NUL-ended fields:
//   owner -> server   S exe output cwd n env[n] args...   spawn; answered by P pid, or E message
//                     R pid                               the owner saw pid end: reap it
//   server -> owner   X pid status                        a child ended (128 + signal if killed)
// The server reports an exit without reaping (waitid WNOWAIT): the child stays a zombie until R,
// so its pid and process group cannot be reused while the owner may still signal them.
//
// A child exec'd by the server finds its spawner (spawner_pid(), process.h) in BW_SPAWNED_BY,
// "owner:server", which the server adds to its environment.
//
// Deaths: the server asks for SIGKILL when its owner dies (PR_SET_PDEATHSIG) and exits when the
// socket closes; each child asks the same of the server. The owner's death ends every child, as
// when it exec'd them. If the server dies first, its children die with it: the owner reports each
// one it had not seen end as killed (128 + 9), and ChildProcess::spawn forks and execs from then
// on, saying so once on stderr.
//
// Thread-safety: every member function may be called from any thread (one mutex).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace bw::elastic {

class ForkServer {
 public:
  using Entry = int (*)(int argc, char** argv);

  // Forks the server. nullptr, with the reason in `why`, when this process has more than one
  // thread (a fork of it would hold other threads' locks) or the fork fails.
  static std::unique_ptr<ForkServer> start(Entry entry, std::string* why);

  // The process-wide server that ChildProcess::spawn uses; none until installed. A ChildProcess
  // started by a server that is replaced must not be used afterwards (it points to that server).
  static void install(std::unique_ptr<ForkServer> server);
  static ForkServer* installed();

  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;
  ~ForkServer();  // closes the socket: the server exits, and any child still running dies

  // Starts `exe` with `args` (args[0] the program name), its output to `output` when not empty,
  // in this process's working folder and environment. The child's pid; InternalError when the
  // server refused or did not answer within 30 s, and ServerLost when the server is gone.
  pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
              const std::string& output = "");
  // The exit status once `pid` ended (128 + signal when killed); nullopt while running. The first
  // answer with a status lets the server reap pid (so ask from the ChildProcess that keeps it).
  std::optional<int> poll(pid_t pid);
  // SIGKILL to pid's process group and to pid, then its status. InternalError when no end was
  // reported within 60 s.
  int kill(pid_t pid);

  pid_t server_pid() const { return server_pid_; }
  bool forks_in_process() const { return in_process_; }  // else every child is exec'd

  struct ServerLost : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

 private:
  ForkServer(int socket, pid_t server_pid, bool in_process);
  // Handles the server's frames until done() holds or `timeout` passes (zero: only the bytes
  // already there); exit reports go to exited_, a spawn's answer to reply_. Returns done().
  bool pump(std::chrono::milliseconds timeout, const std::function<bool()>& done);
  void send(char type, const std::vector<std::string>& fields);
  std::optional<int> collect(pid_t pid);  // exited_[pid], reaped once asked for
  void lost();  // the socket closed: every child not seen to end was killed with the server

  std::mutex mu_;
  int socket_ = -1;
  pid_t server_pid_ = -1;
  bool in_process_ = false;
  std::string pending_;                                // bytes of frames not yet handled
  std::optional<std::pair<char, std::string>> reply_;  // P pid | E message
  std::map<pid_t, int> exited_;                        // statuses reported by the server
  std::set<pid_t> running_;                            // children not yet seen to end
  std::set<pid_t> reaped_;                             // R sent
};

}  // namespace bw::elastic
