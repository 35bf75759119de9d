// TokenDataset storage and format dispatch. See dataset.h.
#include "data/dataset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
      token_bytes_(token_bytes),
      num_tokens_(num_tokens),
      vocab_size_(vocab_size) {
  BW_CHECK(token_bytes == 1 || token_bytes == 2 || token_bytes == 4, "token_bytes {}", token_bytes);
  BW_CHECK(offset >= 0 && offset + num_tokens * token_bytes <= bytes->size(),
           "{} tokens of {} bytes at offset {} overrun {} bytes", num_tokens, token_bytes, offset,
           bytes->size());
  const uint8_t* tokens = bytes->data() + offset;
  segments_ = std::make_shared<const std::vector<Segment>>(
      std::vector<Segment>{Segment{path_, std::move(bytes), tokens, 0, num_tokens}});
}

TokenDataset TokenDataset::concat(std::string name, const std::vector<TokenDataset>& parts) {
  BW_CHECK(!parts.empty(), "no parts for '{}'", name);
  TokenDataset out;
  out.path_ = std::move(name);
  out.format_ = parts[0].format_;
  out.token_bytes_ = parts[0].token_bytes_;
  out.vocab_size_ = parts[0].vocab_size_;
  std::vector<Segment> segments;
  for (const auto& p : parts) {
    BW_CHECK(p.token_bytes_ == out.token_bytes_ && p.format_ == out.format_,
             "parts of '{}' differ in format", out.path_);
    for (const auto& s : *p.segments_) {
      segments.push_back(s);
      segments.back().first = out.num_tokens_;
      out.num_tokens_ += s.num_tokens;
    }
  }
  out.segments_ = std::make_shared<const std::vector<Segment>>(std::move(segments));
  return out;
}

const TokenDataset::Segment& TokenDataset::segment_of(int64_t i) const {
  const auto& segs = *segments_;
  if (segs.size() == 1) return segs[0];
  // The last segment whose first token is <= i.
  auto it = std::upper_bound(segs.begin(), segs.end(), i,
                             [](int64_t v, const Segment& s) { return v < s.first; });
  return *(it - 1);
}

TokenDataset TokenDataset::with_vocab(int vocab, const std::string& source) const {
  if (format_ != Format::kTokenBin) {
    throw ConfigError(fmt::format(
        "data '{}' is raw text (one byte per token), so the tokenizer {} does not apply; turn "
        "the text into token shards with `breakwater data prepare --tokenizer {}`, or drop "
        "data.tokenizer",
        path_, source, source));
  }
  const int64_t most = int64_t{1} << (8 * token_bytes_);
  if (vocab < 1 || (token_bytes_ < 4 && vocab > most)) {
    throw ConfigError(fmt::format(
        "the tokenizer {} has {} ids but data '{}' holds {}-bit tokens (at most {} ids); "
        "prepare the data with this tokenizer (breakwater data prepare writes uint32 tokens "
        "where needed)",
        source, vocab, path_, 8 * token_bytes_, most));
  }
  TokenDataset out = *this;
  out.vocab_size_ = vocab;
  return out;
}

std::vector<std::string> TokenDataset::files() const {
  std::vector<std::string> out;
  for (const auto& s : *segments_) out.push_back(s.path);
  return out;
}

TokenDataset TokenDataset::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto shards = bin_files_in_directory(path);
    if (!shards.empty()) return open_shards(path, shards);
    return open_text_directory(path);
  }
  if (is_glob(path) && !std::filesystem::exists(path, ec)) {
    return open_shards(path, expand_glob(path));
  }
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

namespace {

int64_t read_token(const uint8_t* p, int token_bytes) {
  switch (token_bytes) {
    case 1:
      return p[0];
    case 2:
      return static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8);
    default:
      return static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8) |
             (static_cast<int64_t>(p[2]) << 16) | (static_cast<int64_t>(p[3]) << 24);
  }
}

}  // namespace

int64_t TokenDataset::token(int64_t i) const {
  BW_CHECK(i >= 0 && i < num_tokens_, "token {} out of range [0, {})", i, num_tokens_);
  const Segment& s = segment_of(i);
  return read_token(s.tokens + (i - s.first) * token_bytes_, token_bytes_);
}

std::string TokenDataset::content_digest() const {
  uint32_t crc = 0;
  for (const auto& s : *segments_) {
    crc = crc32c_extend(crc, s.tokens, static_cast<size_t>(s.num_tokens * token_bytes_));
  }
  return fmt::format("{} tokens of vocabulary {}, CRC-32C {}", num_tokens_, vocab_size_,
                     crc32c_hex(crc));
}

void TokenDataset::copy_tokens(int64_t first, int64_t count, int64_t* out) const {
  BW_CHECK(first >= 0 && count >= 0 && first + count <= num_tokens_,
           "tokens [{}, {}) out of range [0, {})", first, first + count, num_tokens_);
  int64_t k = 0;
  while (k < count) {
    const Segment& s = segment_of(first + k);
    const int64_t begin = first + k - s.first;
    const int64_t n = std::min(count - k, s.num_tokens - begin);
    const uint8_t* p = s.tokens + begin * token_bytes_;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = read_token(p + j * token_bytes_, token_bytes_);
      if (t >= vocab_size_) {
        const int64_t pos = begin + j;
        const int64_t header = s.tokens - s.bytes->data();
        throw ConfigError(
            fmt::format("data file '{}': token {} at position {} (byte offset {}) is outside the "
                        "vocabulary of {} tokens; the file is corrupt or not a "
                        "tokenization this model supports",
                        s.path, t, pos, header + pos * token_bytes_, vocab_size_));
      }
      out[k + j] = t;
    }
    k += n;
  }
}

}  // namespace bw::data
