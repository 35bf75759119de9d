// TokenDataset storage and format dispatch. See dataset.h.
#include "data/dataset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace bw::data {
namespace {

class MappedFile : public ByteSource {
 public:
  MappedFile(void* addr, int64_t size) : addr_(addr), size_(size) {}
  ~MappedFile() override { ::munmap(addr_, static_cast<size_t>(size_)); }
  const uint8_t* data() const override { return static_cast<const uint8_t*>(addr_); }
  int64_t size() const override { return size_; }

 private:
  void* addr_;
  int64_t size_;
};

class StringBytes : public ByteSource {
 public:
  explicit StringBytes(std::string s) : s_(std::move(s)) {}
  const uint8_t* data() const override { return reinterpret_cast<const uint8_t*>(s_.data()); }
  int64_t size() const override { return static_cast<int64_t>(s_.size()); }

 private:
  std::string s_;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<const ByteSource> map_file(const std::string& path) {
  // stat before open: opening a FIFO would block until a writer comes.
  struct stat pre {};
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode)) {
    throw ConfigError(fmt::format(
        "data path '{}' is not a regular file (a FIFO, device or socket); pass a file with "
        "--data.path=FILE",
        path));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw ConfigError(
        fmt::format("cannot open data file '{}': {}; pass an existing file with "
                    "--data.path=FILE",
                    path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(fmt::format("data path '{}' is not a regular file", path));
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw ConfigError(fmt::format("data file '{}' is empty (0 bytes)", path));
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) {
    throw ConfigError(fmt::format("cannot map data file '{}' ({} bytes): {}", path,
                                  static_cast<int64_t>(st.st_size), std::strerror(err)));
  }
  return std::make_shared<MappedFile>(addr, static_cast<int64_t>(st.st_size));
}

TokenDataset::TokenDataset(std::string path, Format format, std::shared_ptr<const ByteSource> bytes,
                           int64_t offset, int token_bytes, int64_t num_tokens, int vocab_size)
    : path_(std::move(path)),
      format_(format),
      bytes_(std::move(bytes)),
      tokens_(bytes_->data() + offset),
      token_bytes_(token_bytes),
      num_tokens_(num_tokens),
      vocab_size_(vocab_size) {
  BW_CHECK(token_bytes == 1 || token_bytes == 2 || token_bytes == 4, "token_bytes {}", token_bytes);
  BW_CHECK(offset >= 0 && offset + num_tokens * token_bytes <= bytes_->size(),
           "{} tokens of {} bytes at offset {} overrun {} bytes", num_tokens, token_bytes, offset,
           bytes_->size());
}

TokenDataset TokenDataset::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return open_text_directory(path);
  auto bytes = map_file(path);
  if (has_token_bin_magic(*bytes) || ends_with(path, ".bin")) return open_token_bin(path, bytes);
  int64_t n = bytes->size();
  return TokenDataset(path, Format::kText, std::move(bytes), 0, 1, n, kTextVocab);
}

TokenDataset TokenDataset::from_text(std::string name, std::string text) {
  if (text.empty()) throw ConfigError(fmt::format("data '{}' is empty (0 bytes)", name));
  auto bytes = std::make_shared<StringBytes>(std::move(text));
  int64_t n = bytes->size();
  return TokenDataset(std::move(name), Format::kText, std::move(bytes), 0, 1, n, kTextVocab);
}

int64_t TokenDataset::token(int64_t i) const {
  BW_CHECK(i >= 0 && i < num_tokens_, "token {} out of range [0, {})", i, num_tokens_);
  const uint8_t* p = tokens_ + i * token_bytes_;
  switch (token_bytes_) {
    case 1:
      return p[0];
    case 2:
      return static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8);
    default:
      return static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8) |
             (static_cast<int64_t>(p[2]) << 16) | (static_cast<int64_t>(p[3]) << 24);
  }
}

std::string TokenDataset::content_digest() const {
  const uint32_t crc = crc32c(tokens_, static_cast<size_t>(num_tokens_ * token_bytes_));
  return fmt::format("{} tokens of vocabulary {}, CRC-32C {}", num_tokens_, vocab_size_,
                     crc32c_hex(crc));
}

void TokenDataset::copy_tokens(int64_t first, int64_t count, int64_t* out) const {
  BW_CHECK(first >= 0 && count >= 0 && first + count <= num_tokens_,
           "tokens [{}, {}) out of range [0, {})", first, first + count, num_tokens_);
  for (int64_t k = 0; k < count; ++k) {
    int64_t t = token(first + k);
    if (t >= vocab_size_) {
      throw ConfigError(
          fmt::format("data file '{}': token {} at position {} is outside the "
                      "vocabulary of {} tokens; the file is corrupt or not a "
                      "tokenization this model supports",
                      path_, t, first + k, vocab_size_));
    }
    out[k] = t;
  }
}

}  // namespace bw::data
