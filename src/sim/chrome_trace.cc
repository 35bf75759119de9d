#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/trace_lanes.h"
#include "sim/render.h"

namespace bw::sim {

namespace {

using schedule::ActionKind;

const char* colour(ActionKind k) {
  // Chrome's reserved colour names (Perfetto colours by name and ignores them).
  switch (k) {
    case ActionKind::F:
      return "thread_state_running";
    case ActionKind::B:
      return "thread_state_iowait";
    case ActionKind::I:
      return "rail_response";
    case ActionKind::W:
      return "rail_animation";
    default:
      return "grey";
  }
}

}  // namespace

std::string chrome_trace(const schedule::Schedule& s, const SimResult& r) {
  using nlohmann::json;
  json events = json::array();
  constexpr double kUs = 1000.0;  // trace times are microseconds
  const int P = s.num_devices;
  events.push_back({{"ph", "M"},
                    {"pid", 0},
                    {"name", "process_name"},
                    {"args", {{"name", "pipeline (" + s.kind + ")"}}}});
  for (int d = 0; d < P; ++d) {
    events.push_back({{"ph", "M"},
                      {"pid", 0},
                      {"tid", d},
                      {"name", "thread_name"},
                      {"args", {{"name", "device " + std::to_string(d)}}}});
    events.push_back({{"ph", "M"},
                      {"pid", 0},
                      {"tid", d},
                      {"name", "thread_sort_index"},
                      {"args", {{"sort_index", d}}}});
  }
  for (int d = 0; d < P && d < static_cast<int>(r.timing.size()); ++d) {
    const auto& list = s.actions[d];
    for (size_t k = 0; k < list.size(); ++k) {
      const auto& a = list[k];
      const auto& t = r.timing[d][k];
      const std::string name = schedule::to_string(a);
      if (schedule::is_compute(a.kind)) {
        events.push_back({{"ph", "X"},
                          {"pid", 0},
                          {"tid", d},
                          {"name", name},
                          {"cat", std::string(schedule::kind_name(a.kind))},
                          {"ts", t.start_ms * kUs},
                          {"dur", (t.end_ms - t.start_ms) * kUs},
                          {"cname", colour(a.kind)},
                          {"args", {{"chunk", a.chunk}, {"microbatch", a.microbatch}}}});
      } else {
        events.push_back({{"ph", "i"},
                          {"s", "t"},
                          {"pid", 0},
                          {"tid", d},
                          {"name", name},
                          {"cat", "comm"},
                          {"ts", t.start_ms * kUs},
                          {"args", {{"done_ms", t.end_ms}}}});
      }
    }
  }
  // Transfers: a slice on a track of the link and a flow from sender to receiver. A link starts
  // the next transfer once the last one is serialised, before its latency has passed, so its
  // transfers overlap: each link gets as many lanes as it has transfers in flight at once, and
  // every track nests (core/trace_lanes.h).
  std::vector<std::pair<int, int>> links;  // in order of the first transfer on each
  std::vector<std::vector<size_t>> on_link;
  for (size_t i = 0; i < r.transfers.size(); ++i) {
    const std::pair<int, int> link(r.transfers[i].src_device, r.transfers[i].dst_device);
    const size_t l = std::find(links.begin(), links.end(), link) - links.begin();
    if (l == links.size()) links.push_back(link), on_link.emplace_back();
    on_link[l].push_back(i);
  }
  std::vector<int> transfer_tid(r.transfers.size(), 0);
  int next_tid = P;
  for (size_t l = 0; l < links.size(); ++l) {
    std::vector<std::pair<double, double>> spans;
    for (size_t i : on_link[l]) spans.emplace_back(r.transfers[i].start_ms, r.transfers[i].end_ms);
    const std::vector<int> lane = assign_lanes(spans);
    const int lanes = *std::max_element(lane.begin(), lane.end()) + 1;
    for (int k = 0; k < lanes; ++k) {
      const std::string name = "link " + std::to_string(links[l].first) + "->" +
                               std::to_string(links[l].second) +
                               (k == 0 ? "" : " #" + std::to_string(k + 1));
      events.push_back({{"ph", "M"},
                        {"pid", 0},
                        {"tid", next_tid + k},
                        {"name", "thread_name"},
                        {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"},
                        {"pid", 0},
                        {"tid", next_tid + k},
                        {"name", "thread_sort_index"},
                        {"args", {{"sort_index", next_tid + k}}}});
    }
    for (size_t j = 0; j < on_link[l].size(); ++j) transfer_tid[on_link[l][j]] = next_tid + lane[j];
    next_tid += lanes;
  }
  int flow = 0;
  for (size_t i = 0; i < r.transfers.size(); ++i) {
    const Transfer& x = r.transfers[i];
    const std::string name = schedule::to_string(x.send);
    const int tid = transfer_tid[i];
    events.push_back({{"ph", "X"},
                      {"pid", 0},
                      {"tid", tid},
                      {"name", name},
                      {"cat", "comm"},
                      {"ts", x.start_ms * kUs},
                      {"dur", (x.end_ms - x.start_ms) * kUs},
                      {"args", {{"bytes", x.bytes}}}});
    // The flow starts inside the producing slice (it ends where the data left) and binds to the
    // next slice on the receiver, the compute that consumes it.
    events.push_back({{"ph", "s"},
                      {"pid", 0},
                      {"tid", x.src_device},
                      {"name", name},
                      {"cat", "flow"},
                      {"id", flow},
                      {"ts", x.start_ms * kUs - 0.001}});
    events.push_back({{"ph", "f"},
                      {"pid", 0},
                      {"tid", x.dst_device},
                      {"name", name},
                      {"cat", "flow"},
                      {"id", flow},
                      {"ts", x.end_ms * kUs}});
    ++flow;
  }
  for (int d = 0; d < P && d < static_cast<int>(r.activation.size()); ++d)
    for (const MemorySample& m : r.activation[d])
      events.push_back({{"ph", "C"},
                        {"pid", 0},
                        {"name", "activation bytes, device " + std::to_string(d)},
                        {"ts", m.time_ms * kUs},
                        {"args", {{"bytes", m.bytes}}}});
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"kind", s.kind},
                {"devices", s.num_devices},
                {"microbatches", s.num_microbatches},
                {"chunks", s.num_chunks},
                {"makespan_ms", r.makespan_ms},
                {"bubble_ratio", r.overall_bubble_ratio}}}};
  return doc.dump();
}

}  // namespace bw::sim
