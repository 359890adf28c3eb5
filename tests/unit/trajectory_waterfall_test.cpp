// The span waterfall of `kernex logs view --html`: hand-written trajectories laid out into rows
// (tools called from code under their code run, sub-queries with their own spans, malformed
// events), and the SVG drawn from them escaped, script-free and with proportional bars.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "html_text.hpp"
#include "kernex/trajectory_view.hpp"
#include "waterfall.hpp"

namespace {

using kernex::Json;
using kernex::SpanKind;
using kernex::Waterfall;

// An event as the recorder writes it: `ts_ms` is when it was recorded, i.e. when it ENDED.
Json event(std::uint64_t seq, const char* type, double ts_ms, Json fields = Json::object()) {
  fields["seq"] = seq;
  fields["type"] = type;
  fields["ts_ms"] = ts_ms;
  return fields;
}

constexpr double kT0 = 1'700'000'000'000.0;

// A model call of the root span "0" to model "m1".
Json model_call(std::uint64_t seq, double ts_ms, double latency_ms, int in, int out, double cost) {
  return event(seq, "provider_call", ts_ms,
               {{"span", "0"},
                {"model", "m1"},
                {"latency_ms", latency_ms},
                {"input_tokens", in},
                {"output_tokens", out},
                {"cost_usd", cost}});
}

// A root run whose code called two tools; one ordinary tool call; two model calls.
std::vector<Json> code_run_trajectory() {
  return {
      event(1, "run_start", kT0, {{"question", "count the words"}, {"kind", "run"}}),
      model_call(2, kT0 + 100, 100, 40, 8, 0.001),
      // Recorded before their code run, which is recorded when it ends.
      event(3, "tool_call", kT0 + 150,
            {{"span", "0"}, {"name", "read"}, {"duration_ms", 20}, {"code_run", "c1"}}),
      event(4, "tool_call", kT0 + 180,
            {{"span", "0"}, {"name", "grep"}, {"duration_ms", 10}, {"code_run", "c1"}}),
      event(5, "code_run", kT0 + 200,
            {{"span", "0"},
             {"id", "c1"},
             {"code", "x = tools.read()\nprint(x)"},
             {"wall_ms", 90},
             {"tool_calls", 2}}),
      event(6, "result", kT0 + 199, {{"span", "0"}, {"code_run", "c1"}, {"value", 3}}),
      event(7, "tool_call", kT0 + 230,
            {{"span", "0"}, {"name", "word_count"}, {"duration_ms", 25}}),
      model_call(8, kT0 + 300, 60, 60, 9, 0.002),
      event(9, "run_end", kT0 + 310,
            {{"outcome", "end_turn"},
             {"latency_ms", 310},
             {"tree_input_tokens", 100},
             {"tree_output_tokens", 17},
             {"tree_cost_usd", 0.003}}),
  };
}

struct Expected {
  SpanKind kind;
  std::string label;
  std::size_t depth;
  double start, duration;
};

void expect_rows(const Waterfall& w, const std::vector<Expected>& expected) {
  ASSERT_EQ(w.rows.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i) + " " + w.rows[i].label);
    EXPECT_EQ(w.rows[i].kind, expected[i].kind);
    EXPECT_EQ(w.rows[i].label, expected[i].label);
    EXPECT_EQ(w.rows[i].depth, expected[i].depth);
    EXPECT_DOUBLE_EQ(w.rows[i].start_ms, expected[i].start);
    EXPECT_DOUBLE_EQ(w.rows[i].duration_ms, expected[i].duration);
  }
}

