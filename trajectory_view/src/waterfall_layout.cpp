// Events into waterfall rows. Every event is recorded when its span ENDS (ts_ms), so a span
// starts at ts_ms minus its duration; and a parent is recorded after its children (a code run
// after the tools its code called, a sub-query after its own calls), so parents are found in a
// first pass and children attached in a second.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "html_text.hpp"
#include "waterfall.hpp"

namespace kernex {
namespace {

constexpr double kMaxMs = 1e9;      // ~11.6 days from the run's start: beyond it, not a time
constexpr double kMaxCount = 1e15;  // tokens
constexpr double kMaxCost = 1e9;    // USD
constexpr std::size_t kMaxRows = 2000;
constexpr std::size_t kLabelBytes = 72;

std::optional<double> finite(const Json& e, const char* key) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

// A count or duration: finite, non-negative and at most `max`, else 0.
double amount(const Json& e, const char* key, double max) {
  const auto v = finite(e, key);
  return v && *v >= 0 && *v <= max ? *v : 0.0;
}

std::string text(const Json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const Json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_boolean() && it->get<bool>();
}

const char* duration_key(const std::string& type) {
  if (type == "provider_call") return "latency_ms";
  if (type == "tool_call") return "duration_ms";
  if (type == "code_run") return "wall_ms";
  if (type == "sub_call") return "latency_ms";
  return nullptr;
}

// The run's time origin: run_start's ts_ms, else the earliest start of any event.
std::optional<double> origin(const std::vector<Json>& events) {
  std::optional<double> earliest;
  for (const auto& e : events) {
    if (!e.is_object()) continue;
    const auto ts = finite(e, "ts_ms");
    if (!ts) continue;
    if (text(e, "type") == "run_start") return ts;
    const char* key = duration_key(text(e, "type"));
    const double start = *ts - (key ? amount(e, key, kMaxMs) : 0.0);
    if (!earliest || start < *earliest) earliest = start;
  }
  return earliest;
}

// [start, end] from the run's start, or nothing for an event without a believable ts_ms. An
// event stamped before the run started is drawn at 0.
std::optional<std::pair<double, double>> interval(const Json& e, const char* key, double t0) {
  const auto ts = finite(e, "ts_ms");
  if (!ts || *ts - t0 < -kMaxMs || *ts - t0 > kMaxMs) return std::nullopt;
  const double end = std::max(0.0, *ts - t0);
  return std::pair{std::max(0.0, end - amount(e, key, kMaxMs)), end};
}

WaterfallRow row_of(const Json& e, const std::string& type) {
  WaterfallRow r;
  r.span = text(e, "span");
  if (r.span.empty()) r.span = "0";
  r.seq = static_cast<std::uint64_t>(amount(e, "seq", kMaxCount));
  r.error = e.contains("error") || flag(e, "is_error") || flag(e, "timed_out");
  r.input_tokens = amount(e, "input_tokens", kMaxCount);
  r.output_tokens = amount(e, "output_tokens", kMaxCount);
  r.cost_usd = amount(e, "cost_usd", kMaxCost);
  if (type == "provider_call") {
    r.kind = SpanKind::Model;
    r.label = "model " + text(e, "model");
  } else if (type == "tool_call") {
    r.kind = SpanKind::Tool;
    r.label = text(e, "name");
  } else if (type == "code_run") {
    r.kind = SpanKind::Code;
    r.label = "code " + text(e, "code");
  } else {
    r.kind = SpanKind::SubQuery;
    r.label = text(e, "kind") + " " + text(e, "prompt");
    r.totals = text(e, "kind") == "rlm_query";  // its own model calls are rows below it
  }
  r.label = html::cap_label(r.label, kLabelBytes);
  return r;
}

struct Node {
  WaterfallRow row;
  std::string code_run;  // a tool call's: the id of the code run that called it
  std::vector<std::size_t> children;
};

// Builds the tree: node 0 is the run; parents are sub-queries (by span) and code runs (by id).
class TreeBuilder {
 public:
  explicit TreeBuilder(double t0) : t0_(t0) {
    nodes_.push_back({});
    root().span = "0";
    root().label = "run";
    root().totals = true;
  }

