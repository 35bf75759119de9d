// Files of the end-to-end elastic tests: a seeded corpus of random letters, and a finished run's
// metrics.jsonl read back as its step lines and its event lines.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace bw::testing {

// `dir`/corpus.txt: 20000 letters a-z drawn with `seed`, written once per directory.
inline std::string letters_corpus(const std::string& dir, unsigned seed) {
  const auto path = (std::filesystem::path(dir) / "corpus.txt").string();
  if (!std::filesystem::exists(path)) {
    std::ofstream out(path);
    std::mt19937 rng(seed);
    for (int i = 0; i < 20000; ++i) out << static_cast<char>('a' + rng() % 26);
  }
  return path;
}

struct RunMetrics {
  std::vector<nlohmann::json> steps, events;
};

// out_dir/metrics.jsonl, line by line (empty when the run wrote none).
inline RunMetrics read_run_metrics(const std::string& out_dir) {
  RunMetrics m;
  std::ifstream in(std::filesystem::path(out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    (j.contains("event") ? m.events : m.steps).push_back(std::move(j));
  }
  return m;
}

}  // namespace bw::testing