TEST(Waterfall, ToolsCalledFromCodeAreChildrenOfTheirCodeRun) {
  const Waterfall w = kernex::layout_waterfall(code_run_trajectory());
  EXPECT_DOUBLE_EQ(w.total_ms, 310);
  EXPECT_EQ(w.unplaced, 0u);
  expect_rows(w, {{SpanKind::Run, "run count the words", 0, 0, 310},
                  {SpanKind::Model, "model m1", 1, 0, 100},
                  {SpanKind::Code, "code x = tools.read()…", 1, 110, 90},
                  {SpanKind::Tool, "read", 2, 130, 20},
                  {SpanKind::Tool, "grep", 2, 170, 10},
                  {SpanKind::Tool, "word_count", 1, 205, 25},
                  {SpanKind::Model, "model m1", 1, 240, 60}});
  EXPECT_TRUE(w.rows[0].totals);
  EXPECT_DOUBLE_EQ(w.rows[0].input_tokens, 100);
  EXPECT_DOUBLE_EQ(w.rows[0].cost_usd, 0.003);
  EXPECT_FALSE(w.rows[1].totals);
  EXPECT_DOUBLE_EQ(w.rows[1].input_tokens, 40);
  EXPECT_DOUBLE_EQ(w.rows[1].output_tokens, 8);
  EXPECT_DOUBLE_EQ(w.rows[6].cost_usd, 0.002);
  EXPECT_EQ(w.rows[3].seq, 3u);
}

TEST(Waterfall, SubQueriesNestTheirOwnSpansUnderThem) {
  const std::vector<Json> events = {
      event(1, "run_start", kT0, {{"question", "q"}}),
      event(2, "sub_call", kT0 + 50,
            {{"span", "0.1"},
             {"kind", "llm_query"},
             {"prompt", "summarise"},
             {"latency_ms", 40},
             {"input_tokens", 10},
             {"output_tokens", 5},
             {"cost_usd", 1e-4}}),
      // The rlm_query "0.2" records its own calls first, its sub_call when it ends.
      event(3, "provider_call", kT0 + 100, {{"span", "0.2"}, {"model", "m2"}, {"latency_ms", 30}}),
      event(4, "sub_call", kT0 + 140,
            {{"span", "0.2.1"}, {"kind", "llm_query"}, {"prompt", "inner"}, {"latency_ms", 20}}),
      event(5, "provider_call", kT0 + 170, {{"span", "0.2"}, {"model", "m2"}, {"latency_ms", 20}}),
      event(6, "sub_call", kT0 + 180,
            {{"span", "0.2"},
             {"parent", "0"},
             {"kind", "rlm_query"},
             {"prompt", "dig\ndeeper"},
             {"latency_ms", 110},
             {"input_tokens", 30}}),
      event(7, "code_run", kT0 + 200, {{"span", "0"}, {"id", "c1"}, {"wall_ms", 195}}),
      event(8, "run_end", kT0 + 210, {{"latency_ms", 210}}),
  };
  const Waterfall w = kernex::layout_waterfall(events);
  expect_rows(w, {{SpanKind::Run, "run q", 0, 0, 210},
                  {SpanKind::Code, "code ", 1, 5, 195},
                  {SpanKind::SubQuery, "llm_query summarise", 1, 10, 40},
                  {SpanKind::SubQuery, "rlm_query dig…", 1, 70, 110},
                  {SpanKind::Model, "model m2", 2, 70, 30},
                  {SpanKind::SubQuery, "llm_query inner", 2, 120, 20},
                  {SpanKind::Model, "model m2", 2, 150, 20}});
  EXPECT_EQ(w.rows[3].span, "0.2");
  EXPECT_EQ(w.rows[5].span, "0.2.1");
  EXPECT_TRUE(w.rows[3].totals);   // an rlm_query's tokens include its calls'
  EXPECT_FALSE(w.rows[2].totals);  // an llm_query is one model call
}

