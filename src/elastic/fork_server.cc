#include "elastic/fork_server.h"

#include <fcntl.h>
#include <linux/prctl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "elastic/process.h"

extern char** environ;

namespace bw::elastic {
namespace {

constexpr char kSpawn = 'S';
constexpr char kReap = 'R';
constexpr char kPid = 'P';
constexpr char kError = 'E';
constexpr char kExit = 'X';
constexpr const char* kSpawnerVariable = "BW_SPAWNED_BY";  // in an exec'd child: owner:server

std::string frame(char type, const std::vector<std::string>& fields) {
  std::string payload(1, type);
  for (const auto& f : fields) {
    payload += f;
    payload += '\0';
  }
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out(reinterpret_cast<const char*>(&n), sizeof n);
  return out + payload;
}

// One whole frame off the front of `bytes`, if there is one.
std::optional<std::pair<char, std::vector<std::string>>> take_frame(std::string& bytes) {
  uint32_t n = 0;
  if (bytes.size() < sizeof n) return std::nullopt;
  std::memcpy(&n, bytes.data(), sizeof n);
  if (bytes.size() < sizeof n + n) return std::nullopt;
  BW_CHECK(n >= 1, "an empty fork-server frame");
  const char type = bytes[sizeof n];
  std::vector<std::string> fields;
  size_t at = sizeof n + 1;
  const size_t end = sizeof n + n;
  while (at < end) {
    const size_t nul = bytes.find('\0', at);
    BW_CHECK(nul != std::string::npos && nul < end, "a fork-server field without its end");
    fields.push_back(bytes.substr(at, nul - at));
    at = nul + 1;
  }
  bytes.erase(0, end);
  return std::pair{type, std::move(fields)};
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

int thread_count() {
  std::error_code ec;
  const std::filesystem::directory_iterator tasks("/proc/self/task", ec);
  if (ec) return -1;
  return static_cast<int>(std::distance(tasks, std::filesystem::directory_iterator{}));
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

// Points this process's command line (/proc/self/cmdline, what `ps` shows) at `args`, NUL-
// separated as the kernel lays out an exec's. PR_SET_MM_MAP needs no privilege when the
// executable stays; it changes nothing else here (every other field is the current value).
// With `args` empty it only tries whether the kernel allows it.
bool set_command_line(const std::vector<std::string>& args) {
  const auto field = self_stat_fields();
  if (field.size() < 52) return false;
  prctl_mm_map map{};
  map.start_code = field[26];
  map.end_code = field[27];
  map.start_stack = field[28];
  map.start_data = field[45];
  map.end_data = field[46];
  map.start_brk = field[47];
  map.brk = reinterpret_cast<uint64_t>(sbrk(0));
  map.arg_start = field[48];
  map.arg_end = field[49];
  map.env_start = field[50];
  map.env_end = field[51];
  map.exe_fd = static_cast<uint32_t>(-1);
  if (!args.empty()) {
    auto* text = new std::string;  // the command line's storage for the rest of this process
    for (const auto& a : args) {
      *text += a;
      *text += '\0';
    }
    map.arg_start = reinterpret_cast<uint64_t>(text->data());
    map.arg_end = map.arg_start + text->size();
  }
  return prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0) == 0;
}

pid_t g_spawner = -1;  // in a child run in place of an exec: the server's owner

// What a child gets from the server's image: the owner's state when the server started.
struct Image {
  ForkServer::Entry entry = nullptr;
  pid_t owner = -1;                 // the process that started the server
  std::string exe;                  // /proc/self/exe
  std::vector<std::string> env;     // sorted
  sigset_t mask{};                  // the signal mask
  struct sigaction pipe_action {};  // SIGPIPE's disposition
  bool in_process = false;
};

// In the child of the server: becomes the requested process, as ChildProcess::spawn's child does,
// then runs `entry` or execs.
[[noreturn]] void become_child(const Image& image, pid_t server, const std::string& exe,
                               const std::string& output, const std::string& cwd,
                               std::vector<std::string> env, std::vector<std::string> args) {
  sigprocmask(SIG_SETMASK, &image.mask, nullptr);
  sigaction(SIGPIPE, &image.pipe_action, nullptr);
  prepare_spawned_child(server, output);
  if (chdir(cwd.c_str()) != 0) _exit(127);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> sorted = env;
  std::sort(sorted.begin(), sorted.end());
  const bool same = image.in_process && exe == image.exe && sorted == image.env;
  if (same && set_command_line(args)) {
    g_spawner = image.owner;
    std::exit(image.entry(static_cast<int>(args.size()), argv.data()));
  }
  // The exec'd child's parent is this server: tell it who spawned it (spawner_pid()).
  const std::string prefix = std::string(kSpawnerVariable) + "=";
  std::erase_if(env, [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
  env.push_back(fmt::format("{}{}:{}", prefix, image.owner, server));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execve(exe.c_str(), argv.data(), envp.data());
  _exit(127);
}

// The server's loop: one thread, no locks; ends with the socket.
[[noreturn]] void serve(int sock, const Image& image) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) _exit(1);
  std::set<pid_t> live;  // children whose end is not reported yet
  std::string bytes;
  auto report_exits = [&] {
    for (auto it = live.begin(); it != live.end();) {
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(*it), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == *it) {
        const int status = info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
        if (!write_all(sock, frame(kExit, {std::to_string(*it), std::to_string(status)}))) {
          _exit(0);
        }
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  };
  for (;;) {
    pollfd fds[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si{};
      while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      }
      report_exits();
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    const ssize_t n = read(sock, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the owner is gone; our children follow us (PR_SET_PDEATHSIG)
    bytes.append(buf, static_cast<size_t>(n));
    while (auto f = take_frame(bytes)) {
      auto& [type, fields] = *f;
      if (type == kReap && fields.size() == 1) {
        const pid_t pid = static_cast<pid_t>(std::stol(fields[0]));
        int status = 0;
        waitpid(pid, &status, 0);  // a zombie: reported before, not reaped until now
        continue;
      }
      if (type != kSpawn || fields.size() < 5) _exit(1);
      const size_t n_env = std::stoul(fields[3]);
      if (fields.size() < 4 + n_env + 1) _exit(1);
      std::vector<std::string> env(fields.begin() + 4, fields.begin() + 4 + n_env);
      std::vector<std::string> args(fields.begin() + 4 + n_env, fields.end());
      const pid_t server = getpid();
      const pid_t pid = fork();
      if (pid == 0) {
        ::close(sock);
        ::close(sfd);
        become_child(image, server, fields[0], fields[1], fields[2], std::move(env),
                     std::move(args));
      }
      const std::string answer =
          pid < 0 ? frame(kError, {std::strerror(errno)}) : frame(kPid, {std::to_string(pid)});
      if (pid > 0) live.insert(pid);
      if (!write_all(sock, answer)) _exit(0);
    }
  }
}

std::unique_ptr<ForkServer>& installed_server() {
  static std::unique_ptr<ForkServer> server;
  return server;
}

}  // namespace

pid_t spawner_pid() {
  if (g_spawner > 0) return g_spawner;
  const pid_t parent = getppid();
  // Exec'd by a server: "owner:server", trusted only while that server is still the parent (an
  // exec'd grandchild inherits the variable from its own spawner's environment).
  if (const char* v = std::getenv(kSpawnerVariable)) {
    long owner = 0, server = 0;
    if (std::sscanf(v, "%ld:%ld", &owner, &server) == 2 && server == parent) {
      return static_cast<pid_t>(owner);
    }
  }
  return parent;
}

std::unique_ptr<ForkServer> ForkServer::start(Entry entry, std::string* why) {
  if (const int threads = thread_count(); threads != 1) {
    if (why) *why = fmt::format("this process has {} threads; a fork server needs one", threads);
    return nullptr;
  }
  Image image;
  image.entry = entry;
  image.owner = getpid();
  image.exe = self_executable();
  image.env = environment();
  std::sort(image.env.begin(), image.env.end());
  sigprocmask(SIG_SETMASK, nullptr, &image.mask);
  sigaction(SIGPIPE, nullptr, &image.pipe_action);
  image.in_process = set_command_line({});
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    if (why) *why = fmt::format("socketpair failed: {}", std::strerror(errno));
    return nullptr;
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t owner = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (why) *why = fmt::format("fork failed: {}", std::strerror(errno));
    ::close(sv[0]);
    ::close(sv[1]);
    return nullptr;
  }
  if (pid == 0) {
    ::close(sv[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != owner) _exit(0);
    // Own process group: a Ctrl-C at the terminal reaches the owner, which decides what ends.
    setpgid(0, 0);
    signal(SIGPIPE, SIG_IGN);
    serve(sv[1], image);
  }
  ::close(sv[1]);
  return std::unique_ptr<ForkServer>(new ForkServer(sv[0], pid, image.in_process));
}

ForkServer::ForkServer(int socket, pid_t server_pid, bool in_process)
    : socket_(socket), server_pid_(server_pid), in_process_(in_process) {}

ForkServer::~ForkServer() {
  if (socket_ >= 0) ::close(socket_);
  // At the socket's end the server reaps what it was asked to and exits; a second at most, then
  // it is killed, as if this process had ended (its children go with it: PR_SET_PDEATHSIG).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int status = 0;
  while (waitpid(server_pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(server_pid_, SIGKILL);
      waitpid(server_pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ForkServer::install(std::unique_ptr<ForkServer> server) {
  installed_server() = std::move(server);
}

ForkServer* ForkServer::installed() { return installed_server().get(); }

void ForkServer::send(char type, const std::vector<std::string>& fields) {
  if (socket_ < 0) throw ServerLost("the fork server is gone");
  if (!write_all(socket_, frame(type, fields))) {
    lost();
    throw ServerLost("the fork server is gone");
  }
}

void ForkServer::lost() {
  if (socket_ >= 0) ::close(socket_);
  socket_ = -1;
  for (pid_t pid : running_) exited_[pid] = 128 + SIGKILL;  // its PR_SET_PDEATHSIG
  running_.clear();
  int status = 0;
  waitpid(server_pid_, &status, WNOHANG);
}

bool ForkServer::pump(std::chrono::milliseconds timeout, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    while (auto f = take_frame(pending_)) {
      auto& [type, fields] = *f;
      if (type == kExit && fields.size() == 2) {
        const pid_t pid = static_cast<pid_t>(std::stol(fields[0]));
        exited_[pid] = std::stoi(fields[1]);
        running_.erase(pid);
      } else if ((type == kPid || type == kError) && fields.size() == 1) {
        reply_ = std::pair{type, fields[0]};
        if (type == kPid) {
          // Before any later frame: a child that ends at once is reported right after this.
          const pid_t pid = static_cast<pid_t>(std::stol(fields[0]));
          exited_.erase(pid);  // a pid the kernel used before
          reaped_.erase(pid);
          running_.insert(pid);
        }
      } else {
        BW_CHECK(false, "an unknown fork-server frame of type {}", static_cast<int>(type));
      }
    }
    if (done()) return true;
    if (socket_ < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{socket_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return done();
    char buf[4096];
    const ssize_t n = recv(socket_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      lost();
      return done();
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<int> ForkServer::collect(pid_t pid) {
  const auto it = exited_.find(pid);
  if (it == exited_.end()) return std::nullopt;
  if (socket_ >= 0 && reaped_.insert(pid).second) {
    try {
      send(kReap, {std::to_string(pid)});
    } catch (const ServerLost&) {
      // The server took its zombies with it.
    }
  }
  return it->second;
}

pid_t ForkServer::spawn(const std::string& exe, const std::vector<std::string>& args,
                        const std::string& output) {
  std::lock_guard lock(mu_);
  std::vector<std::string> fields = {exe, output, std::filesystem::current_path().string()};
  const std::vector<std::string> env = environment();
  fields.push_back(std::to_string(env.size()));
  fields.insert(fields.end(), env.begin(), env.end());
  fields.insert(fields.end(), args.begin(), args.end());
  reply_.reset();
  send(kSpawn, fields);
  pump(std::chrono::seconds(30), [&] { return reply_.has_value(); });
  if (!reply_) {
    if (socket_ < 0) throw ServerLost("the fork server is gone");
    BW_CHECK(false, "the fork server (pid {}) did not answer a spawn within 30 s", server_pid_);
  }
  BW_CHECK(reply_->first == kPid, "the fork server could not fork: {}", reply_->second);
  return static_cast<pid_t>(std::stol(reply_->second));
}

std::optional<int> ForkServer::poll(pid_t pid) {
  std::lock_guard lock(mu_);
  pump(std::chrono::milliseconds(0), [] { return false; });
  return collect(pid);
}

int ForkServer::kill(pid_t pid) {
  std::lock_guard lock(mu_);
  pump(std::chrono::milliseconds(0), [] { return false; });
  if (auto status = collect(pid)) return *status;
  ::kill(-pid, SIGKILL);  // the child's process group (prepare_spawned_child)
  ::kill(pid, SIGKILL);
  const bool ended = pump(std::chrono::seconds(60), [&] { return exited_.count(pid) > 0; });
  BW_CHECK(ended, "child {} did not end within 60 s of SIGKILL", pid);
  return *collect(pid);
}

}  // namespace bw::elastic
