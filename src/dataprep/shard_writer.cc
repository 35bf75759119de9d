#include "dataprep/shard_writer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace bw::dataprep {
namespace {

constexpr size_t kFlushBytes = size_t{8} << 20;

void put_le32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace

std::string shard_name(const std::string& name, const std::string& split, int64_t index) {
  return fmt::format("{}_{}_{:06d}.bin", name, split, index);
}

ShardWriter::ShardWriter(std::string dir, std::string name, std::string split, int64_t shard_tokens,
                         int token_bytes)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      split_(std::move(split)),
      shard_tokens_(shard_tokens),
      token_bytes_(token_bytes) {
  BW_CHECK(shard_tokens_ >= 1 && shard_tokens_ <= INT32_MAX, "shard_tokens {}", shard_tokens_);
  BW_CHECK(token_bytes_ == 2 || token_bytes_ == 4, "token_bytes {}", token_bytes_);
}

ShardWriter::~ShardWriter() {
  if (!finished_) abort();
}

void ShardWriter::open_shard() {
  const std::string base = shard_name(name_, split_, static_cast<int64_t>(written_.size()));
  final_path_ = (std::filesystem::path(dir_) / base).string();
  tmp_path_ = final_path_ + ".tmp";
  file_ = std::make_unique<io::FileWriter>(tmp_path_, "shard");
  const std::string header(kShardHeaderBytes, '\0');  // filled in when the shard is complete
  file_->write(header);
  in_shard_ = 0;
}

void ShardWriter::flush() {
  if (!buf_.empty()) file_->write(buf_);
  buf_.clear();
}

void ShardWriter::close_shard() {
  flush();
  char header[12];
  put_le32(header, static_cast<uint32_t>(kShardMagic));
  put_le32(header + 4, token_bytes_ == 2 ? 1u : 2u);
  put_le32(header + 8, static_cast<uint32_t>(in_shard_));
  file_->write_at(0, header, sizeof header);
  file_->sync();
  file_->close();
  file_.reset();
  if (std::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) {
    const int err = errno;
    throw ConfigError(
        fmt::format("cannot rename '{}' to '{}': {}", tmp_path_, final_path_, std::strerror(err)));
  }
  io::sync_directory(dir_);
  written_.push_back(final_path_);
}

void ShardWriter::append(std::span<const uint32_t> tokens) {
  size_t i = 0;
  while (i < tokens.size()) {
    if (!file_) open_shard();
    const size_t n =
        std::min<size_t>(tokens.size() - i, static_cast<size_t>(shard_tokens_ - in_shard_));
    const size_t at = buf_.size();
    buf_.resize(at + n * static_cast<size_t>(token_bytes_));
    char* p = buf_.data() + at;
    if (token_bytes_ == 2) {
      for (size_t k = 0; k < n; ++k, p += 2) {
        const uint32_t t = tokens[i + k];
        p[0] = static_cast<char>(t & 0xFF);
        p[1] = static_cast<char>((t >> 8) & 0xFF);
      }
    } else {
      for (size_t k = 0; k < n; ++k, p += 4) put_le32(p, tokens[i + k]);
    }
    i += n;
    in_shard_ += static_cast<int64_t>(n);
    total_ += static_cast<int64_t>(n);
    if (buf_.size() >= kFlushBytes) flush();
    if (in_shard_ == shard_tokens_) close_shard();
  }
}

const std::vector<std::string>& ShardWriter::finish() {
  if (file_) close_shard();  // a shard is opened only to take tokens: never empty
  finished_ = true;
  return written_;
}

void ShardWriter::abort() noexcept {
  file_.reset();
  if (!tmp_path_.empty()) std::remove(tmp_path_.c_str());
  for (const auto& p : written_) std::remove(p.c_str());
  written_.clear();
  finished_ = true;
}

}  // namespace bw::dataprep
