// Store message decoders (see messages.h).
#include "elastic/messages.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/check.h"
#include "core/error.h"
#include "core/json.h"
#include "elastic/keys.h"

namespace bw::elastic {
namespace {

using Json = nlohmann::json;
constexpr long long kMaxInt = std::numeric_limits<int>::max();

std::string where(const std::string& key) { return fmt::format("store message '{}'", key); }

Json object(const std::string& text, const std::string& key) {
  Json doc = json::parse(text, where(key));
  if (!doc.is_object()) {
    throw ConfigError(
        fmt::format("{}: expected a JSON object, got {}", where(key), doc.type_name()));
  }
  return doc;
}

int int_field(const Json& doc, const char* field, const std::string& key, long long lo = 0,
              long long hi = kMaxInt) {
  return static_cast<int>(json::get_int_in(doc, field, where(key), lo, hi));
}

// An optional string field: absent = "", present but not a string = ConfigError.
std::string string_or_empty(const Json& doc, const char* field, const std::string& key) {
  return doc.contains(field) ? json::get_string(doc, field, where(key)) : std::string();
}

const Json& array_field(const Json& doc, const char* field, const std::string& key) {
  const auto it = doc.find(field);
  if (it == doc.end() || !it->is_array()) {
    throw ConfigError(fmt::format("{}: field '{}' must be an array", where(key), field));
  }
  return *it;
}

// An integer element of an array, in [lo, hi].
int64_t element(const Json& v, const std::string& key, const char* what, int64_t lo, int64_t hi) {
  // A non-negative JSON integer parses as unsigned: its lower bound is checked too (a range
  // whose end is below its begin was accepted before; found by the store_messages fuzzer).
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && (v.get<uint64_t>() > static_cast<uint64_t>(hi) ||
                                  static_cast<int64_t>(v.get<uint64_t>()) < lo)) ||
      (!v.is_number_unsigned() && (v.get<int64_t>() < lo || v.get<int64_t>() > hi))) {
    throw ConfigError(
        fmt::format("{}: {} {} is not an integer in [{}, {}]", where(key), what, v.dump(), lo, hi));
  }
  return v.get<int64_t>();
}

}  // namespace

ExitReport decode_exit_report(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  ExitReport r;
  r.worker = int_field(doc, "worker", key);
  r.status = int_field(doc, "status", key, 0, 255);
  r.incarnation = int_field(doc, "incarnation", key);
  return r;
}

WorkerError decode_worker_error(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  WorkerError e;
  e.message = json::get_string(doc, "message", where(key));
  e.config_error = json::get_string(doc, "kind", where(key)) == keys::kConfigError;
  return e;
}

Joined decode_joined(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  Joined j;
  j.regroup_ms = json::get_number(doc, "regroup_ms", where(key));
  j.transfer_ms = json::get_number(doc, "transfer_ms", where(key));
  if (doc.contains("transfer_bytes")) {
    j.transfer_bytes = json::get_int_in(doc, "transfer_bytes", where(key), 0, 1LL << 53);
  }
  return j;
}

Stopped decode_stopped(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  Stopped s;
  s.steps_done = json::get_int_in(doc, "steps_done", where(key), 0, kMaxInt);
  constexpr int64_t kMaxParams = int64_t{1} << 53;
  if (doc.contains("ranges")) {
    for (const auto& r : array_field(doc, "ranges", key)) {
      if (!r.is_array() || r.size() != 3) {
        throw ConfigError(
            fmt::format("{}: a range is [layer, begin, end], not {}", where(key), r.dump()));
      }
      const int layer = static_cast<int>(element(r[0], key, "layer", 0, kMaxInt));
      const int64_t begin = element(r[1], key, "range begin", 0, kMaxParams);
      const int64_t end = element(r[2], key, "range end", begin, kMaxParams);
      s.ranges[layer] = {begin, end};
    }
  } else {
    std::vector<int> layers;
    for (const auto& l : array_field(doc, "layers", key)) {
      layers.push_back(static_cast<int>(element(l, key, "layer", 0, kMaxInt)));
    }
    s.layers = std::move(layers);
  }
  return s;
}

