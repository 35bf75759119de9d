// The documents of `breakwater data prepare`'s inputs, streamed in bounded batches:
//   - a text file is one document (its bytes; invalid UTF-8 is repaired later, utf8.h);
//   - a JSONL file has one document per non-blank line, the string field "text" (FineWeb's
//     dumps); the line is parsed later, on the worker threads, and a bad line is reported as
//     file:line;
//   - a directory holds these: its *.txt and *.jsonl files, recursively, in name order (hidden
//     entries are skipped; other files are counted and skipped).
// A file named directly is JSONL when it ends in .jsonl and text otherwise. Empty text files and
// blank JSONL lines are no document. No document may exceed kMaxDocumentBytes.
//
// Thread-safety: a DocumentReader is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bw::dataprep {

inline constexpr int64_t kMaxDocumentBytes = int64_t{1} << 30;  // 1 GiB

struct InputFile {
  std::string path;
  bool jsonl = false;
  int64_t bytes = 0;
};

struct InputList {
  std::vector<InputFile> files;
  int64_t skipped_files = 0;  // in directories: not .txt or .jsonl
  int64_t total_bytes = 0;
};

// The files of `inputs` in order; ConfigError for a missing input, one that is not a regular
// file or directory (a FIFO, a device), or no file at all.
InputList list_inputs(const std::vector<std::string>& inputs);

// One document before parsing: a text file's bytes, or one JSONL line.
struct RawDocument {
  std::string bytes;
  uint32_t file = 0;  // index into InputList::files
  int64_t line = 0;   // 1-based line of a JSONL document; 0 for a text file
  bool jsonl = false;
};

class DocumentReader {
 public:
  explicit DocumentReader(const InputList& inputs);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // Replaces `batch` with the next documents, stopping once it holds max_bytes or max_docs;
  // false when there are no more.
  bool next_batch(std::vector<RawDocument>& batch, size_t max_bytes, size_t max_docs);

  int64_t bytes_read() const { return bytes_read_; }

 private:
  bool next(RawDocument& doc);  // one document; false at the end of all files
  bool open_next_file();
  bool fill();  // more bytes of the JSONL file into buf_; false at its end

  const InputList& inputs_;
  size_t next_file_ = 0;
  int fd_ = -1;
  uint32_t file_ = 0;
  int64_t line_ = 0;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t bytes_read_ = 0;
};

}  // namespace bw::dataprep
