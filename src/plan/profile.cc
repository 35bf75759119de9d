#include "plan/profile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace bw::plan {
namespace {

const std::vector<std::string> kTopKeys = {"model", "microbatch_size", "device", "cluster",
                                           "layers"};
const std::vector<std::string> kLayerKeys = {"name",
                                             "forward_ms",
                                             "backward_ms",
                                             "backward_input_ms",
                                             "backward_weight_ms",
                                             "activation_bytes",
                                             "output_bytes",
                                             "param_bytes"};

void reject_unknown(const json::Json& obj, const std::vector<std::string>& known,
                    const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == it.key();
    if (!ok) {
      throw ConfigError(fmt::format("{}: unknown field '{}' (known: {})", where, it.key(),
                                    fmt::join(known, ", ")));
    }
  }
}

}  // namespace

Profile parse_profile(const json::Json& doc, const std::string& where) {
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  reject_unknown(doc, kTopKeys, where);
  Profile p;
  p.model = json::get_string(doc, "model", where);
  long long mbs =
      json::get_int_in(doc, "microbatch_size", where, 1, kMaxProfileMicrobatchSize);
  p.microbatch_size = static_cast<int>(mbs);
  if (doc.contains("device")) p.device = json::get_string(doc, "device", where);
  if (doc.contains("cluster")) p.cluster = json::get_string(doc, "cluster", where);
  if (!doc.contains("layers")) throw ConfigError(fmt::format("{}: missing field 'layers'", where));
  const auto& layers = doc.at("layers");
  if (!layers.is_array())
    throw ConfigError(
        fmt::format("{}: field 'layers' must be an array, got {}", where, layers.type_name()));
  if (layers.empty())
    throw ConfigError(
        fmt::format("{}: 'layers' is empty; a profile needs at least one layer", where));
  if (layers.size() > static_cast<size_t>(kMaxProfileLayers))
    throw ConfigError(fmt::format("{}: {} layers, more than the limit of {}", where,
                                  layers.size(), kMaxProfileLayers));
  double total_ms = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    std::string lw = fmt::format("{}: layer {}", where, i);
    if (!l.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", lw));
    reject_unknown(l, kLayerKeys, lw);
    LayerProfile lp;
    lp.name = json::get_string(l, "name", lw);
    lw = fmt::format("{}: layer {} ('{}')", where, i, lp.name);
    lp.forward_ms = json::get_non_negative(l, "forward_ms", lw);
    lp.backward_ms = json::get_non_negative(l, "backward_ms", lw);
    bool has_i = l.contains("backward_input_ms"), has_w = l.contains("backward_weight_ms");
    if (has_i != has_w) {
      throw ConfigError(
          fmt::format("{}: give both 'backward_input_ms' and 'backward_weight_ms' or neither", lw));
    }
    if (has_i) {
      lp.backward_input_ms = json::get_non_negative(l, "backward_input_ms", lw);
      lp.backward_weight_ms = json::get_non_negative(l, "backward_weight_ms", lw);
    }
    lp.activation_bytes = json::get_non_negative(l, "activation_bytes", lw);
    lp.output_bytes = json::get_non_negative(l, "output_bytes", lw);
    lp.param_bytes = json::get_non_negative(l, "param_bytes", lw);
    total_ms += lp.forward_ms + lp.backward_ms;
    p.layers.push_back(std::move(lp));
  }
  if (!(total_ms > 0) || !std::isfinite(total_ms))
    throw ConfigError(fmt::format(
        "{}: every layer has forward_ms = backward_ms = 0 (or the sum overflows); a profile needs "
        "positive times (measure one with `breakwater profile measure`)",
        where));
  return p;
}

Profile load_profile(const std::string& path) { return parse_profile(json::read_file(path), path); }

json::Json to_json(const Profile& p) {
  json::Json doc;
  doc["model"] = p.model;
  doc["microbatch_size"] = p.microbatch_size;
  if (p.device) doc["device"] = *p.device;
  if (p.cluster) doc["cluster"] = *p.cluster;
  doc["layers"] = json::Json::array();
  for (const auto& l : p.layers) {
    json::Json j;
    j["name"] = l.name;
    j["forward_ms"] = l.forward_ms;
    j["backward_ms"] = l.backward_ms;
    if (l.backward_input_ms) j["backward_input_ms"] = *l.backward_input_ms;
    if (l.backward_weight_ms) j["backward_weight_ms"] = *l.backward_weight_ms;
    j["activation_bytes"] = l.activation_bytes;
    j["output_bytes"] = l.output_bytes;
    j["param_bytes"] = l.param_bytes;
    doc["layers"].push_back(std::move(j));
  }
  return doc;
}

void save_profile(const std::string& path, const Profile& profile) {
  json::write_file(path, to_json(profile));
}

}  // namespace bw::plan
