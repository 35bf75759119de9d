// Step reports as JSON (see step_report.h).
#include "runtime/step_report.h"

#include <fmt/format.h>

#include <limits>
#include <string>

#include "core/error.h"
#include "core/json.h"

namespace bw::runtime {

nlohmann::json StepReport::to_json() const {
  nlohmann::json doc = {{"step", step},
                        {"rank", rank},
                        {"loss", loss},
                        {"grad_norm", grad_norm},
                        {"lr", lr},
                        {"step_ms", step_ms},
                        {"exec_ms", exec_ms},
                        {"compute_ms", compute_ms},
                        {"wait_ms", wait_ms},
                        {"data_ms", data_ms},
                        {"post_ms", post_ms},
                        {"free_ms", free_ms},
                        {"gather_ms", gather_ms},
                        {"reduce_ms", reduce_ms},
                        {"sync_ms", sync_ms},
                        {"checkpoint_ms", checkpoint_ms},
                        {"num_actions", num_actions},
                        {"peak_rss_kb", peak_rss_kb},
                        {"device_bytes", device_bytes},
                        {"device_step_allocated_bytes", device_step_allocated_bytes},
                        {"chunk_ms", chunk_ms},
                        {"samples", samples}};
  if (!tied.empty()) doc["tied"] = tied;
  if (val_loss) {
    doc["val_loss"] = *val_loss;  // a non-finite value travels as null (NaN again on reading)
    doc["eval_ms"] = eval_ms;
  }
  return doc;
}

namespace {

// A JSON array, or ConfigError naming the field.
const nlohmann::json& array_field(const nlohmann::json& d, const char* key, const std::string& where) {
  const auto& v = d.at(key);
  if (!v.is_array()) {
    throw ConfigError(fmt::format("{}: field '{}' must be an array, got {}", where, key,
                                  v.type_name()));
  }
  return v;
}

}  // namespace

StepReport StepReport::from_json(const nlohmann::json& d) {
  const std::string where = "a worker's step report";
  constexpr long long kMaxInt = std::numeric_limits<int>::max();
  if (!d.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  // JSON has no NaN or infinity: a non-finite value travels as null and comes back as NaN, so
  // the coordinator sees (and refuses to commit) a diverged step.
  auto maybe_nan = [&](const char* key) {
    if (d.contains(key) && d.at(key).is_null()) return std::numeric_limits<double>::quiet_NaN();
    return json::get_number(d, key, where);
  };
  auto optional_ms = [&](const char* key) {
    return d.contains(key) ? json::get_number(d, key, where) : 0.0;
  };
  StepReport r;
  r.step = static_cast<int>(json::get_int_in(d, "step", where, 0, kMaxInt));
  r.rank = static_cast<int>(json::get_int_in(d, "rank", where, 0, kMaxInt));
  r.loss = maybe_nan("loss");
  r.grad_norm = maybe_nan("grad_norm");
  r.lr = json::get_number(d, "lr", where);
  r.step_ms = json::get_number(d, "step_ms", where);
  r.exec_ms = json::get_number(d, "exec_ms", where);
  r.compute_ms = json::get_number(d, "compute_ms", where);
  r.wait_ms = json::get_number(d, "wait_ms", where);
  r.data_ms = optional_ms("data_ms");
  r.post_ms = optional_ms("post_ms");
  r.free_ms = optional_ms("free_ms");
  r.gather_ms = optional_ms("gather_ms");
  r.reduce_ms = optional_ms("reduce_ms");
  r.sync_ms = json::get_number(d, "sync_ms", where);
  r.checkpoint_ms = optional_ms("checkpoint_ms");
  r.num_actions = static_cast<int>(json::get_int_in(d, "num_actions", where, 0, kMaxInt));
  r.peak_rss_kb = json::get_int_in(d, "peak_rss_kb", where, 0, 1LL << 53);
  if (d.contains("device_bytes"))
    r.device_bytes = json::get_int_in(d, "device_bytes", where, 0, 1LL << 53);
  if (d.contains("device_step_allocated_bytes"))
    r.device_step_allocated_bytes =
        json::get_int_in(d, "device_step_allocated_bytes", where, 0, 1LL << 53);
  if (d.contains("val_loss")) {
    r.val_loss = maybe_nan("val_loss");
    r.eval_ms = optional_ms("eval_ms");
  }
  if (d.contains("chunk_ms")) {
    for (const auto& c : array_field(d, "chunk_ms", where)) {
      if (!c.is_array() || c.size() != 4) {
        throw ConfigError(fmt::format("{}: chunk_ms holds {} where [F, B, I, W] ms go", where,
                                      c.dump()));
      }
      std::array<double, 4> ms{};
      for (size_t i = 0; i < 4; ++i) {
        if (!c[i].is_number()) {
          throw ConfigError(fmt::format("{}: chunk_ms holds {}, not numbers", where, c.dump()));
        }
        ms[i] = c[i].get<double>();
      }
      r.chunk_ms.push_back(ms);
    }
  }
  if (d.contains("samples")) {
    for (const auto& s : array_field(d, "samples", where)) {
      if (!s.is_number_integer() ||
          (s.is_number_unsigned() &&
           s.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
        throw ConfigError(fmt::format("{}: samples holds {}, not a sample id", where, s.dump()));
      }
      r.samples.push_back(s.get<int64_t>());
    }
  }
  if (d.contains("tied")) {
    const auto& t = d.at("tied");
    if (!t.is_object()) throw ConfigError(fmt::format("{}: tied is {}, not an object", where, t.dump()));
    for (const auto& [group, sums] : t.items()) {
      for (const auto& v : array_field(t, group.c_str(), where)) {
        if (!v.is_number_integer()) {
          throw ConfigError(fmt::format("{}: tied.{} holds {}, not a checksum", where, group, v.dump()));
        }
        r.tied[group].push_back(v.get<int64_t>());
      }
    }
  }
  return r;
}

}  // namespace bw::runtime
