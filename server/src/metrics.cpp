#include "kernex/server/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace kernex::server {

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  std::unique_ptr<CounterFamily> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
};

namespace {

bool valid_name(std::string_view name, bool label) {
  if (name.empty()) return false;
  auto head = [&](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (!label && c == ':');
  };
  if (!head(name[0])) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) {
    return head(c) || std::isdigit(static_cast<unsigned char>(c));
  });
}

void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values) {
  if (names.empty()) return;
  out += '{';
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  out += '}';
}

void append_header(std::string& out, const std::string& name, const std::string& help,
                   std::string_view type) {
  out += "# HELP " + name + ' ' + escape_help(help) + '\n';
  out += "# TYPE " + name + ' ' + std::string(type) + '\n';
}

void render_histogram(std::string& out, const std::string& name, const Histogram& h) {
  const Histogram::Snapshot s = h.snapshot();
  for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
    const std::string le =
        i < s.upper_bounds.size() ? format_metric_value(s.upper_bounds[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(s.cumulative[i]) + '\n';
  }
  out += name + "_sum " + format_metric_value(s.sum) + '\n';
  out += name + "_count " + std::to_string(s.count) + '\n';
}

}  // namespace

// ---- values -------------------------------------------------------------------------------

void Counter::inc(double by) noexcept {
  if (std::isfinite(by) && by > 0) value_.fetch_add(by, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  const bool sorted =
      std::adjacent_find(bounds_.begin(), bounds_.end(), std::greater_equal<>()) == bounds_.end();
  const bool finite =
      std::all_of(bounds_.begin(), bounds_.end(), [](double b) { return std::isfinite(b); });
  if (!sorted || !finite)
    throw std::invalid_argument("histogram buckets must be finite and strictly increasing");
  counts_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
}

void Histogram::observe(double v) noexcept {
  if (std::isnan(v)) return;
  // Buckets are "less or equal": v lands in the first bucket whose bound is >= v.
  const auto i = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                          bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;  // derived from the buckets, so +Inf and _count always agree
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

CounterFamily::CounterFamily(std::vector<std::string> label_names)
    : label_names_(std::move(label_names)) {
  for (const auto& l : label_names_) {
    if (!valid_name(l, true) || l.starts_with("__"))
      throw std::invalid_argument("bad metric label name: " + l);
  }
}

Counter& CounterFamily::with(std::initializer_list<std::string_view> label_values) {
  std::vector<std::string> key(label_names_.size());
  std::size_t i = 0;
  for (auto v : label_values) {
    if (i == key.size()) break;
    key[i++] = std::string(v);
  }
  std::lock_guard guard(mu_);
  auto it = series_.find(key);
  if (it != series_.end()) return *it->second;
  if (series_.size() >= kMaxSeries) std::fill(key.begin(), key.end(), "_other");
  auto& slot = series_[std::move(key)];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

std::vector<std::pair<std::vector<std::string>, double>> CounterFamily::snapshot() const {
  std::lock_guard guard(mu_);
  std::vector<std::pair<std::vector<std::string>, double>> out;
  out.reserve(series_.size());
  for (const auto& [labels, counter] : series_) out.emplace_back(labels, counter->value());
  return out;
}

// ---- text format --------------------------------------------------------------------------

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// ---- registry -----------------------------------------------------------------------------

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

namespace {

template <class Families>
void check_new_name(const Families& families, const std::string& name) {
  if (!valid_name(name, false)) throw std::invalid_argument("bad metric name: " + name);
  for (const auto& f : families) {
    if (f->name == name) throw std::invalid_argument("metric registered twice: " + name);
  }
}

}  // namespace

CounterFamily& MetricsRegistry::counter(std::string name, std::string help,
                                        std::vector<std::string> label_names) {
  std::lock_guard guard(mu_);
  check_new_name(families_, name);
  auto f =
      std::make_unique<Family>(Family{std::move(name), std::move(help), nullptr, nullptr, nullptr});
  f->counter = std::make_unique<CounterFamily>(std::move(label_names));
  return *families_.emplace_back(std::move(f))->counter;
}

Gauge& MetricsRegistry::gauge(std::string name, std::string help) {
  std::lock_guard guard(mu_);
  check_new_name(families_, name);
  auto f =
      std::make_unique<Family>(Family{std::move(name), std::move(help), nullptr, nullptr, nullptr});
  f->gauge = std::make_unique<Gauge>();
  return *families_.emplace_back(std::move(f))->gauge;
}

Histogram& MetricsRegistry::histogram(std::string name, std::string help,
                                      std::vector<double> upper_bounds) {
  std::lock_guard guard(mu_);
  check_new_name(families_, name);
  auto f =
      std::make_unique<Family>(Family{std::move(name), std::move(help), nullptr, nullptr, nullptr});
  f->histogram = std::make_unique<Histogram>(std::move(upper_bounds));
  return *families_.emplace_back(std::move(f))->histogram;
}

std::string MetricsRegistry::render() const {
  std::lock_guard guard(mu_);
  std::string out;
  for (const auto& f : families_) {
    if (f->counter) {
      append_header(out, f->name, f->help, "counter");
      for (const auto& [labels, value] : f->counter->snapshot()) {
        out += f->name;
        append_labels(out, f->counter->label_names(), labels);
        out += ' ' + format_metric_value(value) + '\n';
      }
    } else if (f->gauge) {
      append_header(out, f->name, f->help, "gauge");
      out += f->name + ' ' + format_metric_value(f->gauge->value()) + '\n';
    } else {
      append_header(out, f->name, f->help, "histogram");
      render_histogram(out, f->name, *f->histogram);
    }
  }
  return out;
}

// ---- the server's metrics -----------------------------------------------------------------

ServerMetrics::ServerMetrics()
    : runs_total(registry.counter("kernex_runs_total", "Runs finished, by outcome.", {"outcome"})),
      tokens_total(registry.counter("kernex_tokens_total",
                                    "Model tokens used, by tenant, model and kind.",
                                    {"tenant", "model", "kind"})),
      cost_usd_total(registry.counter("kernex_cost_usd_total",
                                      "Model cost in US dollars, by tenant and model.",
                                      {"tenant", "model"})),
      active_runs(registry.gauge("kernex_active_runs", "Runs in progress.")),
      queue_depth(registry.gauge("kernex_queue_depth", "Runs waiting to start.")),
      connections(registry.gauge("kernex_connections", "Open HTTP connections.")),
      run_duration_seconds(registry.histogram("kernex_run_duration_seconds",
                                              "Wall time of finished runs.",
                                              {0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600})),
      time_to_first_token_seconds(
          registry.histogram("kernex_time_to_first_token_seconds",
                             "Time from a run's start to its first streamed token.",
                             {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})) {}

void ServerMetrics::record_run(std::string_view outcome, std::string_view tenant,
                               std::string_view model, std::uint64_t input_tokens,
                               std::uint64_t output_tokens, double cost_usd,
                               double duration_seconds) {
  runs_total.with({outcome}).inc();
  if (input_tokens > 0)
    tokens_total.with({tenant, model, "input"}).inc(static_cast<double>(input_tokens));
  if (output_tokens > 0)
    tokens_total.with({tenant, model, "output"}).inc(static_cast<double>(output_tokens));
  if (cost_usd > 0) cost_usd_total.with({tenant, model}).inc(cost_usd);
  run_duration_seconds.observe(duration_seconds);
}

}  // namespace kernex::server
