// A safetensors file mapped read-only (mmap) instead of read into memory: for weights that are
// copied once into their final home (a Hugging Face import, runtime/hf.h), where reading the file
// into tensors first would hold every weight twice. Layout and checks are those of
// load_safetensors (checkpoint.h): the file must be a regular file, and the header is checked
// (length, JSON, dtypes, overflow-safe shapes, offsets that tile the data buffer exactly) before
// any tensor is touched; a failure is a ConfigError naming the file and the numbers.
//
// Memory: a mapped page counts in the process's resident set only while it is mapped in; the
// owner copies a tensor out of view() and then calls release(), which drops the tensor's pages
// from the process (they stay in the kernel's page cache for the next reader). Read this way, a
// whole file never adds more than one tensor to the resident set. verify() reads every byte the
// same way, a page window at a time.
//
// Integrity: the data CRC-32C that save_safetensors records ("crc32c" in the metadata) is checked
// by verify(), which also returns the whole file's digest; files of other writers carry none and
// verify() then only computes the digest. The file must not shrink while mapped (a read past its
// new end is SIGBUS, as for any mapping).
//
// Thread-safety: view(), release() and verify() may be called from several threads at once (the
// mapping is read-only; a released page is mapped in again on the next read).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "runtime/checkpoint_format.h"

namespace bw::runtime {

// The scalar type of a dtype safetensors_dtype_bytes knows ("F32" -> kFloat32); defined beside
// the other dtype tables in checkpoint.cc.
at::ScalarType safetensors_scalar_type(const std::string& dtype);

class MappedSafetensors {
 public:
  explicit MappedSafetensors(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return file_bytes_; }
  const SafetensorsLayout& layout() const { return layout_; }

  // The span's tensor (its dtype and shape), a CPU view of the mapped bytes: never write to it,
  // and keep this object alive while it is used.
  at::Tensor view(const SafetensorsSpan& span) const;
  // Drops the pages of the span from this process (see the top comment).
  void release(const SafetensorsSpan& span) const;
  // Reads the whole file: ConfigError when the data's CRC-32C differs from the one the header
  // records; the whole file's size and CRC-32C.
  FileDigest verify() const;

 private:
  void release_bytes(int64_t begin, int64_t end) const;  // file offsets

  std::string path_;
  int64_t file_bytes_ = 0;
  int64_t data_start_ = 0;  // 8 + header length
  const unsigned char* base_ = nullptr;
  SafetensorsLayout layout_;
};

}  // namespace bw::runtime
