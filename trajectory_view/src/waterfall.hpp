// The span waterfall at the top of `kernex logs view --html`: one row per model call, code run,
// tool call and sub-query on a time axis from the run's start, tools called from code under
// their code run and a sub-query's own calls under it, with tokens and cost as bars. Laid out
// first (testable without HTML), then drawn as inline SVG: no script, no external reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernex/json.hpp"

namespace kernex {

enum class SpanKind { Run, Model, Code, Tool, SubQuery };

struct WaterfallRow {
  SpanKind kind = SpanKind::Run;
  std::string label;       // capped, not escaped
  std::string span;        // the event's span: "0", "0.1", ...
  std::size_t depth = 0;   // nesting: the run 0, its calls 1, a code run's tools 2, ...
  double start_ms = 0;     // from the run's start
  double duration_ms = 0;  // start_ms + duration_ms <= Waterfall::total_ms
  double input_tokens = 0;
  double output_tokens = 0;
  double cost_usd = 0;
  bool totals = false;  // tokens and cost of a whole (sub-)run, its own model calls included
  bool error = false;
  std::uint64_t seq = 0;  // the event's; 0 when it had none
};

struct Waterfall {
  std::vector<WaterfallRow> rows;  // drawing order: depth first, siblings by start time
  double total_ms = 0;             // the axis length, > 0 when there are rows
  std::size_t unplaced = 0;        // span events without a usable ts_ms: not drawn
  std::size_t hidden = 0;          // rows past the cap: not drawn
};

// Never throws: numbers that are missing, of another type, negative or absurd count as absent
// (a missing duration draws the span as an instant at its end); a tool call naming an unknown
// code run goes under its span; events of unknown types are left out.
Waterfall layout_waterfall(const std::vector<Json>& events);

// The figure (inline SVG and notes) for the page; every text in it is escaped.
std::string render_waterfall(const Waterfall& waterfall);

}  // namespace kernex