std::vector<DoneEntry> decode_done(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  std::vector<DoneEntry> out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    DoneEntry e;
    e.part = it.key();
    if (!it.value().is_array() || it.value().empty() || !it.value()[0].is_string()) {
      throw ConfigError(
          fmt::format("{}: the checksums of '{}' are not a list of strings", where(key), e.part));
    }
    e.checksums = it.value().dump();
    e.first = it.value()[0].get<std::string>();
    const bool whole = e.part.find('/') == std::string::npos;
    if (whole) {
      const bool digits =
          !e.part.empty() && e.part.size() <= 9 &&
          std::all_of(e.part.begin(), e.part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) {
        throw ConfigError(fmt::format("{}: '{}' is not a layer number", where(key), e.part));
      }
      e.layer = std::stoi(e.part);
    }
    out.push_back(std::move(e));
  }
  return out;
}

runtime::StepReport decode_step_report(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  try {
    return runtime::StepReport::from_json(doc);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", where(key), e.what()));
  }
}

runtime::RankTrace decode_rank_trace(const std::string& text, const std::string& key) {
  return runtime::rank_trace_from_json(object(text, key), where(key));
}

namespace {
// {"path", "digest"} or {"path", "error"}: what a host found at a path the run names.
Json found_at(const std::string& path, const std::string& digest, const std::string& error) {
  Json out = Json::object();
  if (!path.empty()) out["path"] = path;
  if (!digest.empty()) out["digest"] = digest;
  if (!error.empty()) out["error"] = error;
  return out;
}
}  // namespace

std::string encode_registration(const Registration& r) {
  Json doc = {{"name", r.name},       {"host", r.host},
              {"devices", r.devices}, {"launch_ms", r.launch_ms},
              {"proof", r.proof},     {"data", found_at(r.data_path, r.data_digest, r.data_error)}};
  if (!r.weights_path.empty() || !r.weights_digest.empty() || !r.weights_error.empty()) {
    doc["weights"] = found_at(r.weights_path, r.weights_digest, r.weights_error);
  }
  if (!r.checkpoint_path.empty() || !r.checkpoint_error.empty() || r.checkpoint_shared) {
    Json ck = {{"path", r.checkpoint_path}, {"shared", r.checkpoint_shared}};
    if (!r.checkpoint_error.empty()) ck["error"] = r.checkpoint_error;
    doc["checkpoint"] = ck;
  }
  if (r.node >= 0) doc["rejoin"] = {{"node", r.node}, {"incarnation", r.incarnation}};
  return doc.dump();
}

