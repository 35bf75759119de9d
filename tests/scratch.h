// Scratch directories of a test process, removed when it exits (kept when BW_KEEP_TEST_FILES is
// set, for debugging), so that a test suite leaves nothing in the temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bw::testing {

// Creates `path` and removes it, with what is in it, at exit.
inline std::string scratch_dir(const std::string& path) {
  struct Remover {
    std::string path;
    ~Remover() {
      if (std::getenv("BW_KEEP_TEST_FILES") == nullptr) {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    }
  };
  static std::vector<std::unique_ptr<Remover>> removers;
  std::filesystem::create_directories(path);
  removers.push_back(std::make_unique<Remover>());
  removers.back()->path = path;
  return path;
}

// This process's own folder `<temporary folder>/<prefix>_<pid>`, empty when first asked for and
// removed at exit.
inline std::filesystem::path process_scratch(const std::string& prefix) {
  static std::vector<std::pair<std::string, std::filesystem::path>> made;
  for (const auto& [p, path] : made)
    if (p == prefix) return path;
  const auto path = std::filesystem::path(::testing::TempDir()) /
                    (prefix + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(path);
  scratch_dir(path.string());
  made.emplace_back(prefix, path);
  return path;
}

}  // namespace bw::testing
