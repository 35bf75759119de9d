#include "forecast/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace bw::forecast {
namespace {

std::string hours(double ms) { return fmt::format("{:9.3f} h", ms / 3600e3); }

std::string share(double ms, double total) {
  return total > 0 ? fmt::format("{:6.2f}%", 100.0 * ms / total) : std::string("     -");
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// 1, 2 or 5 times a power of ten, so that about `target` ticks span `range`.
double nice_step(double range, int target) {
  const double raw = range / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string format_tables(const std::vector<ReplayResult>& results) {
  std::string out;
  for (const auto& r : results) {
    const auto& t = r.time;
    const double D = r.duration_ms;
    out += fmt::format("policy {}  ({:.2f} h, {} failures, {} joins)\n", to_string(r.policy),
                       D / 3600e3, r.failures, r.joins);
    out += fmt::format("  useful-work fraction   {:8.2f}%\n", 100.0 * r.useful_fraction());
    out += fmt::format("  samples trained        {:12.4g}\n", r.samples);
    out += fmt::format("  steps committed        {:12.1f}\n", r.steps);
    out += "  time                       hours    share\n";
    auto row = [&](const char* name, double ms) {
      out += fmt::format("    {:<20} {}  {}\n", name, hours(ms), share(ms, D));
    };
    row("useful", t.useful_ms);
    row("redundant work", t.redundant_ms);
    row("lost (rolled back)", t.lost_ms);
    row("checkpoints", t.checkpoint_ms);
    row("reconfiguration", t.reconfigure_ms);
    row("restart", t.restart_ms);
    row("rebalance", t.rebalance_ms);
    row("stalled", t.stalled_ms);
    out += fmt::format("  reconfigurations {}, restarts {}, rebalances {}\n\n", r.reconfigurations,
                       r.restarts, r.rebalances);
  }
  return out;
}

json::Json to_json(const ReplayResult& r) {
  json::Json j;
  j["policy"] = to_string(r.policy);
  j["duration_ms"] = r.duration_ms;
  j["useful_fraction"] = r.useful_fraction();
  j["samples"] = r.samples;
  j["steps"] = r.steps;
  j["failures"] = r.failures;
  j["joins"] = r.joins;
  j["reconfigurations"] = r.reconfigurations;
  j["restarts"] = r.restarts;
  j["rebalances"] = r.rebalances;
  const auto& t = r.time;
  j["time_ms"] = {
      {"useful", t.useful_ms},         {"redundant", t.redundant_ms},     {"lost", t.lost_ms},
      {"checkpoint", t.checkpoint_ms}, {"reconfigure", t.reconfigure_ms}, {"restart", t.restart_ms},
      {"rebalance", t.rebalance_ms},   {"stalled", t.stalled_ms}};
  auto& tl = j["timeline"] = json::Json::array();
  for (const auto& s : r.timeline) {
    tl.push_back({{"start_ms", s.start_ms},
                  {"end_ms", s.end_ms},
                  {"samples_per_s", s.samples_per_s},
                  {"nodes", s.nodes}});
  }
  j["failure_times_ms"] = r.failure_times_ms;
  j["join_times_ms"] = r.join_times_ms;
  return j;
}

json::Json to_json(const PolicyCosts& c) {
  json::Json j;
  j["breakwater"] = {{"detection_ms", c.breakwater.detection_ms},
                     {"inter_node_gbps", c.breakwater.inter_node_gbps},
                     {"regroup_ms", c.breakwater.regroup_ms},
                     {"replan_horizon_ms", c.breakwater.replan_horizon_ms}};
  if (c.breakwater.fixed_reconfigure_ms) {
    j["breakwater"]["fixed_reconfigure_ms"] = *c.breakwater.fixed_reconfigure_ms;
  }
  j["restart"] = {{"restart_ms", c.restart.restart_ms},
                  {"checkpoint_ms", c.restart.checkpoint_ms},
                  {"checkpoint_every_steps", c.restart.checkpoint_every_steps}};
  j["redundant"] = {{"rebalance_ms", c.redundant.rebalance_ms},
                    {"restart_ms", c.redundant.restart_ms},
                    {"useful_share", c.redundant.useful_share}};
  return j;
}

json::Json to_json(const std::vector<ReplayResult>& results) {
  json::Json j = json::Json::array();
  for (const auto& r : results) j.push_back(to_json(r));
  return j;
}

std::string render_svg(const std::vector<ReplayResult>& results, const SvgOptions& o) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  const double left = 70, right = 170, top = 40, bottom = 80;
  const double W = o.width, H = o.height;
  const double pw = W - left - right, ph = H - top - bottom;
  double duration = 0, peak = 0;
  for (const auto& r : results) {
    duration = std::max(duration, r.duration_ms);
    for (const auto& s : r.timeline) peak = std::max(peak, s.samples_per_s);
  }
  if (duration <= 0) duration = 1;
  if (peak <= 0) peak = 1;
  const double ystep = nice_step(peak, 5);
  const double ymax = std::ceil(peak * 1.05 / ystep) * ystep;
  const double xhours = duration / 3600e3;
  const double xstep = nice_step(xhours, 8);
  auto X = [&](double ms) { return left + pw * ms / duration; };
  auto Y = [&](double v) { return top + ph * (1 - v / ymax); };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      o.width, o.height);
  if (!o.title.empty()) {
    s += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n", left, escape(o.title));
  }
  // Grid and axes.
  for (double v = 0; v <= ymax + 1e-9 * ymax; v += ystep) {
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
        left, Y(v), left + pw, Y(v), left - 6, Y(v) + 4, v);
  }
  for (double h = 0; h <= xhours + 1e-9 * xhours; h += xstep) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:g}</text>\n",
        X(h * 3600e3), top, top + ph, top + ph + 16, h);
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
      top, pw, ph);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time (hours)</text>\n",
                   left + pw / 2, H - 12);
  s += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">"
      "throughput (samples/s)</text>\n",
      top + ph / 2);
  // Failures and joins: ticks under the axis (from the first result; the trace is shared).
  if (!results.empty()) {
    for (double t : results.front().failure_times_ms) {
      s += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#d62728\" "
          "stroke-width=\"1\"/>\n",
          X(t), top + ph + 22, top + ph + 34);
    }
    for (double t : results.front().join_times_ms) {
      s += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#2ca02c\" "
          "stroke-width=\"1\"/>\n",
          X(t), top + ph + 36, top + ph + 48);
    }
  }
  // One step line per policy, the first drawn last so that it stays on top where they overlap.
  for (std::size_t i = results.size(); i-- > 0;) {
    const auto& r = results[i];
    const char* color = kColors[i % 5];
    // Averaged over bins of about 3 pixels: a 2 s reconfiguration and a 76 s restart differ in
    // width, which an instantaneous line at this scale would hide.
    const int bins = std::max(1, static_cast<int>(pw / 3));
    const double bin_ms = duration / bins;
    std::vector<double> avg(static_cast<std::size_t>(bins), 0.0);
    for (const auto& seg : r.timeline) {
      const int b0 = std::clamp(static_cast<int>(seg.start_ms / bin_ms), 0, bins - 1);
      const int b1 = std::clamp(static_cast<int>(seg.end_ms / bin_ms), 0, bins - 1);
      for (int b = b0; b <= b1; ++b) {
        const double lo = std::max(seg.start_ms, b * bin_ms);
        const double hi = std::min(seg.end_ms, (b + 1) * bin_ms);
        if (hi > lo) avg[static_cast<std::size_t>(b)] += seg.samples_per_s * (hi - lo) / bin_ms;
      }
    }
    std::string pts;
    for (int b = 0; b < bins; ++b) {
      const double y = Y(avg[static_cast<std::size_t>(b)]);
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", X(b * bin_ms), y, X((b + 1) * bin_ms), y);
    }
    s += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-opacity=\"0.9\" "
        "points=\"{}\"/>\n",
        color, i == 0 ? 2.0 : 1.2, pts);
    const double ly = top + 14 + 34 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"3\"/>\n<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n"
        "<text x=\"{4:.1f}\" y=\"{7:.1f}\" fill=\"#555\">{8:.1f}% useful</text>\n",
        left + pw + 12, ly, left + pw + 32, color, left + pw + 38, ly + 4,
        escape(to_string(r.policy)), ly + 18, 100 * r.useful_fraction());
  }
  const double ky = top + 14 + 34 * static_cast<double>(results.size()) + 10;
  s += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#d62728\"/>"
      "<text x=\"{3:.1f}\" y=\"{4:.1f}\">failure</text>\n"
      "<line x1=\"{0:.1f}\" y1=\"{5:.1f}\" x2=\"{0:.1f}\" y2=\"{6:.1f}\" stroke=\"#2ca02c\"/>"
      "<text x=\"{3:.1f}\" y=\"{7:.1f}\">join</text>\n",
      left + pw + 22, ky, ky + 12, left + pw + 38, ky + 10, ky + 20, ky + 32, ky + 30);
  s += "</svg>\n";
  return s;
}

}  // namespace bw::forecast