Registration decode_registration(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  Registration r;
  r.name = string_or_empty(doc, "name", key);
  if (doc.contains("host")) r.host = json::get_string(doc, "host", where(key));
  r.proof = string_or_empty(doc, "proof", key);
  if (doc.contains("devices")) r.devices = int_field(doc, "devices", key, 0, 1 << 16);
  if (doc.contains("launch_ms")) {
    r.launch_ms = std::clamp(json::get_number(doc, "launch_ms", where(key)), 0.0, 600000.0);
  }
  if (doc.contains("data")) {
    const Json& data = doc.at("data");
    if (!data.is_object()) {
      throw ConfigError(fmt::format("{}: field 'data' must be an object", where(key)));
    }
    r.data_path = string_or_empty(data, "path", key);
    r.data_digest = string_or_empty(data, "digest", key);
    r.data_error = string_or_empty(data, "error", key);
  }
  if (doc.contains("weights")) {
    const Json& weights = doc.at("weights");
    if (!weights.is_object()) {
      throw ConfigError(fmt::format("{}: field 'weights' must be an object", where(key)));
    }
    r.weights_path = string_or_empty(weights, "path", key);
    r.weights_digest = string_or_empty(weights, "digest", key);
    r.weights_error = string_or_empty(weights, "error", key);
  }
  if (doc.contains("rejoin")) {
    const Json& rejoin = doc.at("rejoin");
    if (!rejoin.is_object()) {
      throw ConfigError(fmt::format("{}: field 'rejoin' must be an object", where(key)));
    }
    r.node = int_field(rejoin, "node", key);
    r.incarnation = int_field(rejoin, "incarnation", key);
  }
  if (doc.contains("checkpoint")) {
    const Json& ck = doc.at("checkpoint");
    if (!ck.is_object() || (ck.contains("shared") && !ck.at("shared").is_boolean())) {
      throw ConfigError(fmt::format(
          "{}: field 'checkpoint' must be an object with a boolean 'shared'", where(key)));
    }
    r.checkpoint_path = string_or_empty(ck, "path", key);
    r.checkpoint_error = string_or_empty(ck, "error", key);
    r.checkpoint_shared = ck.value("shared", false);
  }
  return r;
}

namespace {
std::string decision_word(Decision decision) {
  switch (decision) {
    case Decision::kCommit:
      return "commit";
    case Decision::kSkip:
      return "skip";
    case Decision::kLast:
      return "last";
    case Decision::kAbort:
      return "abort";
  }
  return "abort";
}
constexpr std::string_view kCheckpointSuffix = "+checkpoint";
}  // namespace

std::string encode_decision(Decision decision, bool checkpoint) {
  BW_CHECK(!(checkpoint && decision == Decision::kAbort), "an aborted step has no checkpoint");
  return decision_word(decision) + (checkpoint ? std::string(kCheckpointSuffix) : std::string());
}

Decision decode_decision(const std::string& text, const std::string& key, bool* checkpoint) {
  std::string word = text;
  bool ckpt = false;
  if (word.size() > kCheckpointSuffix.size() && word.ends_with(kCheckpointSuffix)) {
    word.resize(word.size() - kCheckpointSuffix.size());
    ckpt = true;
  }
  for (auto d : {Decision::kCommit, Decision::kSkip, Decision::kLast, Decision::kAbort}) {
    if (word == decision_word(d) && !(ckpt && d == Decision::kAbort)) {
      if (checkpoint) *checkpoint = ckpt;
      return d;
    }
  }
  throw ConfigError(fmt::format(
      "{}: '{}' is not a decision (commit, skip, last or abort, the first three optionally with "
      "+checkpoint)",
      where(key), text.substr(0, 40)));
}

std::string encode_start(const Start& start) {
  Json copies = Json::array();
  for (const auto& c : start.copies) {
    Json entry = {c.layer, c.from, c.to};
    if (c.range) {
      entry.push_back(c.range->first);
      entry.push_back(c.range->second);
    }
    copies.push_back(std::move(entry));
  }
  return Json{{"first_step", start.first_step},
              {"skipped_steps", start.skipped_steps},
              {"resume", start.resume},
              {"copies", std::move(copies)}}
      .dump();
}

Start decode_start(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  Start s;
  s.first_step = int_field(doc, "first_step", key);
  s.skipped_steps = doc.contains("skipped_steps") ? int_field(doc, "skipped_steps", key) : 0;
  s.resume = string_or_empty(doc, "resume", key);
  for (const auto& c : array_field(doc, "copies", key)) {
    if (!c.is_array() || (c.size() != 3 && c.size() != 5)) {
      throw ConfigError(fmt::format(
          "{}: a copy must be [layer, from, to] or [layer, from, to, begin, end], got {}",
          where(key), c.dump().substr(0, 80)));
    }
    LayerMove m;
    m.layer = static_cast<int>(element(c[0], key, "layer", 0, kMaxInt));
    m.from = static_cast<int>(element(c[1], key, "worker", 0, kMaxInt));
    m.to = static_cast<int>(element(c[2], key, "worker", 0, kMaxInt));
    if (c.size() == 5) {
      const int64_t begin = element(c[3], key, "begin", 0, std::numeric_limits<int64_t>::max());
      const int64_t end = element(c[4], key, "end", begin, std::numeric_limits<int64_t>::max());
      m.range.emplace(begin, end);
    }
    s.copies.push_back(m);
  }
  return s;
}

