// Writes one split ("train", "val") of a token stream as llm.c .bin shards (docs/data.md):
// NAME_SPLIT_000000.bin, NAME_SPLIT_000001.bin, ..., each a 1024-byte header (magic 20240520,
// version 1 for uint16 tokens or 2 for uint32, token count) and `shard_tokens` tokens, the last
// one fewer. Documents run on across shard boundaries, as llm.c's data scripts write them.
//
// Crash safety: a shard is written to NAME_SPLIT_000000.bin.tmp in the output folder, its header
// filled in, fsynced, and renamed to its name, then the folder is fsynced: a shard appears whole
// or not at all. abort() (on an error) removes the temporary file and the shards written.
//
// Thread-safety: used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace bw::dataprep {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int64_t kShardHeaderBytes = 1024;

// "NAME_SPLIT_000007.bin"
std::string shard_name(const std::string& name, const std::string& split, int64_t index);

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string name, std::string split, int64_t shard_tokens,
              int token_bytes);
  ~ShardWriter();  // an unfinished writer aborts
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const uint32_t> tokens);
  // Completes the last shard; the paths of all shards written, in order.
  const std::vector<std::string>& finish();
  // Removes the temporary file and every shard this writer completed.
  void abort() noexcept;

  int64_t tokens() const { return total_; }
  int64_t shards() const { return static_cast<int64_t>(written_.size()) + (file_ ? 1 : 0); }

 private:
  void open_shard();
  void close_shard();
  void flush();

  std::string dir_, name_, split_;
  int64_t shard_tokens_;
  int token_bytes_;
  std::unique_ptr<io::FileWriter> file_;
  std::string tmp_path_, final_path_;
  int64_t in_shard_ = 0;
  int64_t total_ = 0;
  std::string buf_;  // encoded tokens not yet written
  std::vector<std::string> written_;
  bool finished_ = false;
};

}  // namespace bw::dataprep
