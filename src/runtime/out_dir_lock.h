// One run per output directory. A run holds an exclusive flock(2) on `{out_dir}/.lock` (the file
// records its pid) for as long as it lives; a second run on the same out_dir is refused with the
// first one's pid instead of mixing its metrics and checkpoints into the first one's. The lock
// is the kernel's, so it goes away with the process however that ends (SIGKILL included): a lock
// file left by a dead process is taken over. A run writes its pid into a file of its own
// (`.lock.{pid}`), locks it, and only then gives it the name `.lock` (link, or rename over a dead
// run's file it has locked and checked is still the one named), so a held `.lock` always names
// its holder. The descriptor is close-on-exec, so worker processes do not inherit it. (flock is
// local to a host; on NFS it may not exclude runs on other hosts.)
//
// Thread-safety: one OutDirLock per process and directory; movable, not copyable.
#pragma once

#include <string>
#include <sys/types.h>

namespace bw::runtime {

// ConfigError unless `out_dir` can hold a run's outputs: it is a directory or can be created
// under an existing, writable ancestor. Creates nothing. Used by config loading, so an unusable
// train.out_dir is bad input (exit 2) before any process starts.
void check_out_dir_usable(const std::string& out_dir, const std::string& key = "train.out_dir");

class OutDirLock {
 public:
  // Creates `out_dir` if needed and takes its lock; ConfigError if it cannot be created or
  // written, or if another live process holds the lock ("train.out_dir 'runs/a' is in use by
  // another run (pid 1234); wait for it to finish, stop it, or choose another train.out_dir").
  static OutDirLock acquire(const std::string& out_dir);

  OutDirLock(OutDirLock&& other) noexcept;
  OutDirLock& operator=(OutDirLock&& other) noexcept;
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;
  ~OutDirLock();  // releases the lock (the .lock file stays; it is harmless)

  const std::string& path() const { return path_; }  // the lock file

  // The pid recorded in `{out_dir}/.lock` by a run that holds the lock now; -1 if none does.
  static pid_t holder(const std::string& out_dir);

 private:
  OutDirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace bw::runtime
