// Bounded reads and checked writes of user-named files. Every reader of a file a user names
// (TOML run config, JSON profile / cluster / sidecar, CSV schedule, failure trace, text corpus,
// safetensors) goes through `require_regular_file` first, so a directory, a FIFO, a device such
// as /dev/zero or a socket is refused before anything is opened (opening a FIFO would block) and
// a file larger than the reader's limit is refused before anything is allocated. Every output
// (SVG, trace, CSV, profile, metrics, config, checkpoint) goes through `write_file` or
// `FileWriter`, which check each write and the close, so a full disk (/dev/full) or an
// unwritable path is a ConfigError naming the path and the cause, never a silent success.
//
// Limits (documented in docs/config.md, "Limits"):
//   kMaxConfigBytes      1 MiB    TOML run config
//   kMaxJsonBytes       64 MiB    profile, cluster, checkpoint sidecar JSON, Chrome trace
//   kMaxTableBytes     256 MiB    schedule CSV, failure trace CSV
//   kMaxCorpusBytes      4 GiB    a text corpus (file or directory, read into memory)
//
// Thread-safety: functions are independent; a FileWriter is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace bw::io {

inline constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxJsonBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxTableBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxCorpusBytes = int64_t{4} << 30;

// "12.0 MiB": a byte count for messages.
std::string human_bytes(int64_t bytes);

// Throws ConfigError unless `path` is a regular file (symlinks followed) of at most `max_bytes`;
// returns its size. `what` names the input in messages ("profile", "schedule CSV").
int64_t require_regular_file(const std::string& path, int64_t max_bytes, std::string_view what);

// The whole file, after require_regular_file; reads at most max_bytes even if the file grows.
std::string read_file(const std::string& path, int64_t max_bytes, std::string_view what);

// Creates or truncates `path` and writes `text`; ConfigError naming the path and the system's
// reason (e.g. "No space left on device") if the open, any write or the close fails.
void write_file(const std::string& path, std::string_view text, std::string_view what);

// What FileWriter throws when the file system is full (ENOSPC, EDQUOT): a ConfigError (the user
// frees space or chooses another path) that a caller able to make room tells from the others.
class DiskFull : public ConfigError {
 public:
  explicit DiskFull(const std::string& what) : ConfigError(what) {}
};

// A file written through a raw descriptor: every write checked, optional fsync, checked close.
// A failure is a ConfigError naming the file and the system's reason (DiskFull when full).
class FileWriter {
 public:
  // Opens `path` for writing (created 0644, then truncated, or appended to when `append`).
  FileWriter(const std::string& path, std::string_view what, bool append = false);
  ~FileWriter();  // closes without checking if close() was not called (an error path)
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites bytes already written at `offset` (pwrite; the file position does not move), e.g.
  // a header whose counts are known only at the end.
  void write_at(uint64_t offset, const void* data, size_t bytes);
  void sync();   // fsync: the bytes are on stable storage when it returns
  void close();  // checked close
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* action, int err) const;
  std::string path_;
  std::string what_;
  int fd_ = -1;
};

// fsyncs an existing file by path (written earlier without a sync).
void sync_file(const std::string& path);

// fsyncs a directory, so renames and new entries in it survive a crash.
void sync_directory(const std::string& dir);

// Writes `text` to `path` durably: to `path.tmp`, fsync, rename over `path`, fsync the directory.
// A crash leaves either the old or the new file under `path`.
void write_file_durably(const std::string& path, std::string_view text, std::string_view what);

}  // namespace bw::io
