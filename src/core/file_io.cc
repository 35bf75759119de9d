#include "core/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace bw::io {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

int64_t require_regular_file(const std::string& path, int64_t max_bytes, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw ConfigError(fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(fmt::format("{} '{}' is {}; give a regular file", what, path,
                                  kind_of(st.st_mode)));
  }
  const auto size = static_cast<int64_t>(st.st_size);
  if (size > max_bytes) {
    throw ConfigError(fmt::format("{} '{}' has {} ({} bytes), more than the limit of {} for a {}",
                                  what, path, human_bytes(size), size, human_bytes(max_bytes),
                                  what));
  }
  return size;
}

std::string read_file(const std::string& path, int64_t max_bytes, std::string_view what) {
  const int64_t size = require_regular_file(path, max_bytes, what);
  // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, open does not block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(fmt::format("{} '{}' is not a regular file", what, path));
  }
  std::string out;
  out.resize(static_cast<size_t>(size));
  size_t got = 0;
  while (true) {
    if (got == out.size()) {
      if (static_cast<int64_t>(out.size()) >= max_bytes + 1) break;
      out.resize(std::min<int64_t>(max_bytes + 1, static_cast<int64_t>(out.size()) + 65536));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(err)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (static_cast<int64_t>(got) > max_bytes) {
    throw ConfigError(fmt::format("{} '{}' grew past the limit of {} while being read", what,
                                  path, human_bytes(max_bytes)));
  }
  out.resize(got);
  return out;
}

FileWriter::FileWriter(const std::string& path, std::string_view what, bool append)
    : path_(path), what_(what) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("open", errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::fail(const char* action, int err) const {
  const auto message =
      fmt::format("cannot {} {} '{}': {}", action, what_, path_, std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) throw DiskFull(message);
  throw ConfigError(message);
}

void FileWriter::write(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", errno);
    if (n == 0) fail("write", ENOSPC);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void FileWriter::write_at(uint64_t offset, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", errno);
    if (n == 0) fail("write", ENOSPC);
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

void FileWriter::sync() {
  // EINVAL: the file does not support syncing (a pipe, /dev/stdout); nothing to make durable.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) fail("sync", errno);
}

void FileWriter::close() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail("close", errno);
}

void write_file(const std::string& path, std::string_view text, std::string_view what) {
  FileWriter out(path, what);
  out.write(text);
  out.close();
}

void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot open '{}' to sync it: {}", path, std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    throw ConfigError(fmt::format("cannot sync '{}': {}", path, std::strerror(err)));
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot open directory '{}': {}", dir, std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    throw ConfigError(fmt::format("cannot sync directory '{}': {}", dir, std::strerror(err)));
  }
}

void write_file_durably(const std::string& path, std::string_view text, std::string_view what) {
  const std::string tmp = path + ".tmp";
  try {
    FileWriter out(tmp, what);
    out.write(text);
    out.sync();
    out.close();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
  sync_directory(std::filesystem::path(path).parent_path().string());
}

}  // namespace bw::io
