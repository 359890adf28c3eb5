// Prometheus metrics for `kernex serve` (kernex/server/metrics.hpp): the exposition text.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernex/server/metrics.hpp"

using namespace kernex::server;

namespace {

TEST(ServeMetrics, RendersCountersGaugesAndHistogramsInTheExpositionFormat) {
  MetricsRegistry r;
  auto& runs = r.counter("kernex_runs_total", "Runs finished.", {"outcome"});
  auto& active = r.gauge("kernex_active_runs", "Runs in progress.");
  auto& duration = r.histogram("kernex_run_duration_seconds", "Wall time.", {0.5, 1, 2.5});
  runs.with({"ok"}).inc();
  runs.with({"ok"}).inc(2);
  runs.with({"error"}).inc();
  active.inc();
  active.inc();
  active.dec();
  duration.observe(0.5);  // buckets are "less or equal"
  duration.observe(0.7);
  duration.observe(2);
  duration.observe(100);

  EXPECT_EQ(r.render(),
            "# HELP kernex_runs_total Runs finished.\n"
            "# TYPE kernex_runs_total counter\n"
            "kernex_runs_total{outcome=\"error\"} 1\n"
            "kernex_runs_total{outcome=\"ok\"} 3\n"
            "# HELP kernex_active_runs Runs in progress.\n"
            "# TYPE kernex_active_runs gauge\n"
            "kernex_active_runs 1\n"
            "# HELP kernex_run_duration_seconds Wall time.\n"
            "# TYPE kernex_run_duration_seconds histogram\n"
            "kernex_run_duration_seconds_bucket{le=\"0.5\"} 1\n"
            "kernex_run_duration_seconds_bucket{le=\"1\"} 2\n"
            "kernex_run_duration_seconds_bucket{le=\"2.5\"} 3\n"
            "kernex_run_duration_seconds_bucket{le=\"+Inf\"} 4\n"
            "kernex_run_duration_seconds_sum 103.2\n"
            "kernex_run_duration_seconds_count 4\n");
}

TEST(ServeMetrics, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry r;
  auto& c = r.counter("kernex_x_total", "Back\\slash and\nnewline; \"quotes\" stay.",
                      {"tenant", "model"});
  c.with({"a\\b", "say \"hi\"\nnow"}).inc(1.5);
  EXPECT_EQ(r.render(),
            "# HELP kernex_x_total Back\\\\slash and\\nnewline; \"quotes\" stay.\n"
            "# TYPE kernex_x_total counter\n"
            "kernex_x_total{tenant=\"a\\\\b\",model=\"say \\\"hi\\\"\\nnow\"} 1.5\n");
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
}

TEST(ServeMetrics, ValuesUseTheFormatsSpecialSpellings) {
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(42), "42");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(ServeMetrics, CountersOnlyGrowAndHistogramsIgnoreNaN) {
  MetricsRegistry r;
  auto& c = r.counter("kernex_c_total", "c", {});
  c.with({}).inc(2);
  c.with({}).inc(-1);
  c.with({}).inc(std::numeric_limits<double>::quiet_NaN());
  c.with({}).inc(std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.with({}).value(), 2);
  EXPECT_NE(r.render().find("kernex_c_total 2\n"), std::string::npos);

  Histogram h({1});
  h.observe(std::numeric_limits<double>::quiet_NaN());
  h.observe(-1);
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{1, 1}));
}

TEST(ServeMetrics, MissingLabelValuesAreEmptyAndExtraOnesDropped) {
  MetricsRegistry r;
  auto& c = r.counter("kernex_t_total", "t", {"a", "b"});
  c.with({"x"}).inc();
  c.with({"x", "", "extra"}).inc();
  EXPECT_NE(r.render().find("kernex_t_total{a=\"x\",b=\"\"} 2\n"), std::string::npos);
}

