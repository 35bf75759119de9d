#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/render.h"

namespace bw::sim {

namespace {

using schedule::ActionKind;

// Hue and name per compute kind, after the papers' figures (forward blue, backward green; the
// zero-bubble split: I teal, W purple).
struct Style {
  int hue;
  int saturation;
  const char* label;
};
Style style(ActionKind k) {
  switch (k) {
    case ActionKind::F:
      return {212, 70, "forward (F)"};
    case ActionKind::B:
      return {135, 50, "backward (B)"};
    case ActionKind::I:
      return {170, 55, "backward, inputs (I)"};
    default:
      return {275, 45, "backward, weights (W)"};
  }
}

std::string fill(ActionKind k, int local, int locals) {
  const Style st = style(k);
  const double l = locals <= 1 ? 55 : 40 + 32.0 * local / (locals - 1);
  return fmt::format("hsl({},{}%,{:.0f}%)", st.hue, st.saturation, l);
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A tick step of 1, 2 or 5 times a power of ten giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string svg_timeline(const schedule::Schedule& s, const SimResult& r,
                         const SvgOptions& options) {
  const int P = s.num_devices;
  const double left = 64, top = 52, row = options.row_height_px, width = options.width_px;
  const double span = r.makespan_ms > 0 ? r.makespan_ms : 1;
  const double scale = width / span;
  const double rows_bottom = top + P * row;
  const double height = rows_bottom + 78;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      left + width + 16, height, left + width + 16, height);
  out += fmt::format("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  double peak = 0;
  for (double u : r.peak_activation_units) peak = std::max(peak, u);
  const std::string title = options.title.empty()
                                ? fmt::format("{}: {} devices, {} microbatches, {} chunks", s.kind,
                                              P, s.num_microbatches, s.num_chunks)
                                : options.title;
  out += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                     left, escape(title));
  out += fmt::format(
      "<text x=\"{}\" y=\"38\" font-size=\"12\" fill=\"#444\">makespan {:.4g} ms, bubble "
      "{:.1f}%, peak activation memory {:.3g} M_a</text>\n",
      left, r.makespan_ms, 100 * r.overall_bubble_ratio, peak);

  // Rows: a light background (idle time shows through), then the compute boxes.
  std::vector<std::vector<int>> local_index(P);
  std::vector<int> locals(P, 0), slot_of_chunk(s.num_chunks, 0);
  for (int c = 0; c < s.num_chunks; ++c) slot_of_chunk[c] = locals[s.chunk_device[c]]++;
  bool present[4] = {false, false, false, false};
  for (int d = 0; d < P; ++d) {
    const double y = top + d * row;
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"end\" "
        "dominant-baseline=\"middle\">dev {}</text>\n",
        left - 8, y + row / 2, d);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"#f1f1f1\"/>\n",
        left, y + 1, width, row - 2);
    if (d >= static_cast<int>(r.timing.size())) continue;
    const auto& list = s.actions[d];
    for (size_t k = 0; k < list.size(); ++k) {
      const auto& a = list[k];
      if (!schedule::is_compute(a.kind)) continue;
      present[static_cast<int>(a.kind)] = true;
      const auto& t = r.timing[d][k];
      const double x = left + t.start_ms * scale, w = (t.end_ms - t.start_ms) * scale;
      out += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" "
          "stroke=\"white\" stroke-width=\"{}\"><title>{} [{:.4g}, {:.4g}] ms</title></rect>\n",
          x, y + 2, std::max(w, 0.3), row - 4, fill(a.kind, slot_of_chunk[a.chunk], locals[d]),
          w > 4 ? 1 : 0, schedule::to_string(a), t.start_ms, t.end_ms);
      const std::string label = std::to_string(a.microbatch);
      const double font = std::min(12.0, row * 0.5);
      if (w >= font * 0.62 * label.size() + 2)
        out += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" "
            "text-anchor=\"middle\" dominant-baseline=\"central\" "
            "fill=\"white\">{}</text>\n",
            x + w / 2, y + row / 2, font, label);
    }
  }

  // Time axis.
  const double step = tick_step(span, 10);
  out += fmt::format(
      "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
      "stroke=\"#333\"/>\n",
      left, rows_bottom + 4, left + width, rows_bottom + 4);
  for (double tk = 0; tk <= span + 1e-9; tk += step) {
    const double x = left + tk * scale;
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
        "stroke=\"#333\"/>\n",
        x, rows_bottom + 4, x, rows_bottom + 9);
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" "
        "text-anchor=\"middle\">{:g}</text>\n",
        x, rows_bottom + 21, tk);
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" "
      "text-anchor=\"end\">ms</text>\n",
      left + width, rows_bottom + 34);

  // Legend: kinds present, then what the shades and numbers mean.
  double lx = left;
  const double ly = rows_bottom + 48;
  for (int k = 0; k < 4; ++k) {
    if (!present[k]) continue;
    const auto kind = static_cast<ActionKind>(k);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"14\" "
        "fill=\"{}\"/>\n",
        lx, ly, fill(kind, 0, 1));
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" "
        "dominant-baseline=\"middle\">{}</text>\n",
        lx + 19, ly + 7, style(kind).label);
    lx += 40 + 7.2 * std::string(style(kind).label).size();
  }
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"14\" "
      "fill=\"#f1f1f1\"/>\n",
      lx, ly);
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" "
      "dominant-baseline=\"middle\">idle</text>\n",
      lx + 19, ly + 7);
  lx += 60;
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#555\" "
      "dominant-baseline=\"middle\">numbers: microbatch; darker: a device's "
      "earlier chunk</text>\n",
      lx, ly + 7);
  out += "</svg>\n";
  return out;
}

}  // namespace bw::sim
