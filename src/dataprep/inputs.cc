#include "dataprep/inputs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"

namespace bw::dataprep {
namespace {
namespace fs = std::filesystem;

constexpr size_t kReadBytes = size_t{4} << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void add_directory(const fs::path& dir, InputList& out) {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    entries.push_back(*it);
  if (ec)
    throw ConfigError(fmt::format("cannot list input folder '{}': {}", dir.string(), ec.message()));
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.path().filename().string() < b.path().filename().string();
  });
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code sec;
    const auto st = fs::status(e.path(), sec);  // symlinks followed
    if (sec) continue;
    if (fs::is_directory(st)) {
      add_directory(e.path(), out);
    } else if (fs::is_regular_file(st) && (ends_with(name, ".txt") || ends_with(name, ".jsonl"))) {
      const int64_t bytes = static_cast<int64_t>(fs::file_size(e.path(), sec));
      out.files.push_back({e.path().string(), ends_with(name, ".jsonl"), sec ? 0 : bytes});
    } else {
      ++out.skipped_files;
    }
  }
}

}  // namespace

InputList list_inputs(const std::vector<std::string>& inputs) {
  InputList out;
  if (inputs.empty()) throw ConfigError("no input given: name text files, JSONL files or folders");
  for (const std::string& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) != 0)
      throw ConfigError(fmt::format("cannot open input '{}': {}", in, std::strerror(errno)));
    if (S_ISDIR(st.st_mode)) {
      const size_t before = out.files.size();
      const int64_t skipped = out.skipped_files;
      add_directory(in, out);
      if (out.files.size() == before)
        throw ConfigError(
            fmt::format("input folder '{}' has no .txt or .jsonl files ({} other files skipped)",
                        in, out.skipped_files - skipped));
    } else {
      const int64_t bytes = io::require_regular_file(in, INT64_MAX, "input");
      out.files.push_back({in, ends_with(in, ".jsonl"), bytes});
    }
  }
  for (const auto& f : out.files) {
    // A text file is one document: refuse one over the limit now, not after hours of encoding.
    if (!f.jsonl && f.bytes > kMaxDocumentBytes)
      throw ConfigError(fmt::format(
          "text file '{}' has {}, more than the limit of {} for one document; split it, or make "
          "it a JSONL file of several documents",
          f.path, io::human_bytes(f.bytes), io::human_bytes(kMaxDocumentBytes)));
    out.total_bytes += f.bytes;
  }
  return out;
}

DocumentReader::DocumentReader(const InputList& inputs) : inputs_(inputs) {}

DocumentReader::~DocumentReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool DocumentReader::open_next_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  while (next_file_ < inputs_.files.size()) {
    file_ = static_cast<uint32_t>(next_file_++);
    const InputFile& f = inputs_.files[file_];
    if (!f.jsonl) return true;  // read whole in next()
    fd_ = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0)
      throw ConfigError(fmt::format("cannot open input '{}': {}", f.path, std::strerror(errno)));
    buf_.clear();
    pos_ = 0;
    eof_ = false;
    line_ = 0;
    return true;
  }
  return false;
}

bool DocumentReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buf_.size();
  buf_.resize(old + kReadBytes);
  ssize_t n;
  do {
    n = ::read(fd_, buf_.data() + old, kReadBytes);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    throw ConfigError(
        fmt::format("cannot read input '{}': {}", inputs_.files[file_].path, std::strerror(err)));
  }
  buf_.resize(old + static_cast<size_t>(n));
  bytes_read_ += n;
  if (n == 0) eof_ = true;
  return n > 0;
}

bool DocumentReader::next(RawDocument& doc) {
  while (true) {
    if (fd_ < 0) {
      if (!open_next_file()) return false;
      const InputFile& f = inputs_.files[file_];
      if (!f.jsonl) {
        std::string bytes = io::read_file(f.path, kMaxDocumentBytes, "text document");
        bytes_read_ += static_cast<int64_t>(bytes.size());
        if (bytes.empty()) continue;  // an empty file is no document
        doc = {std::move(bytes), file_, 0, false};
        return true;
      }
    }
    // The next line of the JSONL file.
    size_t nl;
    size_t from = pos_;  // bytes before `from` hold no newline: each byte is scanned once
    while ((nl = buf_.find('\n', from)) == std::string::npos) {
      const size_t scanned = buf_.size() - pos_;
      if (static_cast<int64_t>(scanned) > kMaxDocumentBytes)
        throw ConfigError(fmt::format("{}:{}: a line longer than the limit of {} for one document",
                                      inputs_.files[file_].path, line_ + 1,
                                      io::human_bytes(kMaxDocumentBytes)));
      if (!fill()) break;
      from = pos_ + scanned;
    }
    if (nl == std::string::npos && pos_ >= buf_.size()) {  // the end of this file
      ::close(fd_);
      fd_ = -1;
      continue;
    }
    const size_t end = nl == std::string::npos ? buf_.size() : nl;
    ++line_;
    std::string_view line(buf_.data() + pos_, end - pos_);
    pos_ = nl == std::string::npos ? buf_.size() : nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank
    doc = {std::string(line), file_, line_, true};
    return true;
  }
}

bool DocumentReader::next_batch(std::vector<RawDocument>& batch, size_t max_bytes,
                                size_t max_docs) {
  batch.clear();
  size_t bytes = 0;
  RawDocument doc;
  while (bytes < max_bytes && batch.size() < max_docs && next(doc)) {
    bytes += doc.bytes.size();
    batch.push_back(std::move(doc));
  }
  return !batch.empty();
}

}  // namespace bw::dataprep