std::string encode_next(const Next& next) {
  if (!next.shutdown) return Json{{"kind", "generation"}, {"generation", next.generation}}.dump();
  Json doc = {{"kind", "shutdown"}};
  if (next.save) {
    Json shards = Json::object();
    for (const auto& [worker, shard] : next.save->shards) {
      shards[std::to_string(worker)] = {{"shard", shard.first}, {"layers", shard.second}};
    }
    doc["save"] = {{"dir", next.save->dir}, {"shards", std::move(shards)}};
  }
  return doc.dump();
}

Next decode_next(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  const std::string kind = json::get_string(doc, "kind", where(key));
  Next n;
  if (kind == "generation") {
    n.generation = int_field(doc, "generation", key);
    return n;
  }
  if (kind != "shutdown") {
    throw ConfigError(
        fmt::format("{}: kind '{}' is not generation or shutdown", where(key), kind.substr(0, 40)));
  }
  n.shutdown = true;
  if (!doc.contains("save")) return n;
  const Json& save = doc.at("save");
  if (!save.is_object()) {
    throw ConfigError(fmt::format("{}: field 'save' must be an object", where(key)));
  }
  StopSave s;
  s.dir = json::get_string(save, "dir", where(key));
  const auto it = save.find("shards");
  if (it == save.end() || !it->is_object()) {
    throw ConfigError(fmt::format("{}: field 'save.shards' must be an object", where(key)));
  }
  for (const auto& [name, entry] : it->items()) {
    int worker = -1;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), worker);
    if (ec != std::errc() || end != name.data() + name.size() || worker < 0 || !entry.is_object()) {
      throw ConfigError(fmt::format("{}: save.shards entry '{}' is not a worker's shard",
                                    where(key), name.substr(0, 40)));
    }
    const int shard = int_field(entry, "shard", key);
    std::vector<int> layers;
    for (const auto& l : array_field(entry, "layers", key)) {
      layers.push_back(static_cast<int>(element(l, key, "layer", 0, kMaxInt)));
    }
    s.shards[worker] = {shard, std::move(layers)};
  }
  n.save = std::move(s);
  return n;
}

std::string encode_exit_report(const ExitReport& report) {
  return Json{
      {"worker", report.worker}, {"status", report.status}, {"incarnation", report.incarnation}}
      .dump();
}