// Sub-queries started from code (their sub_call names the code run) sit under it, as its tools
// do; an rlm_query's own calls stay under the rlm_query.
TEST(Waterfall, SubQueriesFromCodeAreChildrenOfTheirCodeRun) {
  const std::vector<Json> events = {
      event(1, "run_start", kT0, {{"question", "q"}}),
      event(2, "sub_call", kT0 + 50,
            {{"span", "0.1"},
             {"kind", "llm_query"},
             {"prompt", "summarise"},
             {"latency_ms", 40},
             {"code_run", "c1"}}),
      event(3, "provider_call", kT0 + 100, {{"span", "0.2"}, {"model", "m2"}, {"latency_ms", 30}}),
      event(4, "sub_call", kT0 + 180,
            {{"span", "0.2"},
             {"parent", "0"},
             {"kind", "rlm_query"},
             {"prompt", "dig"},
             {"latency_ms", 110},
             {"code_run", "c1"}}),
      event(5, "code_run", kT0 + 200, {{"span", "0"}, {"id", "c1"}, {"wall_ms", 195}}),
      event(6, "run_end", kT0 + 210, {{"latency_ms", 210}}),
  };
  const Waterfall w = kernex::layout_waterfall(events);
  expect_rows(w, {{SpanKind::Run, "run q", 0, 0, 210},
                  {SpanKind::Code, "code ", 1, 5, 195},
                  {SpanKind::SubQuery, "llm_query summarise", 2, 10, 40},
                  {SpanKind::SubQuery, "rlm_query dig", 2, 70, 110},
                  {SpanKind::Model, "model m2", 3, 70, 30}});
}

TEST(Waterfall, MalformedEventsAreSkippedOrDrawnAtASafePlace) {
  std::vector<Json> events = {
      Json::array({1, 2}),
      Json("a string"),
      Json(42),
      event(1, "run_start", kT0, {{"question", Json::array()}}),
      Json{{"type", 5}, {"ts_ms", kT0}},
      event(2, "weird", kT0 + 5),
      event(3, "provider_call", 0, {{"latency_ms", 10}}),   // replaced below: ts_ms "soon"
      Json{{"type", "provider_call"}, {"latency_ms", 10}},  // no ts_ms
      event(4, "tool_call", 1e300, {{"name", "far"}}),
      event(5, "tool_call", kT0 + 20, {{"name", "negative"}, {"duration_ms", -5}}),
      event(6, "code_run", kT0 + 30, {{"wall_ms", 1e308}, {"id", Json::object()}}),
      event(7, "tool_call", kT0 + 40,
            {{"name", "orphan"},
             {"duration_ms", 5},
             {"code_run", "no-such-run"},
             {"is_error", "yes"}}),
      event(8, "tool_call", kT0 + 45, {{"name", 7}, {"duration_ms", "5"}, {"code_run", 42}}),
      event(9, "provider_call", kT0 + 50,
            {{"input_tokens", "many"},
             {"output_tokens", 1e30},
             {"cost_usd", -1},
             {"latency_ms", 5},
             {"span", 7},
             {"is_error", "yes"}}),
      event(10, "sub_call", kT0 + 60, {{"span", "0.9.9.9"}, {"latency_ms", 5}}),
      event(11, "sub_call", kT0 + 70, {{"span", "0"}, {"latency_ms", 5}}),
      event(12, "tool_call", kT0 - 500, {{"name", "before the run"}, {"duration_ms", 5}}),
      event(13, "run_end", kT0 + 80, {{"latency_ms", Json()}, {"tree_cost_usd", "free"}}),
  };
  events[6]["ts_ms"] = "soon";
  Waterfall w;
  ASSERT_NO_THROW(w = kernex::layout_waterfall(events));
  EXPECT_EQ(w.unplaced, 3u);  // "soon", none, 1e300
  ASSERT_EQ(w.rows.size(), 9u);
  for (const auto& r : w.rows) {
    SCOPED_TRACE(r.label);
    EXPECT_TRUE(std::isfinite(r.start_ms) && std::isfinite(r.duration_ms));
    EXPECT_GE(r.start_ms, 0);
    EXPECT_GE(r.duration_ms, 0);
    EXPECT_LE(r.start_ms + r.duration_ms, w.total_ms);
    EXPECT_EQ(r.input_tokens + r.output_tokens + r.cost_usd, 0);
  }
  EXPECT_DOUBLE_EQ(w.total_ms, 80);
  EXPECT_EQ(w.rows[0].label, "run ");
  expect_rows(w, {{SpanKind::Run, "run ", 0, 0, 80},
                  {SpanKind::Tool, "before the run", 1, 0, 0},
                  {SpanKind::Tool, "negative", 1, 20, 0},
                  {SpanKind::Code, "code ", 1, 30, 0},  // an absurd wall time is no time
                  {SpanKind::Tool, "orphan (from code)", 1, 35, 5},
                  {SpanKind::Tool, "", 1, 45, 0},
                  {SpanKind::Model, "model ", 1, 45, 5},
                  {SpanKind::SubQuery, " ", 1, 55, 5},
                  {SpanKind::SubQuery, " ", 1, 65, 5}});
  EXPECT_FALSE(w.rows[6].error);  // is_error must be true, not "yes"
  EXPECT_NO_THROW(kernex::render_waterfall(w));
  EXPECT_NO_THROW(kernex::render_trajectory_html(events));
}

