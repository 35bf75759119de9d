// Checkpoint I/O: the safetensors bytes follow the format (header length, JSON header, 8-byte
// alignment, contiguous offsets, little-endian C-order data), checked by parsing the raw bytes
// here; round trips over dtypes and shapes; truncated or corrupt files are ConfigErrors; sidecars
// round-trip.
#include "runtime/checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <torch/torch.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "runtime/safetensors_map.h"
#include "../scratch.h"

namespace bw::runtime {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string temp_path(const std::string& name) {
  return (bw::testing::process_scratch("bw_checkpoint_test") / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

NamedTensors sample_tensors() {
  torch::manual_seed(3);
  return {{"layers.0.wte.weight", torch::randn({5, 3})},
          {"b_step", torch::tensor(int64_t{42})},    // I64 scalar
          {"layers.1.ln1.bias", torch::randn({7})},  // 28 bytes: odd multiple of 4
          {"idx", torch::arange(6, torch::kInt64).reshape({2, 3})},
          {"empty", torch::zeros({0, 4})},
          {"transposed", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()}};
}

TEST(Safetensors, ByteLayoutFollowsTheFormat) {
  std::string path = temp_path("layout.safetensors");
  NamedTensors tensors = sample_tensors();
  save_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
  std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  std::string header_text = bytes.substr(8, n);
  EXPECT_EQ(header_text.front(), '{');
  EXPECT_EQ(header_text.find_last_not_of(' '), header_text.rfind('}')) << "padding is spaces";
  Json header = Json::parse(header_text);
  // The caller's metadata, and the CRC-32C of the data buffer breakwater adds.
  const std::string data(bytes.data() + 8 + n, bytes.size() - 8 - n);
  EXPECT_EQ(header["__metadata__"],
            (Json{{"format", "pt"}, {"step", "12"}, {"crc32c", crc32c_hex(crc32c(data.data(),
                                                                                 data.size()))}}));
  const uint64_t data_start = 8 + n;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(header.contains(name));
    const Json& e = header[name];
    torch::Tensor c = t.contiguous();
    EXPECT_EQ(e["dtype"], t.scalar_type() == torch::kInt64 ? "I64" : "F32");
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.sizes().vec());
    int64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    EXPECT_EQ(end - begin, c.numel() * c.element_size());
    EXPECT_EQ((data_start + begin) % c.element_size(), 0u) << "tensor data aligned to its dtype";
    EXPECT_EQ(std::memcmp(bytes.data() + data_start + begin, c.data_ptr(), end - begin), 0)
        << "raw data is the C-order little-endian values";
    spans.emplace_back(begin, end);
  }
  EXPECT_EQ(header.size(), tensors.size() + 1);
  std::sort(spans.begin(), spans.end());
  int64_t covered = 0;
  for (auto [b, e] : spans) {
    EXPECT_EQ(b, covered) << "offsets must tile the buffer";
    covered = e;
  }
  EXPECT_EQ(static_cast<uint64_t>(covered), bytes.size() - data_start);
  // The transposed tensor was written in C order of its logical shape [3, 2].
  const Json& tr = header["transposed"];
  float first_row[2];
  std::memcpy(first_row, bytes.data() + data_start + tr["data_offsets"][0].get<int64_t>(), 8);
  EXPECT_EQ(first_row[0], 0.0f);
  EXPECT_EQ(first_row[1], 3.0f);
}

TEST(Safetensors, RoundTripsDtypesAndShapes) {
  NamedTensors tensors = sample_tensors();
  for (auto type : {torch::kFloat64, torch::kFloat16, torch::kBFloat16, torch::kInt32,
                    torch::kInt16, torch::kInt8, torch::kUInt8, torch::kBool}) {
    tensors.emplace_back(std::string("t_") + c10::toString(type),
                         (torch::arange(24).reshape({2, 3, 4}) % 5).to(type));
  }
  for (int k : {0, 1, 3}) {  // also a lone odd-sized tensor and an empty file body
    NamedTensors subset(tensors.begin(), tensors.begin() + (k == 0 ? tensors.size() : k - 1));
    std::string path = temp_path(fmt::format("round_{}.safetensors", k));
    save_safetensors(path, subset,
                     k == 3 ? std::map<std::string, std::string>{}
                            : std::map<std::string, std::string>{{"k", "v"}});
    SafetensorsFile f = load_safetensors(path);
    ASSERT_EQ(f.tensors.size(), subset.size());
    for (const auto& [name, t] : subset) {
      ASSERT_TRUE(f.tensors.count(name)) << name;
      const torch::Tensor& got = f.tensors.at(name);
      EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
      EXPECT_EQ(got.sizes(), t.sizes()) << name;
      EXPECT_TRUE(torch::equal(got, t.contiguous())) << name;
    }
    EXPECT_EQ(f.metadata.size(), k == 3 ? 1u : 2u);  // + "crc32c"
    EXPECT_EQ(f.digest.bytes, static_cast<int64_t>(fs::file_size(path)));
  }
}

// Both readers run every check: load_safetensors, and the mapped reader (safetensors_map.h) whose
// constructor checks the header and whose verify() reads the data.
class SafetensorsReaders : public ::testing::TestWithParam<bool> {
 protected:
  void load(const std::string& path) const {
    if (GetParam()) {
      MappedSafetensors mapped(path);
      mapped.verify();
    } else {
      load_safetensors(path);
    }
  }
};

TEST_P(SafetensorsReaders, TruncatedAndCorruptFilesAreConfigErrors) {
  std::string path = temp_path("good.safetensors");
  save_safetensors(path, sample_tensors());
  std::string good = read_bytes(path);
  std::string bad = temp_path("bad.safetensors");
  // Every truncation point fails cleanly.
  for (size_t cut :
       {size_t{0}, size_t{5}, size_t{8}, size_t{20}, good.size() / 2, good.size() - 1}) {
    write_bytes(bad, good.substr(0, cut));
    std::string m = error_of([&] { load(bad); });
    EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << "cut " << cut << ": " << m;
    EXPECT_NE(m.find("truncated or corrupt"), std::string::npos) << "cut " << cut << ": " << m;
  }
  // A trailing extra byte is a hole at the end.
  write_bytes(bad, good + "x");
  EXPECT_NE(error_of([&] { load(bad); }).find("cover"), std::string::npos);
  // A huge header length.
  std::string huge = good;
  huge[7] = '\x7f';
  write_bytes(bad, huge);
  EXPECT_NE(error_of([&] { load(bad); }).find("header length"), std::string::npos);
  // Broken JSON, an unknown dtype, and offsets that disagree with the shape.
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(good[i])) << (8 * i);
  auto with_header = [&](std::string header) {
    header.resize(n, ' ');
    return good.substr(0, 8) + header + good.substr(8 + n);
  };
  std::string header = good.substr(8, n);
  write_bytes(bad, with_header("{\"a\": "));
  EXPECT_NE(error_of([&] { load(bad); }).find("JSON"), std::string::npos);
  std::string dtype = header;
  dtype.replace(dtype.find("\"F32\""), 5, "\"F99\"");
  write_bytes(bad, with_header(dtype));
  EXPECT_NE(error_of([&] { load(bad); }).find("F99"), std::string::npos);
  Json h = Json::parse(header);
  h["idx"]["shape"] = {3, 3};
  write_bytes(bad, with_header(h.dump()));
  EXPECT_NE(error_of([&] { load(bad); }).find("'idx'"), std::string::npos);
  EXPECT_NE(error_of([&] { load(temp_path("missing.safetensors")); }).find("missing"),
            std::string::npos);
  // A shape whose size overflows, and offsets past the file, fail before any allocation.
  auto with_new_header = [&](std::string text) {
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    return len + text + good.substr(8 + n);
  };
  h = Json::parse(header);
  h["idx"]["shape"] = {uint64_t{1} << 62, uint64_t{1} << 62};
  write_bytes(bad, with_new_header(h.dump()));
  EXPECT_NE(error_of([&] { load(bad); }).find("overflows"), std::string::npos);
  h = Json::parse(header);
  h["idx"]["data_offsets"] = {0, uint64_t{1} << 60};
  write_bytes(bad, with_new_header(h.dump()));
  EXPECT_NE(error_of([&] { load(bad); }).find("outside"), std::string::npos);
  // A flipped bit in the data is found by the CRC in the header.
  std::string flipped = good;
  flipped.back() ^= 0x01;
  write_bytes(bad, flipped);
  EXPECT_NE(error_of([&] { load(bad); }).find("CRC-32C"), std::string::npos);
  // Not a regular file.
  EXPECT_NE(error_of([&] { load("/dev/zero"); }).find("character device"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Safetensors, SafetensorsReaders, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Mapped" : "Read"; });

TEST(Sidecar, RoundTripsAndRejectsForeignFiles) {
  CheckpointInfo info;
  info.step = 40;
  info.next_sample = 1280;
  info.weights = "step_40.safetensors";
  info.optimizer = "step_40.optim.safetensors";
  info.config_toml = "[train]\nsteps = 100\n";
  info.extra = {{"generation", 3}, {"plan", {2, 3}}};
  info.files = {{info.weights, {1234, 0xE3069283u}}, {info.optimizer, {5678, 0x1u}}};
  std::string path = temp_path("ckpt.json");
  write_sidecar(path, info);
  EXPECT_EQ(read_sidecar(path), info);
  EXPECT_EQ(beside(path, info.weights), (fs::path(path).parent_path() / info.weights).string());
  EXPECT_EQ(beside(path, "/abs/w.safetensors"), "/abs/w.safetensors");
  EXPECT_EQ(checkpoint_tensor_name(3, "attn.qkv.weight"), "layers.3.attn.qkv.weight");

  std::string other = temp_path("other.json");
  write_bytes(other, "{\"step\": 1}");
  EXPECT_NE(error_of([&] { read_sidecar(other); }).find("not a breakwater checkpoint"),
            std::string::npos);
  Json doc = Json::parse(read_bytes(path));
  doc["version"] = 3;
  write_bytes(other, doc.dump());
  EXPECT_NE(error_of([&] { read_sidecar(other); }).find("version 3"), std::string::npos);
  doc["version"] = 2;
  doc["files"].erase(info.optimizer);
  write_bytes(other, doc.dump());
  EXPECT_NE(error_of([&] { read_sidecar(other); }).find("no digest"), std::string::npos);
  doc["files"][info.optimizer] = {{"bytes", 1}, {"crc32c", "xyz"}};
  write_bytes(other, doc.dump());
  EXPECT_NE(error_of([&] { read_sidecar(other); }).find("8 hex digits"), std::string::npos);
  // Version 1 (before checksums) still reads, with no digests.
  doc["version"] = 1;
  doc.erase("files");
  write_bytes(other, doc.dump());
  EXPECT_TRUE(read_sidecar(other).files.empty());
  doc.erase("next_sample");
  write_bytes(other, doc.dump());
  EXPECT_NE(error_of([&] { read_sidecar(other); }).find("next_sample"), std::string::npos);
}

// In memory (shards and resume state over the network): the bytes are those of the file, and
// decoding runs the file reader's checks.
TEST(SafetensorsMemory, EncodeIsTheFileAndDecodeChecksItsBytes) {
  const NamedTensors tensors = {{"layers.0.w", torch::randn({3, 5})},
                                {"layers.0.step", torch::tensor(int64_t{7})},
                                {"layers.1.b", torch::arange(10, torch::kInt32)}};
  const auto path = temp_path("memory.safetensors");
  const FileDigest on_disk = save_safetensors(path, tensors, {{"step", "4"}}, false);
  FileDigest in_memory;
  const std::string bytes = encode_safetensors(tensors, {{"step", "4"}}, &in_memory);
  EXPECT_EQ(bytes, read_bytes(path));
  EXPECT_EQ(in_memory, on_disk);
  const auto file = decode_safetensors(bytes, "memory");
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(file.tensors.at(name), t)) << name;
  EXPECT_EQ(file.metadata.at("step"), "4");
  EXPECT_EQ(file.digest, on_disk);
  // A flipped data byte and a truncation are found, as in a file.
  std::string damaged = bytes;
  damaged[damaged.size() - 3] ^= 0x10;
  EXPECT_NE(error_of([&] { decode_safetensors(damaged, "shard 2"); }).find("'shard 2'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_safetensors(damaged, "x"); }).find("CRC-32C"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_safetensors(bytes.substr(0, bytes.size() - 8), "x"); })
                .find("truncated or corrupt"),
            std::string::npos);
}

}  // namespace
}  // namespace bw::runtime