  void add_spans(const std::vector<Json>& events, std::size_t& unplaced) {
    for (const auto& e : events) {
      if (!e.is_object()) continue;
      const std::string type = text(e, "type");
      if (type == "run_start")
        root().label = html::cap_label("run " + text(e, "question"), kLabelBytes);
      if (type == "run_end") end_run(e);
      const char* key = duration_key(type);
      if (key == nullptr) continue;
      const auto when = interval(e, key, t0_);
      if (!when) {
        ++unplaced;
        continue;
      }
      // Tool calls and sub-queries made from code sit under their code run.
      Node n{row_of(e, type),
             type == "tool_call" || type == "sub_call" ? text(e, "code_run") : "",
             {}};
      n.row.start_ms = when->first;
      n.row.duration_ms = when->second - when->first;
      const std::size_t index = nodes_.size();
      if (type == "sub_call" && n.row.span != "0") span_owner_.try_emplace(n.row.span, index);
      if (type == "code_run" && !text(e, "id").empty())
        code_owner_.try_emplace(text(e, "id"), index);
      nodes_.push_back(std::move(n));
    }
  }

  // Second pass: every node under its parent, children by start time.
  void link() {
    for (std::size_t i = 1; i < nodes_.size(); ++i) {
      const auto code = code_owner_.find(nodes_[i].code_run);
      std::size_t parent = 0;
      if (code != code_owner_.end()) {
        parent = code->second;
      } else if (nodes_[i].row.kind == SpanKind::SubQuery) {
        parent = owner_of(parent_span(nodes_[i].row.span));
      } else {
        parent = owner_of(nodes_[i].row.span);
        if (!nodes_[i].code_run.empty()) nodes_[i].row.label += " (from code)";
      }
      nodes_[parent].children.push_back(i);
    }
    for (auto& n : nodes_) {
      std::stable_sort(n.children.begin(), n.children.end(), [&](std::size_t a, std::size_t b) {
        return nodes_[a].row.start_ms < nodes_[b].row.start_ms;
      });
    }
  }

  Waterfall flatten() && {
    Waterfall w;
    double end = run_end_.value_or(0.0);
    for (const auto& n : nodes_) end = std::max(end, n.row.start_ms + n.row.duration_ms);
    root().duration_ms = end;
    w.total_ms = std::max(end, 1.0);
    // Depth first without recursion: a chain of sub-queries can be as long as the file.
    std::vector<std::pair<std::size_t, std::size_t>> stack{{0, 0}};
    while (!stack.empty()) {
      const auto [index, depth] = stack.back();
      stack.pop_back();
      if (w.rows.size() == kMaxRows) {
        ++w.hidden;
      } else {
        w.rows.push_back(std::move(nodes_[index].row));
        w.rows.back().depth = depth;
      }
      const auto& kids = nodes_[index].children;
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.emplace_back(*it, depth + 1);
    }
    return w;
  }

 private:
  WaterfallRow& root() { return nodes_.front().row; }

  void end_run(const Json& e) {
    const auto when = interval(e, "latency_ms", t0_);
    if (when) run_end_ = when->second;
    WaterfallRow& r = root();
    r.seq = static_cast<std::uint64_t>(amount(e, "seq", kMaxCount));
    r.error = e.contains("error");
    r.input_tokens = amount(
        e, e.contains("tree_input_tokens") ? "tree_input_tokens" : "input_tokens", kMaxCount);
    r.output_tokens = amount(
        e, e.contains("tree_output_tokens") ? "tree_output_tokens" : "output_tokens", kMaxCount);
    r.cost_usd = amount(e, e.contains("tree_cost_usd") ? "tree_cost_usd" : "cost_usd", kMaxCost);
  }

  static std::string parent_span(const std::string& span) {
    const auto dot = span.rfind('.');
    return dot == std::string::npos ? "0" : span.substr(0, dot);
  }

  // The sub-query that owns `span` or the nearest recorded one above it; the run at the top.
  std::size_t owner_of(std::string span) const {
    while (span != "0" && !span.empty()) {
      const auto it = span_owner_.find(span);
      if (it != span_owner_.end()) return it->second;
      const auto dot = span.rfind('.');
      if (dot == std::string::npos) break;
      span.resize(dot);
    }
    return 0;
  }

  double t0_;
  std::vector<Node> nodes_;
  std::map<std::string, std::size_t> span_owner_, code_owner_;
  std::optional<double> run_end_;
};

}  // namespace

Waterfall layout_waterfall(const std::vector<Json>& events) {
  std::size_t unplaced = 0;
  const auto t0 = origin(events);
  if (!t0) {
    for (const auto& e : events) unplaced += e.is_object() && duration_key(text(e, "type"));
    Waterfall none;
    none.unplaced = unplaced;
    return none;
  }
  TreeBuilder tree(*t0);
  tree.add_spans(events, unplaced);
  tree.link();
  Waterfall w = std::move(tree).flatten();
  w.unplaced = unplaced;
  return w;
}

}  // namespace kernex
