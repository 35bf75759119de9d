#include "runtime/out_dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "core/error.h"

namespace bw::runtime {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLockName = ".lock";

pid_t read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  return static_cast<pid_t>(std::strtol(buf, nullptr, 10));
}

}  // namespace

void check_out_dir_usable(const std::string& out_dir, const std::string& key) {
  std::error_code ec;
  fs::path p = fs::absolute(out_dir, ec);
  if (ec) p = out_dir;
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) {
      throw ConfigError(fmt::format(
          "{} '{}' exists and is not a directory; choose a directory", key, out_dir));
    }
    if (::access(p.c_str(), W_OK | X_OK) != 0) {
      throw ConfigError(fmt::format("{} '{}' is not writable ({}); choose a writable "
                                    "directory",
                                    key, out_dir, std::strerror(errno)));
    }
    return;
  }
  // The nearest existing ancestor must be a writable directory.
  fs::path a = p.parent_path();
  while (!a.empty() && !fs::exists(a, ec)) {
    if (a == a.parent_path()) break;
    a = a.parent_path();
  }
  if (a.empty()) a = ".";
  if (!fs::is_directory(a, ec)) {
    throw ConfigError(fmt::format(
        "{} '{}' cannot be created: '{}' is not a directory; choose another path",
        key, out_dir, a.string()));
  }
  if (::access(a.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format(
        "{} '{}' cannot be created: '{}' is not writable ({}); choose a writable path",
        key, out_dir, a.string(), std::strerror(errno)));
  }
}

OutDirLock OutDirLock::acquire(const std::string& out_dir) {
  check_out_dir_usable(out_dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create train.out_dir '{}': {}; choose a writable path",
                                  out_dir, ec.message()));
  }
  const std::string path = (fs::path(out_dir) / kLockName).string();
  // Our lock file is written whole (our pid) and locked before it appears under the lock's name
  // (link or rename), so whoever finds the name held also finds the holder's pid in it.
  const std::string mine = fmt::format("{}.{}", path, ::getpid());
  const int fd = ::open(mine.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot create the lock file '{}': {}; choose a writable "
                                  "train.out_dir",
                                  mine, std::strerror(errno)));
  }
  auto give_up = [&](const std::string& message) {
    ::close(fd);
    ::unlink(mine.c_str());
    return ConfigError(message);
  };
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()) ||
      ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    throw give_up(fmt::format("cannot write the lock file '{}': {}", mine, std::strerror(errno)));
  }
  // Each round either takes the lock, refuses, or sees the name change under it (another run
  // took a dead run's lock over meanwhile) and looks again; 2 s of rounds at most.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  pid_t other = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::link(mine.c_str(), path.c_str()) == 0) {
      ::unlink(mine.c_str());
      return OutDirLock(path, fd);
    }
    if (errno != EEXIST) {
      throw give_up(
          fmt::format("cannot create the lock file '{}': {}; choose a writable train.out_dir",
                      path, std::strerror(errno)));
    }
    const int old = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (old < 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      throw give_up(fmt::format("cannot open the lock file '{}': {}", path, std::strerror(errno)));
    }
    if (::flock(old, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      other = read_pid(old);
      ::close(old);
      if (err != EWOULDBLOCK)
        throw give_up(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
      // Held. Only a run taking over a dead run's file holds it while it still names the dead
      // pid, and only until its rename: then look again (a pid of another pid namespace or host
      // also reads as dead; it is named after the deadline).
      if (other > 0 && (::kill(other, 0) == 0 || errno == EPERM)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    // A dead run's file, now locked by us: replace it with ours if it is still the one named.
    struct stat locked {}, named {};
    const bool same = ::fstat(old, &locked) == 0 && ::stat(path.c_str(), &named) == 0 &&
                      locked.st_dev == named.st_dev && locked.st_ino == named.st_ino;
    if (same && ::rename(mine.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::close(old);
      throw give_up(fmt::format("cannot replace the lock file '{}': {}", path, std::strerror(err)));
    }
    ::close(old);
    if (same) return OutDirLock(path, fd);
  }
  throw give_up(fmt::format(
      "train.out_dir '{}' is in use by another run (pid {}); wait for it to finish, stop "
      "it, or choose another train.out_dir",
      out_dir, other > 0 ? std::to_string(other) : std::string("unknown")));
}

pid_t OutDirLock::holder(const std::string& out_dir) {
  const std::string path = (fs::path(out_dir) / kLockName).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  pid_t pid = -1;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) pid = read_pid(fd);
  ::close(fd);  // also drops a shared lock we may have taken
  return pid;
}

OutDirLock::OutDirLock(OutDirLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

OutDirLock& OutDirLock::operator=(OutDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

OutDirLock::~OutDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace bw::runtime
