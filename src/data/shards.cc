// Sharded token datasets: a directory or a glob of llm.c `.bin` shards, read in name order as one
// token stream, as llm.c's dataloader reads `fineweb_train_*.bin`. Every shard is checked on open
// (magic, version, header count against file size) and all must have the same version.
#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/dataset.h"

namespace bw::data {
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> bin_files_in_directory(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || e.path().extension() != ".bin") continue;
    std::error_code ec2;
    if (e.is_regular_file(ec2)) files.push_back(e.path().string());
  }
  if (ec) throw ConfigError(fmt::format("cannot list data directory '{}': {}", dir, ec.message()));
  std::sort(files.begin(), files.end());
  // `data prepare` writes NAME_train_k.bin and NAME_val_k.bin into one folder: reading both as
  // one stream would train on the validation split.
  const bool train = std::any_of(files.begin(), files.end(),
                                 [](const std::string& f) { return contains(f, "_train_"); });
  const bool val = std::any_of(files.begin(), files.end(),
                               [](const std::string& f) { return contains(f, "_val_"); });
  if (train && val) {
    throw ConfigError(fmt::format(
        "data directory '{}' holds both training (*_train_*.bin) and validation (*_val_*.bin) "
        "shards; pass the training shards as --data.path='{}/*_train_*.bin'",
        dir, dir));
  }
  return files;
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && files.empty())) {
    throw ConfigError(fmt::format(
        "data path '{}' is a pattern that matches no file; check the folder and the pattern "
        "(llm.c's shards are named like DIR/NAME_train_*.bin)",
        pattern));
  }
  if (rc != 0) {
    throw ConfigError(
        fmt::format("cannot expand data path pattern '{}' (a folder is unreadable)", pattern));
  }
  // Byte order, not the locale's collation: the same order on every machine.
  std::sort(files.begin(), files.end());
  return files;
}

TokenDataset open_shards(const std::string& name, const std::vector<std::string>& files) {
  std::vector<TokenDataset> parts;
  parts.reserve(files.size());
  for (const auto& f : files) {
    std::error_code ec;
    if (fs::is_directory(f, ec)) {
      throw ConfigError(
          fmt::format("data path '{}' matches the directory '{}'; a pattern must "
                      "match .bin shards only",
                      name, f));
    }
    if (files.size() == 1) return TokenDataset::open(f);
    auto bytes = map_file(f);
    if (!has_token_bin_magic(*bytes)) {
      throw ConfigError(fmt::format(
          "data path '{}' matches '{}', which is not an llm.c .bin token file (no magic {}); "
          "a pattern or folder of shards must match token files only",
          name, f, kTokenBinMagic));
    }
    parts.push_back(open_token_bin(f, std::move(bytes)));
    if (parts.back().vocab_size() != parts.front().vocab_size()) {
      throw ConfigError(fmt::format(
          "data path '{}': shard '{}' is llm.c version {} but '{}' is version {}; all shards "
          "of one stream must have the same token width",
          name, f, parts.back().vocab_size() == kGpt2Vocab ? 1 : 2, files.front(),
          parts.front().vocab_size() == kGpt2Vocab ? 1 : 2));
    }
  }
  return TokenDataset::concat(name, parts);
}

}  // namespace bw::data
