#include "runtime/out_dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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

void check_out_dir_usable(const std::string& out_dir) {
  std::error_code ec;
  fs::path p = fs::absolute(out_dir, ec);
  if (ec) p = out_dir;
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) {
      throw ConfigError(fmt::format(
          "train.out_dir '{}' exists and is not a directory; choose a directory", out_dir));
    }
    if (::access(p.c_str(), W_OK | X_OK) != 0) {
      throw ConfigError(fmt::format("train.out_dir '{}' is not writable ({}); choose a writable "
                                    "directory",
                                    out_dir, std::strerror(errno)));
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
        "train.out_dir '{}' cannot be created: '{}' is not a directory; choose another path",
        out_dir, a.string()));
  }
  if (::access(a.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format(
        "train.out_dir '{}' cannot be created: '{}' is not writable ({}); choose a writable path",
        out_dir, a.string(), std::strerror(errno)));
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
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot create the lock file '{}': {}; choose a writable "
                                  "train.out_dir",
                                  path, std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const pid_t other = read_pid(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      throw ConfigError(fmt::format(
          "train.out_dir '{}' is in use by another run (pid {}); wait for it to finish, stop "
          "it, or choose another train.out_dir",
          out_dir, other > 0 ? std::to_string(other) : std::string("unknown")));
    }
    throw ConfigError(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
  }
  // Ours now (a lock file of a dead process is taken over): record our pid.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                     static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    throw ConfigError(fmt::format("cannot write the lock file '{}': {}", path, std::strerror(err)));
  }
  return OutDirLock(path, fd);
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
