// Tables, JSON and SVG carry what the replay computed.
#include "forecast/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace bw::forecast {
namespace {

std::vector<ReplayResult> two_policies() {
  const auto t = parse_trace(
      "0,add,a\n0,add,b\n0,add,c\n3500,remove,b\n5000,add,d\n7000,remove,a\n", "report");
  PolicyCosts c;
  c.breakwater.fixed_reconfigure_ms = 2000;
  c.restart.restart_ms = 1000;
  c.restart.checkpoint_every_steps = 2;
  c.restart.checkpoint_ms = 100;
  ConstantModel m(1000, 16);
  ReplayOptions o;
  o.duration_ms = 20000;
  return {replay(t, PolicyKind::kBreakwater, c, m, o), replay(t, PolicyKind::kRestart, c, m, o)};
}

int occurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Report, TableHasABlockPerPolicyWithItsFraction) {
  const auto rs = two_policies();
  const auto text = format_tables(rs);
  EXPECT_EQ(occurrences(text, "policy "), 2);
  for (const auto& r : rs) {
    EXPECT_NE(text.find(fmt::format("{:8.2f}%", 100 * r.useful_fraction())), std::string::npos)
        << text;
  }
}

TEST(Report, JsonCarriesTheBreakdown) {
  const auto rs = two_policies();
  const auto j = to_json(rs);
  ASSERT_EQ(j.size(), 2u);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(j[i]["policy"], to_string(rs[i].policy));
    EXPECT_DOUBLE_EQ(j[i]["useful_fraction"].get<double>(), rs[i].useful_fraction());
    double sum = 0;
    for (const auto& [k, v] : j[i]["time_ms"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum, rs[i].duration_ms, 1e-6);
    EXPECT_EQ(j[i]["failures"], 2);
    EXPECT_EQ(j[i]["joins"], 1);
    EXPECT_EQ(j[i]["timeline"].size(), rs[i].timeline.size());
  }
}

TEST(Report, CostsJsonHasEveryParameter) {
  PolicyCosts c = oobleck_artifact_bert_large();
  c.restart.checkpoint_every_steps = 7;
  const auto j = to_json(c);
  EXPECT_DOUBLE_EQ(j["breakwater"]["fixed_reconfigure_ms"].get<double>(), 2000);
  EXPECT_EQ(j["restart"]["checkpoint_every_steps"], 7);
  EXPECT_DOUBLE_EQ(j["redundant"]["useful_share"].get<double>(), 0.1971);
  EXPECT_FALSE(to_json(PolicyCosts{})["breakwater"].contains("fixed_reconfigure_ms"));
}

TEST(Report, SvgHasALinePerPolicyAndATickPerEvent) {
  const auto rs = two_policies();
  const auto svg = render_svg(rs, {.title = "a <b> & c"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(occurrences(svg, "<polyline"), 2);
  // Failure ticks: 2 in the plot plus 1 in the legend; joins: 1 plus 1.
  EXPECT_EQ(occurrences(svg, "stroke=\"#d62728\""), 3);
  EXPECT_EQ(occurrences(svg, "stroke=\"#2ca02c\" stroke-width=\"1\""), 1);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; c"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

}  // namespace
}  // namespace bw::forecast
