// Layer profiles: the per-layer costs every planning decision is made from.
//
// A profile lists the model's layers in order with forward/backward time at one microbatch size,
// the activation bytes a layer keeps per microbatch until its backward, the bytes it sends to the
// next layer, and its parameter bytes. The JSON format is documented in docs/profiles.md; the
// loader is strict: a missing field, a negative value, a wrong type or zero layers is a
// ConfigError naming the layer and the field.
//
// Invariants after loading: at least one layer; every number finite and >= 0; when one of
// backward_input_ms / backward_weight_ms is given the other is too; at most kMaxProfileLayers
// layers; the model's forward + backward time is > 0.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace bw::plan {

// Limits checked by parse_profile (docs/profiles.md).
inline constexpr int kMaxProfileLayers = 4096;
inline constexpr int kMaxProfileMicrobatchSize = 1 << 20;

struct LayerProfile {
  std::string name;
  double forward_ms = 0;
  double backward_ms = 0;
  std::optional<double> backward_input_ms;  // zero-bubble split of backward (optional)
  std::optional<double> backward_weight_ms;
  double activation_bytes = 0;  // kept per microbatch until the layer's backward
  double output_bytes = 0;      // sent to the next layer per microbatch
  double param_bytes = 0;
};

struct Profile {
  std::string model;
  int microbatch_size = 1;
  std::optional<std::string> device;   // hint: where it was measured or for what it was made
  std::optional<std::string> cluster;  // hint
  std::vector<LayerProfile> layers;

  int num_layers() const { return static_cast<int>(layers.size()); }
};

// Parses and validates; `where` names the source in messages (a path).
Profile parse_profile(const json::Json& doc, const std::string& where = "profile");
Profile load_profile(const std::string& path);
json::Json to_json(const Profile& profile);
void save_profile(const std::string& path, const Profile& profile);

}  // namespace bw::plan
