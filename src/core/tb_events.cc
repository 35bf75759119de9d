// TensorBoard event files (see tb_events.h).
#include "core/tb_events.h"

#include <fmt/format.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/crc32c.h"
#include "core/error.h"

namespace bw::tb {
namespace {

// Protocol buffer wire format: a field's key is (number << 3) | wire type.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, uint32_t field, WireType type) { varint(out, (field << 3) | type); }

void bytes_field(std::string& out, uint32_t field, std::string_view bytes) {
  key(out, field, kLength);
  varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

template <typename T>
void fixed_field(std::string& out, uint32_t field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(raw, sizeof(T));
}

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string event(double wall_time, int64_t step, const std::string& summary) {
  std::string e;
  fixed_field(e, 1, wall_time);
  key(e, 2, kVarint);
  varint(e, static_cast<uint64_t>(step));
  bytes_field(e, 5, summary);
  return e;
}

std::string summary_of(const std::string& value) {
  std::string s;
  bytes_field(s, 1, value);
  return s;
}

}  // namespace

static_assert(std::endian::native == std::endian::little, "event files are little-endian");

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string record(std::string_view data) {
  std::string out;
  std::string len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, masked_crc32c(len.data(), len.size()), 4);
  out.append(data.data(), data.size());
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e;
  fixed_field(e, 1, wall_time);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  bytes_field(v, 1, tag);
  fixed_field(v, 2, value);
  return event(wall_time, step, summary_of(v));
}

std::string text_event(double wall_time, int64_t step, std::string_view tag,
                       std::string_view text) {
  std::string plugin;
  bytes_field(plugin, 1, "text");
  std::string metadata;
  bytes_field(metadata, 1, plugin);
  std::string dim;  // one string: shape [1]
  key(dim, 1, kVarint);
  varint(dim, 1);
  std::string shape;
  bytes_field(shape, 2, dim);
  std::string tensor;
  key(tensor, 1, kVarint);
  varint(tensor, 7);  // DT_STRING
  bytes_field(tensor, 2, shape);
  bytes_field(tensor, 8, text);
  std::string v;
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  return event(wall_time, step, summary_of(v));
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
std::string new_file_path(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create the TensorBoard folder '{}': {}; choose a "
                                  "writable train.out_dir or set train.tensorboard = false",
                                  dir, ec.message()));
  }
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}/events.out.tfevents.{:010d}.{}.{}", dir,
                     static_cast<int64_t>(wall_time_now()), host, ::getpid());
}
}  // namespace

EventFile::EventFile(const std::string& dir) : out_(new_file_path(dir), "TensorBoard event file") {
  out_.write(record(file_version_event(wall_time_now())));
}

void EventFile::scalar(int64_t step, std::string_view tag, double value) {
  out_.write(record(scalar_event(wall_time_now(), step, tag, static_cast<float>(value))));
}

void EventFile::text(int64_t step, std::string_view tag, std::string_view text) {
  out_.write(record(text_event(wall_time_now(), step, tag, text)));
}

}  // namespace bw::tb
