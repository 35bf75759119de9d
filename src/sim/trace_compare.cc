#include "sim/trace_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/json.h"
#include "schedule/action.h"

namespace bw::sim {

namespace {

using Json = nlohmann::json;
using schedule::ActionKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kUsPerMs = 1000.0;  // trace times are microseconds
constexpr long long kMaxTid = 1 << 22;

const Json& events_of(const Json& doc, const std::string& name) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw ConfigError(fmt::format(
        "{}: not a Chrome trace: expected a JSON object with a 'traceEvents' array", name));
  return doc["traceEvents"];
}

std::string where_of(const std::string& name, size_t i) {
  return fmt::format("{}: traceEvents[{}]", name, i);
}

// The class of an action the simulator also runs: its kind, SEND_F and SEND_B as SEND, RECV_F
// and RECV_B as RECV.
std::string class_of(ActionKind k) {
  switch (k) {
    case ActionKind::SEND_F:
    case ActionKind::SEND_B:
      return "SEND";
    case ActionKind::RECV_F:
    case ActionKind::RECV_B:
      return "RECV";
    default:
      return std::string(schedule::kind_name(k));
  }
}

int class_rank(const ClassComparison& c) {
  static const char* const kOrder[] = {"F", "B", "I", "W", "SEND", "RECV"};
  for (int i = 0; i < 6; ++i)
    if (c.cls == kOrder[i]) return i;
  return c.simulated ? 6 : 7;
}

bool simulated_cat(const std::string& cat) {
  return cat == "F" || cat == "B" || cat == "I" || cat == "W" || cat == "comm";
}

struct Mean {
  double sum_ms = 0;
  long long n = 0;
  size_t first = 0;  // the index of its first event, to name the earliest of several mismatches
  void add(double ms) { sum_ms += ms, ++n; }
  double mean() const { return n ? sum_ms / n : kNaN; }
};

// The simulated trace: the predicted duration of each action name per device.
struct Prediction {
  std::string kind;
  int devices = 0;
  int microbatches = 0;
  int chunks = 0;
  double makespan_ms = 0;
  std::vector<std::map<std::string, Mean>> by_device;
  std::vector<std::vector<std::string>> compute_order;  // device -> compute names, schedule order
};

Prediction read_prediction(const Json& doc, const std::string& name, TraceComparison& out) {
  const Json& events = events_of(doc, name);
  if (!doc.contains("otherData") || !doc["otherData"].is_object() ||
      !doc["otherData"].contains("makespan_ms") || !doc["otherData"].contains("devices"))
    throw ConfigError(fmt::format(
        "{}: not a simulated trace (no otherData.makespan_ms and otherData.devices); write one "
        "with breakwater schedule ... --trace SIM.json",
        name));
  const Json& other = doc["otherData"];
  const std::string where = name + ": otherData";
  Prediction p;
  p.makespan_ms = json::get_non_negative(other, "makespan_ms", where);
  p.devices = static_cast<int>(json::get_int_in(other, "devices", where, 1, kMaxTid));
  if (other.contains("kind") && other["kind"].is_string()) out.kind = other["kind"];
  if (other.contains("microbatches"))
    out.microbatches = static_cast<int>(json::get_int_in(other, "microbatches", where, 0, 1 << 30));
  if (other.contains("chunks"))
    out.chunks = static_cast<int>(json::get_int_in(other, "chunks", where, 0, 1 << 30));
  out.devices = p.devices;
  p.kind = out.kind;
  p.microbatches = out.microbatches;
  p.chunks = out.chunks;
  p.by_device.resize(p.devices);
  p.compute_order.resize(p.devices);
  for (size_t i = 0; i < events.size(); ++i) {
    const Json& e = events[i];
    const std::string at = where_of(name, i);
    if (!e.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", at));
    const std::string ph = json::get_string(e, "ph", at);
    if (ph != "X" && ph != "i") continue;
    const long long tid = json::get_int_in(e, "tid", at, 0, std::numeric_limits<int>::max());
    if (tid >= p.devices) continue;  // a link's track: transfers, not a device's actions
    const std::string action = json::get_string(e, "name", at);
    const double ts_us = json::get_number(e, "ts", at);
    double ms = 0;
    if (ph == "X") {
      ms = json::get_non_negative(e, "dur", at) / kUsPerMs;
    } else {
      if (!e.contains("args")) throw ConfigError(fmt::format("{}: missing field 'args'", at));
      ms = json::get_number(e["args"], "done_ms", at + " args") - ts_us / kUsPerMs;
      if (ms < 0) ms = 0;  // rounding of ts
    }
    auto [it, fresh] = p.by_device[tid].try_emplace(action);
    if (fresh) it->second.first = i;
    it->second.add(ms);
    const auto a = schedule::parse_action(action);
    if (a && schedule::is_compute(a->kind)) p.compute_order[tid].push_back(action);
  }
  return p;
}

// The measured trace of one pipeline (pid).
struct StepSpan {
  double begin_us = std::numeric_limits<double>::infinity();
  double end_us = -std::numeric_limits<double>::infinity();
  void add(double ts, double end) {
    begin_us = std::min(begin_us, ts), end_us = std::max(end_us, end);
  }
  bool empty() const { return end_us < begin_us; }
};

struct Measured {
  std::string cls;
  bool simulated = false;
  bool compute = false;
  Mean mean;
};

struct Started {
  double ts_us;
  size_t index;
  std::string name;
  auto operator<=>(const Started& o) const {
    return std::tie(ts_us, index) <=> std::tie(o.ts_us, o.index);
  }
};

struct PipelineTrace {
  std::string name;
  std::map<long long, std::string> threads;
  std::map<long long, StepSpan> all, pipeline;                   // step -> span
  std::map<long long, std::map<std::string, Measured>> actions;  // tid -> name -> durations
  std::map<long long, std::map<long long, std::vector<Started>>> computes;  // step -> tid -> F..W
  long long max_tid = -1, max_chunk = -1, max_microbatch = -1;              // over its computes
};

std::map<long long, PipelineTrace> read_measured(const Json& doc, const std::string& name) {
  const Json& events = events_of(doc, name);
  if (doc.contains("otherData") && doc["otherData"].is_object() &&
      doc["otherData"].contains("makespan_ms"))
    throw ConfigError(fmt::format(
        "{}: this is a simulated trace (it has otherData.makespan_ms); give the measured trace "
        "first: breakwater trace compare REAL.json SIM.json",
        name));
  std::map<long long, PipelineTrace> out;
  std::map<long long, std::string> process_names;
  std::map<long long, std::map<long long, std::string>> thread_names;
  for (size_t i = 0; i < events.size(); ++i) {
    const Json& e = events[i];
    const std::string at = where_of(name, i);
    if (!e.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", at));
    const std::string ph = json::get_string(e, "ph", at);
    if (ph == "M") {
      const std::string what = json::get_string(e, "name", at);
      if (what != "process_name" && what != "thread_name") continue;
      const long long pid =
          json::get_int_in(e, "pid", at, 0, static_cast<long long>(json::kMaxExactInt));
      if (!e.contains("args")) throw ConfigError(fmt::format("{}: missing field 'args'", at));
      const std::string label = json::get_string(e["args"], "name", at + " args");
      if (what == "process_name")
        process_names[pid] = label;
      else
        thread_names[pid][json::get_int_in(e, "tid", at, 0, kMaxTid)] = label;
      continue;
    }
    if (ph != "X") continue;
    const long long pid =
        json::get_int_in(e, "pid", at, 0, static_cast<long long>(json::kMaxExactInt));
    const std::string action = json::get_string(e, "name", at);
    const std::string cat = e.contains("cat") ? json::get_string(e, "cat", at) : "";
    const double ts = json::get_number(e, "ts", at);
    const double dur = json::get_non_negative(e, "dur", at);
    if (!e.contains("args"))
      throw ConfigError(
          fmt::format("{}: slice '{}' has no args.step (the traced step)", at, action));
    const long long step = json::get_int(e["args"], "step", at + " args");
    // A send or receive is on a track of its own; args.device names the device it belongs to.
    const long long tid = e["args"].contains("device")
                              ? json::get_int_in(e["args"], "device", at + " args", 0, kMaxTid)
                              : json::get_int_in(e, "tid", at, 0, kMaxTid);

    Measured m;
    m.simulated = simulated_cat(cat);
    if (m.simulated) {
      const auto a = schedule::parse_action(action);
      if (!a)
        throw ConfigError(
            fmt::format("{}: slice '{}' of cat '{}' is not an action name such as 0F3 or 1SEND_B2",
                        at, action, cat));
      m.cls = class_of(a->kind);
      m.compute = schedule::is_compute(a->kind);
    } else {
      m.cls = cat.empty() ? action : cat;
    }
    PipelineTrace& p = out[pid];
    m.mean.first = i;
    auto [it, fresh] = p.actions[tid].try_emplace(action, m);
    if (!fresh && it->second.cls != m.cls)
      throw ConfigError(fmt::format("{}: slice '{}' has cat '{}' here and another class before", at,
                                    action, cat));
    it->second.mean.add(dur / kUsPerMs);
    p.all[step].add(ts, ts + dur);
    if (m.simulated) p.pipeline[step].add(ts, ts + dur);
    if (m.compute) {
      p.computes[step][tid].push_back({ts, i, action});
      const auto a = schedule::parse_action(action);
      p.max_tid = std::max(p.max_tid, tid);
      p.max_chunk = std::max<long long>(p.max_chunk, a->chunk);
      p.max_microbatch = std::max<long long>(p.max_microbatch, a->microbatch);
    }
  }
  for (auto& [pid, p] : out) {
    auto n = process_names.find(pid);
    p.name = n != process_names.end() ? n->second : fmt::format("pid {}", pid);
    p.threads = thread_names[pid];
  }
  return out;
}

double mean_span_ms(const std::map<long long, StepSpan>& spans) {
  Mean m;
  for (const auto& [step, s] : spans)
    if (!s.empty()) m.add((s.end_us - s.begin_us) / kUsPerMs);
  return m.mean();
}

double ratio_of(double measured, double predicted) {
  return predicted > 0 ? measured / predicted : kNaN;
}

// Every action of `p` must be one its simulated device runs, every simulated compute must have
// run, and each device's computes of a step must run in the simulated order: otherwise the two
// traces are of different schedules. Of several mismatches the earliest in the file is named.
void check_same_schedule(const PipelineTrace& p, long long pid, const Prediction& pred,
                         const std::string& real_name, const std::string& sim_name) {
  const std::string pipeline = fmt::format("{}: pipeline {} ({})", real_name, pid, p.name);
  const std::string kFix = fmt::format(
      "simulate the same kind, devices, microbatches and chunks (measured: {} devices, {} "
      "microbatches, {} chunks; {}: {}{}{} devices, {} microbatches, {} chunks) with breakwater "
      "schedule ... --trace SIM.json, or pick the pipeline it was simulated for with --pipeline "
      "PID",
      p.max_tid + 1, p.max_microbatch + 1, p.max_chunk + 1, sim_name, pred.kind,
      pred.kind.empty() ? "" : ", ", pred.devices, pred.microbatches, pred.chunks);
  for (const auto& [tid, actions] : p.actions) {
    if (tid < pred.devices) continue;
    for (const auto& [action, m] : actions)
      if (m.simulated)
        throw ConfigError(fmt::format(
            "{} device {} ran {}, but {} simulates {} devices: a different schedule; {}", pipeline,
            tid, action, sim_name, pred.devices, kFix));
  }
  for (const auto& [tid, actions] : p.actions) {
    const std::string* extra = nullptr;
    size_t first = 0;
    for (const auto& [action, m] : actions)
      if (m.simulated && !pred.by_device[tid].contains(action) && (!extra || m.mean.first < first))
        extra = &action, first = m.mean.first;
    if (extra)
      throw ConfigError(fmt::format(
          "{} device {} ran {}, which {} does not have on device {}: a different schedule; {}",
          pipeline, tid, *extra, sim_name, tid, kFix));
  }
  for (int d = 0; d < pred.devices; ++d) {
    const auto it = p.actions.find(d);
    for (const std::string& action : pred.compute_order[d])
      if (it == p.actions.end() || !it->second.contains(action))
        throw ConfigError(fmt::format(
            "{} device {} never ran {}, which {} has on device {}: a different schedule (or a "
            "step cut short); {}",
            pipeline, d, action, sim_name, d, kFix));
  }
  for (const auto& [step, devices] : p.computes) {
    for (const auto& [tid, started] : devices) {
      std::vector<Started> order = started;
      std::sort(order.begin(), order.end());
      const auto& expected = pred.compute_order[tid];
      for (size_t k = 0; k < order.size() && k < expected.size(); ++k)
        if (order[k].name != expected[k])
          throw ConfigError(fmt::format(
              "{} device {} ran {} as compute action {} of step {}, where {} runs {}: a different "
              "schedule; {}",
              pipeline, tid, order[k].name, k + 1, step, sim_name, expected[k], kFix));
    }
  }
}

PipelineComparison compare_pipeline(const PipelineTrace& p, long long pid, const Prediction& pred) {
  PipelineComparison c;
  c.pid = pid;
  c.name = p.name;
  c.steps = static_cast<int>(p.all.size());
  c.measured_makespan_ms = mean_span_ms(p.all);
  c.measured_pipeline_makespan_ms = mean_span_ms(p.pipeline);
  c.predicted_makespan_ms = pred.makespan_ms;
  long long max_tid = -1;
  for (const auto& [tid, actions] : p.actions) max_tid = std::max(max_tid, tid);
  c.threads.resize(max_tid + 1);  // the devices' tracks (those of sends and receives are above)
  for (const auto& [tid, label] : p.threads)
    if (tid <= max_tid) c.threads[tid] = label;

  for (const auto& [tid, actions] : p.actions) {
    std::map<std::string, ClassComparison> classes;
    for (const auto& [action, m] : actions) {
      ClassComparison& k = classes[m.cls];
      k.device = static_cast<int>(tid);
      k.cls = m.cls;
      k.simulated = m.simulated;
      k.slices += m.mean.n;
      k.measured_ms += m.mean.sum_ms;  // sums until the division below
      if (!m.simulated) continue;
      const double predicted = pred.by_device[tid].at(action).mean();
      k.predicted_ms += predicted * m.mean.n;
      c.actions.push_back({.device = static_cast<int>(tid),
                           .name = action,
                           .cls = m.cls,
                           .slices = m.mean.n,
                           .measured_ms = m.mean.mean(),
                           .predicted_ms = predicted});
    }
    std::vector<ClassComparison> rows;
    for (auto& [cls, k] : classes) {
      k.per_step = c.steps > 0 ? static_cast<double>(k.slices) / c.steps : 0;
      k.measured_ms /= k.slices;
      k.predicted_ms = k.simulated ? k.predicted_ms / k.slices : kNaN;
      k.ratio = k.simulated ? ratio_of(k.measured_ms, k.predicted_ms) : kNaN;
      rows.push_back(k);
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return std::pair(class_rank(a), a.cls) < std::pair(class_rank(b), b.cls);
    });
    c.classes.insert(c.classes.end(), rows.begin(), rows.end());
  }
  std::stable_sort(c.actions.begin(), c.actions.end(), [](const auto& a, const auto& b) {
    // Gaps within a nanosecond are ties (rounding of the traces' microseconds), broken by name.
    const double ga = std::round(std::fabs(a.gap_ms()) * 1e6);
    const double gb = std::round(std::fabs(b.gap_ms()) * 1e6);
    if (ga != gb) return ga > gb;
    return std::tie(a.device, a.name) < std::tie(b.device, b.name);
  });
  return c;
}

Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "-"; }

std::string ratio_text(double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : "-"; }

}  // namespace