TEST(Waterfall, WithoutRunStartTheEarliestSpanStartsTheAxis) {
  const Waterfall w = kernex::layout_waterfall(
      {event(1, "tool_call", kT0 + 100, {{"name", "a"}, {"duration_ms", 40}}),
       event(2, "tool_call", kT0 + 90, {{"name", "b"}, {"duration_ms", 10}})});
  expect_rows(w, {{SpanKind::Run, "run", 0, 0, 40},
                  {SpanKind::Tool, "a", 1, 0, 40},
                  {SpanKind::Tool, "b", 1, 20, 10}});
  EXPECT_TRUE(kernex::layout_waterfall({}).rows.empty());
  EXPECT_EQ(kernex::layout_waterfall({Json{{"type", "code_run"}}}).unplaced, 1u);
}

TEST(Waterfall, RowsAreCappedAndDeepChainsDoNotRecurse) {
  std::vector<Json> events{event(1, "run_start", kT0)};
  std::string span = "0";
  for (int i = 0; i < 1500; ++i) {
    span += ".1";
    events.push_back(event(2 + i, "sub_call", kT0 + 10, {{"span", span}, {"latency_ms", 5}}));
  }
  for (int i = 0; i < 1000; ++i)
    events.push_back(event(5000 + i, "tool_call", kT0 + 20, {{"name", "t"}}));
  const Waterfall w = kernex::layout_waterfall(events);
  ASSERT_EQ(w.rows.size(), 2000u);
  EXPECT_EQ(w.hidden, 501u);
  EXPECT_EQ(w.rows[1500].depth, 1500u);  // the chain, drawn in full before the tools
  EXPECT_EQ(w.rows[1501].label, "t");
  EXPECT_NE(kernex::render_waterfall(w).find("501 more span(s) are not drawn"), std::string::npos);
}

