// Prometheus metrics for `kernex serve`: a small registry rendering the text exposition format
// (version 0.0.4), and the server's own metric set.
//
// Updating a metric is an atomic add; finding a labelled series takes its family's mutex, so hot
// paths may keep the Counter& that with() returns (it stays valid for the registry's lifetime).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kernex::server {

class Counter {
 public:
  void inc(double by =
               1) noexcept;  // negative, NaN and infinite amounts are ignored: counters only grow
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void inc(double by = 1) noexcept { value_.fetch_add(by, std::memory_order_relaxed); }
  void dec(double by = 1) noexcept { value_.fetch_sub(by, std::memory_order_relaxed); }
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Fixed buckets, given as sorted finite upper bounds; +Inf is implied.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v) noexcept;  // NaN is ignored

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<std::uint64_t> cumulative;  // one per bound, then +Inf (== count)
    double sum = 0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]>
      counts_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0};
};

// A counter with labels. A family holds at most kMaxSeries label combinations: more (a bug or a
// flood of distinct model names) are counted together under the value "_other" for every label,
// so a client can't grow the server's memory or the scrape without bound.
class CounterFamily {
 public:
  static constexpr std::size_t kMaxSeries = 1000;

  explicit CounterFamily(std::vector<std::string> label_names);
  // Label values in the order of the family's label names; missing ones are "", extra ones dropped.
  Counter& with(std::initializer_list<std::string_view> label_values);
  const std::vector<std::string>& label_names() const noexcept { return label_names_; }

  // Series in label-value order, for rendering.
  std::vector<std::pair<std::vector<std::string>, double>> snapshot() const;

 private:
  std::vector<std::string> label_names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Counter>> series_;
};

// Families render in registration order. Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (checked:
// a bad or duplicate name is a programming error and throws std::invalid_argument).
class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  CounterFamily& counter(std::string name, std::string help, std::vector<std::string> label_names);
  Gauge& gauge(std::string name, std::string help);
  Histogram& histogram(std::string name, std::string help, std::vector<double> upper_bounds);

  // The text exposition format: "# HELP", "# TYPE", then samples; label values escaped.
  std::string render() const;

  struct Family;  // implementation detail

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
};

// Label values and HELP text escaped as the exposition format requires.
std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
// A sample value: shortest round-trip decimal, "+Inf", "-Inf" or "NaN".
std::string format_metric_value(double v);

// The metrics `kernex serve` exports on /metrics, all named kernex_*.
class ServerMetrics {
 public:
  ServerMetrics();

  MetricsRegistry registry;
  CounterFamily& runs_total;        // kernex_runs_total{outcome}
  CounterFamily& tokens_total;      // kernex_tokens_total{tenant,model,kind="input"|"output"}
  CounterFamily& cost_usd_total;    // kernex_cost_usd_total{tenant,model}
  Gauge& active_runs;               // kernex_active_runs
  Gauge& queue_depth;               // kernex_queue_depth
  Gauge& connections;               // kernex_connections
  Histogram& run_duration_seconds;  // kernex_run_duration_seconds
  Histogram& time_to_first_token_seconds;  // kernex_time_to_first_token_seconds

  // One finished run: its outcome, usage and duration in one call.
  void record_run(std::string_view outcome, std::string_view tenant, std::string_view model,
                  std::uint64_t input_tokens, std::uint64_t output_tokens, double cost_usd,
                  double duration_seconds);

  std::string render() const { return registry.render(); }
};

}  // namespace kernex::server
