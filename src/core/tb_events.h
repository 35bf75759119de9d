// TensorBoard event files, written without TensorFlow or protobuf: each file is a sequence of
// TFRecords (little-endian uint64 length, masked CRC-32C of the length, the bytes, masked
// CRC-32C of the bytes), each record one `tensorflow.Event` protocol buffer. Only the fields a
// scalar and a text summary need are encoded, by hand (field numbers from TensorBoard's
// event.proto, summary.proto and tensor.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//             SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }  PluginData { string plugin_name = 1; }
//   TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//                 repeated bytes string_val = 8; }
// The first record is the file version ("brain.Event:2"), as TensorBoard's own writers start.
// The tests read the files back with the `tensorboard` package's event reader.
//
// Thread-safety: an EventFile is used from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/file_io.h"

namespace bw::tb {

// TFRecord's checksum: CRC-32C rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord around `data`.
std::string record(std::string_view data);

// Encoded `tensorflow.Event`s.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
std::string text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text);

// Seconds since the epoch, as Event.wall_time holds it.
double wall_time_now();

class EventFile {
 public:
  // Creates `dir` (with its parents) and a new file `events.out.tfevents.<seconds>.<host>.<pid>`
  // in it, starting with the version record. An unwritable `dir` is a ConfigError naming it.
  explicit EventFile(const std::string& dir);
  void scalar(int64_t step, std::string_view tag, double value);
  void text(int64_t step, std::string_view tag, std::string_view text);
  const std::string& path() const { return out_.path(); }

 private:
  io::FileWriter out_;
};

}  // namespace bw::tb
