// Shared by the dataprep tests: a scratch folder per test process, file writers, a small
// GPT-2-style tokenizer (tests/tokenizer/test_util.h) saved to disk, and a reader of llm.c
// shards.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"  // tests/tokenizer: tiny_tokenizer
#include "../scratch.h"

namespace bw::dataprep::testing {
namespace fs = std::filesystem;

inline std::string scratch() {
  static const std::string d = [] {
    return bw::testing::process_scratch("bw_dataprep").string();
  }();
  return d;
}

inline std::string write(const std::string& rel, const std::string& bytes) {
  const fs::path p = fs::path(scratch()) / rel;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tokenizer.json (GPT-2 style, or Llama 3 style) with ids shifted past 65535 when `wide`.
inline std::string tokenizer_file(bool llama3 = false, bool wide = false) {
  auto j = bw::tokenizer::testing::tiny_tokenizer(
      llama3 ? bw::tokenizer::testing::Style::kLlama3 : bw::tokenizer::testing::Style::kGpt2,
      bw::tokenizer::testing::sample_text(), 200);
  if (wide) {
    for (auto& [k, v] : j["model"]["vocab"].items()) v = v.get<int>() + 70000;
    j["added_tokens"] = nlohmann::json::array();
    j["model"]["vocab"]["<|endoftext|>"] = 69999;
    j["added_tokens"].push_back({{"id", 69999}, {"content", "<|endoftext|>"}, {"special", true}});
  }
  return write(fmt::format("tok_{}{}.json", llama3 ? "llama3" : "gpt2", wide ? "_wide" : ""),
               j.dump());
}

struct Shard {
  int version = 0;
  std::vector<uint32_t> tokens;
};

inline Shard read_shard(const std::string& path) {
  const std::string s = slurp(path);
  Shard out;
  EXPECT_GE(s.size(), 1024u) << path;
  if (s.size() < 1024) return out;
  int32_t h[3];
  std::memcpy(h, s.data(), 12);
  EXPECT_EQ(h[0], 20240520) << path;
  out.version = h[1];
  const size_t width = h[1] == 1 ? 2 : 4;
  EXPECT_EQ(s.size(), 1024 + static_cast<size_t>(h[2]) * width) << path;
  EXPECT_GE(s.find_first_not_of('\0', 12), size_t{1024}) << path << ": header past the count";
  for (size_t at = 1024; at + width <= s.size(); at += width) {
    uint32_t v = 0;
    std::memcpy(&v, s.data() + at, width);
    out.tokens.push_back(v);
  }
  return out;
}

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// Every regular file in `dir`, by name.
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace bw::dataprep::testing