TraceComparison compare_traces(const Json& real, const std::string& real_name, const Json& sim,
                               const std::string& sim_name, const CompareOptions& options) {
  TraceComparison out;
  const std::map<long long, PipelineTrace> measured = read_measured(real, real_name);
  const Prediction pred = read_prediction(sim, sim_name, out);
  if (measured.empty())
    throw ConfigError(fmt::format(
        "{}: no slices (ph \"X\") in traceEvents; trace training steps with breakwater train and "
        "train.trace_steps",
        real_name));
  if (options.pipeline && !measured.contains(*options.pipeline)) {
    std::string pids;
    for (const auto& [pid, p] : measured) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
    throw ConfigError(fmt::format("{}: no slices of pipeline {} (--pipeline); its pids are {}",
                                  real_name, *options.pipeline, pids));
  }
  for (const auto& [pid, p] : measured) {
    if (options.pipeline && pid != *options.pipeline) continue;
    check_same_schedule(p, pid, pred, real_name, sim_name);
    out.pipelines.push_back(compare_pipeline(p, pid, pred));
  }
  return out;
}

std::string format_comparison(const TraceComparison& c, int top) {
  std::string out;
  for (const PipelineComparison& p : c.pipelines) {
    if (!out.empty()) out += "\n";
    out += fmt::format("pipeline {} ({}): {} step(s) measured against {} simulated", p.pid, p.name,
                       p.steps, c.kind.empty() ? "a schedule" : c.kind);
    if (c.devices > 0)
      out += fmt::format(" ({} devices, {} microbatches, {} chunks)", c.devices, c.microbatches,
                         c.chunks);
    out += "\n";
    out += fmt::format(
        "step makespan: measured {} ms, predicted {} ms, ratio {} (simulated classes only: {} "
        "ms, ratio {})\n\n",
        ms(p.measured_makespan_ms), ms(p.predicted_makespan_ms),
        ratio_text(ratio_of(p.measured_makespan_ms, p.predicted_makespan_ms)),
        ms(p.measured_pipeline_makespan_ms),
        ratio_text(ratio_of(p.measured_pipeline_makespan_ms, p.predicted_makespan_ms)));
    out += fmt::format("{:>6}  {:<10}  {:>8}  {:>11}  {:>12}  {:>7}\n", "device", "class",
                       "per step", "measured ms", "predicted ms", "ratio");
    for (const ClassComparison& k : p.classes) {
      if (k.simulated)
        out += fmt::format("{:>6}  {:<10}  {:>8.4g}  {:>11}  {:>12}  {:>7}\n", k.device, k.cls,
                           k.per_step, ms(k.measured_ms), ms(k.predicted_ms), ratio_text(k.ratio));
      else
        out += fmt::format("{:>6}  {:<10}  {:>8.4g}  {:>11}  {:>12}\n", k.device, k.cls, k.per_step,
                           ms(k.measured_ms), "not simulated");
    }
    const size_t n = std::min(p.actions.size(), static_cast<size_t>(std::max(top, 0)));
    if (n == 0) continue;
    out += fmt::format("\nlargest gaps ({} of {} actions, by |measured - predicted| mean):\n", n,
                       p.actions.size());
    size_t width = 6;
    for (size_t i = 0; i < n; ++i) width = std::max(width, p.actions[i].name.size());
    out += fmt::format("{:>6}  {:<{}}  {:>11}  {:>12}  {:>9}\n", "device", "action", width,
                       "measured ms", "predicted ms", "gap ms");
    for (size_t i = 0; i < n; ++i) {
      const ActionComparison& a = p.actions[i];
      out += fmt::format("{:>6}  {:<{}}  {:>11}  {:>12}  {:>+9.4g}\n", a.device, a.name, width,
                         ms(a.measured_ms), ms(a.predicted_ms), a.gap_ms());
    }
  }
  return out;
}