std::string encode_worker_error(const WorkerError& error) {
  return Json{{"kind", error.config_error ? keys::kConfigError : "other"},
              {"message", error.message}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string encode_joined(const Joined& joined) {
  return Json{{"regroup_ms", joined.regroup_ms},
              {"transfer_ms", joined.transfer_ms},
              {"transfer_bytes", joined.transfer_bytes}}
      .dump();
}

std::string encode_stopped(const Stopped& stopped) {
  Json layers = Json::array(), ranges = Json::array();
  for (const auto& [layer, range] : stopped.ranges) {
    layers.push_back(layer);
    ranges.push_back({layer, range.first, range.second});
  }
  return Json{{"steps_done", stopped.steps_done}, {"layers", layers}, {"ranges", ranges}}.dump();
}

std::string encode_registration_reply(const RegistrationReply& reply) {
  if (!reply.ok) {
    return Json{{"ok", false}, {"message", reply.message}}.dump(-1, ' ', false,
                                                                Json::error_handler_t::replace);
  }
  return Json{{"ok", true},
              {"node", reply.node},
              {"incarnation", reply.incarnation},
              {"devices", reply.devices}}
      .dump();
}

RegistrationReply decode_registration_reply(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  const auto it = doc.find("ok");
  if (it == doc.end() || !it->is_boolean()) {
    throw ConfigError(fmt::format("{}: field 'ok' must be true or false", where(key)));
  }
  RegistrationReply r;
  r.ok = it->get<bool>();
  if (!r.ok) {
    r.message = json::get_string(doc, "message", where(key));
    return r;
  }
  r.node = int_field(doc, "node", key);
  r.incarnation = int_field(doc, "incarnation", key);
  r.devices = int_field(doc, "devices", key, 1);
  return r;
}

std::string encode_leader(const LeaderRecord& record) {
  return Json{{"address", record.address},
              {"host", record.host},
              {"pid", record.pid},
              {"config", record.config}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

LeaderRecord decode_leader(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  LeaderRecord r;
  r.address = json::get_string(doc, "address", where(key));
  r.host = json::get_string(doc, "host", where(key));
  r.config = json::get_string(doc, "config", where(key));
  r.pid = json::get_int_in(doc, "pid", where(key), 0, std::numeric_limits<int64_t>::max());
  return r;
}

std::string encode_instance(const InstanceRecord& record) {
  return Json{{"epoch", record.epoch}, {"over", record.over}}.dump();
}

InstanceRecord decode_instance(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  InstanceRecord r;
  r.epoch = json::get_int_in(doc, "epoch", where(key), 1, std::numeric_limits<int64_t>::max());
  const auto it = doc.find("over");
  if (it == doc.end() || !it->is_boolean()) {
    throw ConfigError(fmt::format("{}: field 'over' must be true or false", where(key)));
  }
  r.over = it->get<bool>();
  return r;
}

std::string encode_run_state(const RunState& s) {
  Json nodes = Json::array();
  for (const auto& n : s.nodes) {
    nodes.push_back({{"node", n.node},
                     {"name", n.name},
                     {"incarnation", n.incarnation},
                     {"live", n.live},
                     {"in_plan", n.in_plan}});
  }
  return Json{{"generation", s.generation},
              {"first_step", s.first_step},
              {"skipped", s.skipped},
              {"consecutive_skips", s.consecutive_skips},
              {"start", s.start},
              {"plan", s.plan},
              {"checkpoint_io", s.checkpoint_io},
              {"nodes", std::move(nodes)}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

RunState decode_run_state(const std::string& text, const std::string& key) {
  const Json doc = object(text, key);
  RunState s;
  s.generation = int_field(doc, "generation", key);
  s.first_step = int_field(doc, "first_step", key);
  s.skipped = int_field(doc, "skipped", key);
  s.consecutive_skips = int_field(doc, "consecutive_skips", key);
  s.start = json::get_string(doc, "start", where(key));
  s.plan = json::get_string(doc, "plan", where(key));
  s.checkpoint_io = json::get_string(doc, "checkpoint_io", where(key));
  auto flag = [&](const Json& n, const char* field) {
    const auto it = n.find(field);
    if (it == n.end() || !it->is_boolean()) {
      throw ConfigError(
          fmt::format("{}: node field '{}' must be true or false", where(key), field));
    }
    return it->get<bool>();
  };
  for (const Json& n : array_field(doc, "nodes", key)) {
    if (!n.is_object()) {
      throw ConfigError(fmt::format("{}: each of 'nodes' must be an object", where(key)));
    }
    RunStateNode node;
    node.node = int_field(n, "node", key);
    node.name = json::get_string(n, "name", where(key));
    node.incarnation = int_field(n, "incarnation", key);
    node.live = flag(n, "live");
    node.in_plan = flag(n, "in_plan");
    s.nodes.push_back(std::move(node));
  }
  return s;
}

}  // namespace bw::elastic