TEST(Waterfall, UntrustedTextIsEscapedCappedAndNeverMarkup) {
  const std::string hostile = "</svg><script>alert(\"x\")</script>' onload='alert(1)\x01\x7f";
  auto events = code_run_trajectory();
  events[1]["model"] = hostile;
  events[2]["name"] = hostile + std::string(1 << 20, 'A');
  events[4]["code"] = "<img src=x onerror=alert(1)>";
  events[0]["question"] = "\xE2\x82\xAC" + std::string(200, 'q');  // a multi-byte character
  const std::string svg = kernex::render_waterfall(kernex::layout_waterfall(events));
  EXPECT_LT(svg.size(), 30'000u) << "a 1 MiB tool name must be capped";
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("<img"), std::string::npos);
  EXPECT_EQ(svg.find("</svg>"), svg.rfind("</svg>"));  // only the figure's own
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  EXPECT_EQ(svg.find('\x7f'), std::string::npos);
  EXPECT_NE(svg.find("&lt;/svg&gt;&lt;script&gt;alert(&quot;x&quot;)"), std::string::npos);
  EXPECT_NE(svg.find("&#39; onload=&#39;"), std::string::npos);
  // No attribute from the run: inside tags only the renderer's own, no handler, no link out.
  EXPECT_FALSE(std::regex_search(svg, std::regex(R"(<[^>]*\son[a-z]+\s*=)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(svg, std::regex(R"(<[^>]*\s(href|src)\s*=)", std::regex::icase)));

  EXPECT_EQ(kernex::html::cap_label("\xE2\x82\xAC\xE2\x82\xAC", 4), "\xE2\x82\xAC…");
  EXPECT_EQ(kernex::html::cap_label("one\ntwo", 100), "one…");
  EXPECT_EQ(kernex::html::cap_label("one\n", 100), "one");
  EXPECT_EQ(kernex::html::escape("a\tb\x1b[0m"), "a\tb\xEF\xBF\xBD[0m");
}

TEST(Waterfall, BarsAreProportionalWithExactNumbersAsTextAndTooltips) {
  const std::string svg = kernex::render_waterfall(kernex::layout_waterfall(code_run_trajectory()));
  auto has = [&](const std::string& s) { return svg.find(s) != std::string::npos; };
  using kernex::html::fixed;
  // Token bars (90 px for the largest: the run's 117) and cost bars (70 px for $0.003).
  EXPECT_TRUE(has("width='" + fixed(40.0 / 117 * 90, 2) + "' height='12' fill='#1c7ed6'"));
  EXPECT_TRUE(has("width='" + fixed(9.0 / 117 * 90, 2) + "' height='12' fill='#74c0fc'"));
  EXPECT_TRUE(has("width='" + fixed(0.002 / 0.003 * 70, 2) + "' height='12' fill='#f59f00'"));
  EXPECT_TRUE(has(">40 + 8</text>"));
  EXPECT_TRUE(has(">$0.002000</text>"));
  EXPECT_TRUE(has("40 input + 8 output tokens, $0.001000"));  // the model call's tooltip
  EXPECT_TRUE(has("in all, its own calls included: 100 input + 17 output tokens"));
  // The code run on the time track: 110..200 of 310 ms over 540 px from x=250.
  EXPECT_TRUE(has("<rect x='" + fixed(250 + 110.0 / 310 * 540, 2) + "' y='74' width='" +
                  fixed(90.0 / 310 * 540, 2) + "' height='12' fill='#2f9e44'"));
  // The axis: steps of 50 ms up to 300 ms.
  EXPECT_TRUE(has(">0 ms</text>"));
  EXPECT_TRUE(has(">300 ms</text>"));
  EXPECT_FALSE(has(">350 ms</text>"));

  auto slow = code_run_trajectory();
  slow.back()["ts_ms"] = kT0 + 4500;
  const std::string seconds = kernex::render_waterfall(kernex::layout_waterfall(slow));
  EXPECT_NE(seconds.find(">4 s</text>"), std::string::npos);
  EXPECT_EQ(seconds.find(">5 s</text>"), std::string::npos);
}

TEST(Waterfall, IsTheFirstSectionOfThePage) {
  const std::string page = kernex::render_trajectory_html(code_run_trajectory());
  const auto waterfall = page.find("<h2>Waterfall</h2><figure class='waterfall'><svg");
  ASSERT_NE(waterfall, std::string::npos);
  EXPECT_LT(waterfall, page.find("<h2>Tokens and cost per step</h2>"));
  EXPECT_NE(page.find("<h2>Sub-call tree</h2>"), std::string::npos);
  EXPECT_NE(page.find("<h2>Timeline</h2>"), std::string::npos);
}

}  // namespace
