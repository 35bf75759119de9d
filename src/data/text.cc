// Raw text datasets: one byte is one token (vocab 256). A directory reads as the concatenation of
// its plain files, which is how the default corpus (Debian's `fortunes` text) is read.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"

namespace bw::data {
namespace fs = std::filesystem;

namespace {

// Where Debian's `fortunes` package installs its text (the Filesystem Hierarchy Standard's place
// for game data), so it is the same on every Debian or Ubuntu machine.
constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

bool is_corpus_file(const fs::directory_entry& e) {
  std::string name = e.path().filename().string();
  if (name.empty() || name[0] == '.') return false;
  if (e.path().extension() == ".dat") return false;  // fortune's random-access index
  std::error_code ec;
  return !e.is_symlink(ec) && e.is_regular_file(ec);
}

std::vector<fs::path> corpus_files(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (is_corpus_file(e)) files.push_back(e.path());
  }
  if (ec) throw ConfigError(fmt::format("cannot list data directory '{}': {}", dir, ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TokenDataset open_text_directory(const std::string& path) {
  std::string text;
  for (const auto& f : corpus_files(path)) {
    const int64_t left = io::kMaxCorpusBytes - static_cast<int64_t>(text.size());
    text += io::read_file(f.string(), left, "data file (the corpus limit counts every file)");
  }
  if (text.empty()) {
    throw ConfigError(
        fmt::format("data directory '{}' holds no non-empty plain files (hidden "
                    "files, symlinks and *.dat are skipped)",
                    path));
  }
  return TokenDataset::from_text(path, std::move(text));
}

std::string default_corpus_path() {
  std::error_code ec;
  if (fs::is_directory(kFortunesDir, ec) && !corpus_files(kFortunesDir).empty()) {
    return kFortunesDir;
  }
  throw ConfigError(
      fmt::format("the default corpus (Debian's `fortunes` package, in {}) is not "
                  "installed; install it (scripts/setup.sh does) or pass "
                  "--data.path=FILE",
                  kFortunesDir));
}

}  // namespace bw::data