Json comparison_json(const TraceComparison& c, int top) {
  Json pipelines = Json::array();
  for (const PipelineComparison& p : c.pipelines) {
    Json classes = Json::array();
    for (const ClassComparison& k : p.classes) {
      Json row = {{"device", k.device},
                  {"class", k.cls},
                  {"simulated", k.simulated},
                  {"slices", k.slices},
                  {"per_step", k.per_step},
                  {"measured_ms", number(k.measured_ms)},
                  {"predicted_ms", number(k.predicted_ms)},
                  {"ratio", number(k.ratio)}};
      if (k.device < static_cast<int>(p.threads.size()) && !p.threads[k.device].empty())
        row["thread_name"] = p.threads[k.device];
      classes.push_back(std::move(row));
    }
    Json gaps = Json::array();
    const size_t n = std::min(p.actions.size(), static_cast<size_t>(std::max(top, 0)));
    for (size_t i = 0; i < n; ++i) {
      const ActionComparison& a = p.actions[i];
      gaps.push_back({{"device", a.device},
                      {"action", a.name},
                      {"class", a.cls},
                      {"slices", a.slices},
                      {"measured_ms", number(a.measured_ms)},
                      {"predicted_ms", number(a.predicted_ms)},
                      {"gap_ms", number(a.gap_ms())}});
    }
    pipelines.push_back(
        {{"pid", p.pid},
         {"name", p.name},
         {"steps", p.steps},
         {"makespan",
          {{"measured_ms", number(p.measured_makespan_ms)},
           {"measured_simulated_classes_ms", number(p.measured_pipeline_makespan_ms)},
           {"predicted_ms", number(p.predicted_makespan_ms)},
           {"ratio", number(ratio_of(p.measured_makespan_ms, p.predicted_makespan_ms))}}},
         {"classes", std::move(classes)},
         {"actions", p.actions.size()},
         {"largest_gaps", std::move(gaps)}});
  }
  return {{"simulated",
           {{"kind", c.kind},
            {"devices", c.devices},
            {"microbatches", c.microbatches},
            {"chunks", c.chunks}}},
          {"pipelines", std::move(pipelines)}};
}

}  // namespace bw::sim