TEST(ServeMetrics, SeriesBeyondTheCapAreFoldedIntoOther) {
  MetricsRegistry r;
  auto& c = r.counter("kernex_m_total", "m", {"model"});
  for (std::size_t i = 0; i < CounterFamily::kMaxSeries + 50; ++i)
    c.with({"model-" + std::to_string(i)}).inc();
  const auto series = c.snapshot();
  EXPECT_EQ(series.size(), CounterFamily::kMaxSeries + 1);
  EXPECT_NE(r.render().find("kernex_m_total{model=\"_other\"} 50\n"), std::string::npos);
  c.with({"model-0"}).inc();  // known series keep counting on their own
  EXPECT_NE(r.render().find("kernex_m_total{model=\"model-0\"} 2\n"), std::string::npos);
}

TEST(ServeMetrics, BadNamesAndBucketsAreProgrammingErrors) {
  MetricsRegistry r;
  EXPECT_THROW(r.gauge("1abc", "x"), std::invalid_argument);
  EXPECT_THROW(r.gauge("a-b", "x"), std::invalid_argument);
  EXPECT_THROW(r.counter("ok_total", "x", {"bad-label"}), std::invalid_argument);
  EXPECT_THROW(r.counter("ok2_total", "x", {"__reserved"}), std::invalid_argument);
  r.gauge("kernex_g", "x");
  EXPECT_THROW(r.gauge("kernex_g", "x"), std::invalid_argument);
  EXPECT_THROW(r.histogram("kernex_h", "x", {2, 1}), std::invalid_argument);
  EXPECT_THROW(r.histogram("kernex_h2", "x", {1, 1}), std::invalid_argument);
  EXPECT_THROW(r.histogram("kernex_h3", "x", {std::numeric_limits<double>::infinity()}),
               std::invalid_argument);
}

TEST(ServeMetrics, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry r;
  auto& c = r.counter("kernex_n_total", "n", {"k"});
  auto& h = r.histogram("kernex_h", "h", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        c.with({t % 2 ? "odd" : "even"}).inc();
        h.observe(i % 2);
        if (i % 1000 == 0) (void)r.render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.with({"odd"}).value() + c.with({"even"}).value(), 20000);
  EXPECT_EQ(h.snapshot().count, 20000u);
  EXPECT_EQ(h.snapshot().sum, 10000);
}

TEST(ServeMetrics, TheServerSetIsNamedKernexAndRecordsARun) {
  ServerMetrics m;
  m.record_run("ok", "acme", "gpt-x", 100, 20, 0.5, 3);
  m.connections.set(2);
  m.time_to_first_token_seconds.observe(0.2);
  const std::string text = m.render();
  for (const char* line : {
           "# TYPE kernex_runs_total counter\n",
           "kernex_runs_total{outcome=\"ok\"} 1\n",
           "kernex_tokens_total{tenant=\"acme\",model=\"gpt-x\",kind=\"input\"} 100\n",
           "kernex_tokens_total{tenant=\"acme\",model=\"gpt-x\",kind=\"output\"} 20\n",
           "kernex_cost_usd_total{tenant=\"acme\",model=\"gpt-x\"} 0.5\n",
           "# TYPE kernex_active_runs gauge\nkernex_active_runs 0\n",
           "# TYPE kernex_queue_depth gauge\n",
           "kernex_connections 2\n",
           "kernex_run_duration_seconds_bucket{le=\"2.5\"} 0\n",
           "kernex_run_duration_seconds_bucket{le=\"5\"} 1\n",
           "kernex_run_duration_seconds_bucket{le=\"+Inf\"} 1\n",
           "kernex_run_duration_seconds_sum 3\n",
           "kernex_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n",
           "kernex_time_to_first_token_seconds_count 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
  // Every sample line names a kernex_ metric; every family has HELP and TYPE.
  std::size_t helps = 0, types = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    if (line.starts_with("# HELP "))
      ++helps;
    else if (line.starts_with("# TYPE "))
      ++types;
    else
      EXPECT_TRUE(line.starts_with("kernex_")) << line;
    pos = end + 1;
  }
  EXPECT_EQ(helps, 8u);
  EXPECT_EQ(types, 8u);
}

}  // namespace
