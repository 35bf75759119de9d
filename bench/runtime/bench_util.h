// Helpers shared by the runtime benchmarks.
#pragma once

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace bw::bench {

// The middle element (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The default corpus, or, where it is not installed, a generated one in `dir` made of `line`
// followed by a counter.
inline std::string corpus_or_generated(const std::filesystem::path& dir, const std::string& line) {
  try {
    return data::default_corpus_path();
  } catch (const std::exception&) {
    const auto path = (dir / "corpus.txt").string();
    std::ofstream out(path);
    for (int i = 0; i < 200000; ++i) out << line << ' ' << i % 97 << "\n";
    return path;
  }
}

}  // namespace bw::bench
