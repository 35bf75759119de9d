// The mapped safetensors reader (runtime/safetensors_map.h) against load_safetensors: the same
// tensors bitwise and the same digest; and release() gives the pages back: after every tensor
// has been copied out and released, the mapping holds (almost) nothing of the file in the
// process's resident set, measured by the kernel (/proc/self/smaps). The corrupt-file cases run
// for both readers in checkpoint_test.cc.
#include "runtime/safetensors_map.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <torch/torch.h>

#include "../scratch.h"
#include "runtime/checkpoint.h"

namespace bw::runtime {
namespace {
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (bw::testing::process_scratch("bw_map_test") / name).string();
}

// Resident bytes of the process's mappings of `path`, from /proc/self/smaps.
int64_t mapped_rss_bytes(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int64_t kib = 0;
  while (std::getline(in, line)) {
    // A mapping's first line: "start-end perms offset dev inode   path".
    const bool header = !line.empty() && line.find('-') < line.find(' ') &&
                        line.find(':') > line.find(' ');
    if (header) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(),
                                                          path) == 0;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0) kib += std::stoll(line.substr(4));
  }
  return kib * 1024;
}

TEST(MappedSafetensors, ViewsAndDigestEqualTheReadFile) {
  NamedTensors tensors = {{"a", torch::randn({33, 7})},
                          {"empty", torch::zeros({0, 3})},
                          {"scalar", torch::tensor(int64_t{5})}};
  for (auto type : {torch::kFloat16, torch::kBFloat16, torch::kInt8, torch::kBool}) {
    tensors.emplace_back(std::string("t_") + c10::toString(type),
                         (torch::arange(30).reshape({5, 6}) % 3).to(type));
  }
  for (bool with_crc : {true, false}) {
    const std::string path = temp_path(fmt::format("views_{}.safetensors", with_crc));
    if (with_crc) {
      save_safetensors(path, tensors);
    } else {  // as other writers leave it: no "crc32c" in the metadata
      auto bytes = encode_safetensors(tensors);
      const auto at = bytes.find("\"crc32c\":\"");
      ASSERT_NE(at, std::string::npos);
      bytes[at + 1] = 'x';  // "xrc32c": an ordinary metadata key
      std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    }
    const auto read = load_safetensors(path);
    const MappedSafetensors mapped(path);
    ASSERT_EQ(mapped.layout().spans.size(), read.tensors.size());
    for (const auto& span : mapped.layout().spans) {
      const auto view = mapped.view(span);
      const auto& want = read.tensors.at(span.name);
      EXPECT_EQ(view.scalar_type(), want.scalar_type()) << span.name;
      EXPECT_TRUE(torch::equal(view, want)) << span.name;
      mapped.release(span);
      EXPECT_TRUE(torch::equal(view, want)) << span.name << " read again after release";
    }
    EXPECT_EQ(mapped.verify(), read.digest);
    EXPECT_EQ(mapped.layout().metadata, read.metadata);
  }
}

TEST(MappedSafetensors, ReleasedTensorsLeaveNothingResident) {
  // 16 MiB in 8 tensors, copied out one at a time.
  NamedTensors tensors;
  for (int i = 0; i < 8; ++i) tensors.emplace_back(fmt::format("w{}", i), torch::randn({512, 1024}));
  const std::string path = temp_path("rss.safetensors");
  save_safetensors(path, tensors);
  const int64_t file_bytes = static_cast<int64_t>(fs::file_size(path));
  const MappedSafetensors mapped(path);
  int64_t largest = 0;
  for (const auto& span : mapped.layout().spans) {
    auto copy = torch::empty(span.shape);
    copy.copy_(mapped.view(span));
    largest = std::max(largest, mapped_rss_bytes(path));
    mapped.release(span);
    EXPECT_TRUE(torch::equal(copy, std::find_if(tensors.begin(), tensors.end(), [&](auto& t) {
                                     return t.first == span.name;
                                   })->second));
  }
  // While copying, one tensor (2 MiB) and the pages around it are mapped in; after, none.
  const int64_t after = mapped_rss_bytes(path);
  EXPECT_LT(largest, file_bytes / 4) << "a copied tensor's pages stayed mapped in";
  EXPECT_LE(after, 2 * ::sysconf(_SC_PAGESIZE)) << "of " << file_bytes << " bytes mapped";
  mapped.verify();
  EXPECT_LE(mapped_rss_bytes(path), 2 * ::sysconf(_SC_PAGESIZE)) << "after verify()";
}

}  // namespace
}  // namespace bw::runtime
