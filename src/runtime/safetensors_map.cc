// A safetensors file mapped read-only (see safetensors_map.h).
#include "runtime/safetensors_map.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <torch/torch.h>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "runtime/checkpoint.h"

namespace bw::runtime {
namespace {

// verify() reads and releases this many bytes at a time.
constexpr int64_t kVerifyWindowBytes = int64_t{64} << 20;

int64_t page_bytes() {
  static const int64_t p = ::sysconf(_SC_PAGESIZE);
  return p;
}

}  // namespace

MappedSafetensors::MappedSafetensors(const std::string& path) : path_(path) {
  file_bytes_ =
      io::require_regular_file(path, std::numeric_limits<int64_t>::max(), "checkpoint file");
  if (file_bytes_ < 8) {
    const unsigned char none[8] = {};
    safetensors_header_length(none, file_bytes_, path);  // throws: too short
  }
  // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, open does not block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw ConfigError(fmt::format("cannot open checkpoint file '{}': {}", path,
                                  std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != file_bytes_) {
    ::close(fd);
    throw ConfigError(fmt::format("checkpoint file '{}' changed while it was opened", path));
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(file_bytes_), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (addr == MAP_FAILED) {
    throw ConfigError(fmt::format("cannot map checkpoint file '{}': {}", path, std::strerror(err)));
  }
  base_ = static_cast<const unsigned char*>(addr);
  try {
    const uint64_t n = safetensors_header_length(base_, file_bytes_, path);
    data_start_ = 8 + static_cast<int64_t>(n);
    layout_ = parse_safetensors_header(
        std::string_view(reinterpret_cast<const char*>(base_) + 8, n), file_bytes_ - data_start_,
        path);
    for (const auto& s : layout_.spans) {
      BW_CHECK(safetensors_dtype_bytes(s.dtype) == s.elem_bytes, "dtype {} of {} bytes", s.dtype,
               s.elem_bytes);
    }
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(base_), static_cast<size_t>(file_bytes_));
    throw;
  }
  // The header is read; the data is read a tensor at a time, mostly in file order.
  release_bytes(0, data_start_);
}

MappedSafetensors::~MappedSafetensors() {
  ::munmap(const_cast<unsigned char*>(base_), static_cast<size_t>(file_bytes_));
}

torch::Tensor MappedSafetensors::view(const SafetensorsSpan& span) const {
  BW_CHECK(span.begin >= 0 && span.end <= file_bytes_ - data_start_, "span [{}, {}) of {}",
           span.begin, span.end, path_);
  void* p = const_cast<unsigned char*>(base_ + data_start_ + span.begin);
  // Ask for the pages ahead of the copy (read-ahead from disk when they are not cached).
  if (span.end > span.begin) {
    const int64_t first = (data_start_ + span.begin) / page_bytes() * page_bytes();
    ::madvise(const_cast<unsigned char*>(base_ + first),
              static_cast<size_t>(data_start_ + span.end - first), MADV_WILLNEED);
  }
  return torch::from_blob(p, span.shape,
                          torch::TensorOptions().dtype(safetensors_scalar_type(span.dtype)));
}

void MappedSafetensors::release_bytes(int64_t begin, int64_t end) const {
  // Whole pages around [begin, end): a neighbour's page dropped too is only read again.
  const int64_t page = page_bytes();
  const int64_t first = begin / page * page;
  const int64_t last = std::min<int64_t>((end + page - 1) / page * page, file_bytes_);
  if (last > first) {
    ::madvise(const_cast<unsigned char*>(base_ + first), static_cast<size_t>(last - first),
              MADV_DONTNEED);
  }
}

void MappedSafetensors::release(const SafetensorsSpan& span) const {
  release_bytes(data_start_ + span.begin, data_start_ + span.end);
}

FileDigest MappedSafetensors::verify() const {
  const uint32_t head_crc = crc32c(base_, static_cast<size_t>(data_start_));
  const int64_t data_bytes = file_bytes_ - data_start_;
  uint32_t data_crc = 0;
  for (int64_t at = 0; at < data_bytes; at += kVerifyWindowBytes) {
    const int64_t n = std::min(kVerifyWindowBytes, data_bytes - at);
    data_crc = crc32c_extend(data_crc, base_ + data_start_ + at, static_cast<size_t>(n));
    release_bytes(data_start_ + at, data_start_ + at + n);
  }
  release_bytes(0, data_start_);
  if (auto it = layout_.metadata.find(kDataCrcKey); it != layout_.metadata.end()) {
    if (it->second != crc32c_hex(data_crc)) {
      safetensors_corrupt(path_,
                          fmt::format("the data's CRC-32C is {} but the header records {} (the "
                                      "file was damaged after it was written)",
                                      crc32c_hex(data_crc), it->second));
    }
  }
  return {file_bytes_, crc32c_combine(head_crc, data_crc, static_cast<size_t>(data_bytes))};
}

}  // namespace bw::runtime
