// bw_tokenizer_encode TOKENIZER DOCS [--threads N] [--repeat R]: encodes the documents of DOCS
// (the "BWCORPUS" format of tests/tokenizer/oracle.py) R times with Tokenizer::encode_batch on N
// threads (0: all), and prints one JSON line: documents, bytes, tokens, the best seconds of the
// R runs, tokens/s, and a checksum of the ids that compare.py matches against `tokenizers`'.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> read_docs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  if (s.size() < 12 || s.compare(0, 8, "BWCORPUS") != 0)
    throw bw::ConfigError(fmt::format("'{}' is not a BWCORPUS file", path));
  size_t at = 8;
  const auto u32 = [&] {
    uint32_t v;
    std::memcpy(&v, s.data() + at, 4);
    at += 4;
    return v;
  };
  std::vector<std::string> docs(u32());
  for (auto& d : docs) {
    const uint32_t n = u32();
    d = s.substr(at, n);
    at += n;
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER DOCS [--threads N] [--repeat R]\n", argv[0]);
    return 2;
  }
  int threads = 1, repeat = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
  }
  try {
    const auto tok = bw::tokenizer::Tokenizer::from_file(argv[1]);
    const auto docs = read_docs(argv[2]);
    std::vector<std::string_view> views(docs.begin(), docs.end());
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();
    double best = 1e30;
    size_t tokens = 0;
    uint64_t checksum = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok.encode_batch(views, threads);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      tokens = 0;
      checksum = 0;
      for (const auto& v : ids) {
        tokens += v.size();
        for (uint32_t id : v) checksum = checksum * 1000003u + id;
      }
    }
    fmt::print(
        "{{\"documents\": {}, \"bytes\": {}, \"tokens\": {}, \"seconds\": {:.6f}, "
        "\"tokens_per_s\": {:.0f}, \"checksum\": {}}}\n",
        docs.size(), bytes, tokens, best, tokens / best, checksum);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
