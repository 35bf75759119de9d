// Runs a Python oracle script (hf_oracle.py) through oracle_server.py beside it, which imports the
// script, and with it torch and transformers, once for all the test processes of a suite run:
// that import costs 2-4 s of CPU, and the suite calls the oracle about 35 times. Each call runs in
// a fork of the server, with the same argv, exit status and output file as `python SCRIPT argv...`.
//
// The server listens on a socket in the temporary folder named by a hash of the Python, the
// script and the text of both files, so an edited oracle gets a new server. The first caller
// starts it under a lock; it exits after 60 s without a request. Every wait has a deadline.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"  // read_text

namespace bw::testing {

namespace oracle_detail {

// A connected socket to `path`, or -1.
inline int connect_to(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Starts the server detached from this process's output (CTest waits for the test's pipes to
// close, so the server must not hold them) and waits until it accepts, up to 120 s. Returns 0,
// the server's exit status when it exited first (77: the oracle's packages are missing), or -1.
inline int start_server(const std::string& python, const std::string& server,
                        const std::string& script, const std::string& sock,
                        const std::string& log) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::setsid();
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    ::execl(python.c_str(), python.c_str(), server.c_str(), sock.c_str(), script.c_str(), "60",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : -1;
    if (const int fd = connect_to(sock); fd >= 0) {
      ::close(fd);
      return 0;  // the server outlives this process; init reaps it
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// Sends one request on `fd` and returns the status line's value, or -2 when the server closed
// the connection without answering (it was exiting: the caller starts another), -1 past
// `timeout_s`.
inline int request(int fd, const std::vector<std::string>& argv, const std::string& log,
                   bool append, int timeout_s) {
  const std::string line =
      nlohmann::json{{"argv", argv}, {"log", log}, {"append", append}}.dump() + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return -2;
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (answer.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[64];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return -2;
    answer.append(buf, static_cast<size_t>(n));
  }
  return std::stoi(answer);
}

}  // namespace oracle_detail

// "a b  c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Runs `python script argv...` (argv[0] is the script's name) with stdout and stderr into `log`
// (appended to when `append`), through the oracle server; returns its exit status, 77 when the
// oracle's packages are missing, or -1 (the server could not start or answer in `timeout_s`;
// the server's own log, named in `log`, says why).
inline int run_oracle(const std::string& python, const std::string& script,
                      const std::vector<std::string>& args, const std::string& log,
                      bool append = false, int timeout_s = 300) {
  namespace fs = std::filesystem;
  using namespace oracle_detail;
  const std::string server = (fs::path(script).parent_path() / "oracle_server.py").string();
  const size_t h = std::hash<std::string>{}(python + "\n" + script + "\n" + read_text(script) +
                                            "\n" + read_text(server));
  const std::string base =
      (fs::temp_directory_path() / ("bw_oracle_" + std::to_string(h))).string();
  const std::string sock = base + ".sock", server_log = base + ".log";
  std::vector<std::string> argv = {script};
  argv.insert(argv.end(), args.begin(), args.end());
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = connect_to(sock);
    if (fd < 0) {
      // One process starts the server; the others wait on the lock, then connect.
      const int lock = ::open((base + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock < 0) return -1;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(150);
      while (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::close(lock);
          return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      fd = connect_to(sock);
      if (fd < 0) {
        const int rc = start_server(python, server, script, sock, server_log);
        if (rc == 0) fd = connect_to(sock);
        if (fd < 0) {
          ::close(lock);  // releases the lock
          std::ofstream(log, append ? std::ios::app : std::ios::trunc)
              << "the oracle server did not start (status " << rc << "); see " << server_log
              << "\n";
          return rc == 77 ? 77 : -1;
        }
      }
      ::close(lock);
    }
    const int rc = request(fd, argv, log, append, timeout_s);
    ::close(fd);
    if (rc != -2) return rc;
  }
  return -1;
}

}  // namespace bw::testing
