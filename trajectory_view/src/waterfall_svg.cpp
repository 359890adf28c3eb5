// The waterfall drawn as inline SVG: labels indented by depth, a time track with an axis in ms or
// s from the run's start, then a token track (input and output stacked) and a cost track, each
// bar with its exact number beside it and in a <title> tooltip. Colours are attributes, not
// classes, so the figure is the same wherever it is pasted.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "html_text.hpp"
#include "waterfall.hpp"

namespace kernex {
namespace {

using html::escape;
using html::fixed;

constexpr int kRowH = 20, kBarH = 12, kAxisH = 30, kLegendH = 26;
constexpr int kLabelW = 250, kIndent = 12, kMaxIndent = 12;
constexpr int kTimeX = kLabelW, kTimeW = 540;
constexpr int kTokenX = kTimeX + kTimeW + 70, kTokenW = 90;  // 70: room for the duration text
constexpr int kCostX = kTokenX + kTokenW + 100, kCostW = 70;
constexpr int kWidth = kCostX + kCostW + 90;

struct Style {
  const char* name;
  const char* fill;
};

Style style_of(SpanKind kind) {
  switch (kind) {
    case SpanKind::Run:
      return {"run", "#9aa5b1"};
    case SpanKind::Model:
      return {"model call", "#3b5bdb"};
    case SpanKind::Code:
      return {"code run", "#2f9e44"};
    case SpanKind::Tool:
      return {"tool call", "#ae3ec9"};
    case SpanKind::SubQuery:
      return {"sub-query", "#e8590c"};
  }
  return {"span", "#9aa5b1"};
}

constexpr const char* kInputFill = "#1c7ed6";
constexpr const char* kOutputFill = "#74c0fc";
constexpr const char* kCostFill = "#f59f00";

std::string ms_text(double ms) { return fixed(ms, ms < 10 ? 2 : 1) + " ms"; }

// A step of 1, 2 or 5 times a power of ten giving at most 8 intervals over the axis.
double tick_step(double total_ms) {
  double step = std::pow(10.0, std::floor(std::log10(total_ms / 8)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (total_ms / (step * m) <= 8) return step * m;
  }
  return step * 10;
}

std::string tick_label(double ms, double step, double total_ms) {
  if (total_ms >= 1000 && step >= 100) return fixed(ms / 1000, step >= 1000 ? 0 : 1) + " s";
  const int digits = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return fixed(ms, digits) + " ms";
}

void axis(std::ostringstream& svg, double total_ms, int bottom) {
  const double step = tick_step(total_ms);
  for (int i = 0; i * step <= total_ms * 1.000001; ++i) {
    const double x = kTimeX + i * step / total_ms * kTimeW;
    svg << "<line x1='" << fixed(x, 1) << "' y1='" << kAxisH - 6 << "' x2='" << fixed(x, 1)
        << "' y2='" << bottom << "' stroke='#dee2e6'/><text x='" << fixed(x, 1) << "' y='"
        << kAxisH - 10 << "' text-anchor='middle' font-size='10' fill='#555'>"
        << tick_label(i * step, step, total_ms) << "</text>";
  }
  svg << "<text x='" << kTokenX << "' y='" << kAxisH - 10
      << "' font-size='10' fill='#555'>tokens (in + out)</text><text x='" << kCostX << "' y='"
      << kAxisH - 10 << "' font-size='10' fill='#555'>cost (USD)</text>";
}

std::string tooltip(const WaterfallRow& r) {
  std::string t = std::string(style_of(r.kind).name) + ": " + r.label + "\nspan " + r.span +
                  (r.seq ? " · event #" + std::to_string(r.seq) : "") + "\nstarts +" +
                  ms_text(r.start_ms) + ", lasts " + ms_text(r.duration_ms);
  if (r.input_tokens + r.output_tokens > 0 || r.cost_usd > 0) {
    t += "\n" + std::string(r.totals ? "in all, its own calls included: " : "") +
         fixed(r.input_tokens, 0) + " input + " + fixed(r.output_tokens, 0) + " output tokens, $" +
         fixed(r.cost_usd, 6);
  }
  return t + (r.error ? "\nerror" : "");
}

struct Scale {
  double total_ms, max_tokens, max_cost;
};

void row(std::ostringstream& svg, const WaterfallRow& r, int y, const Scale& s) {
  const Style st = style_of(r.kind);
  const int indent = static_cast<int>(std::min<std::size_t>(r.depth, kMaxIndent)) * kIndent;
  const double x = kTimeX + r.start_ms / s.total_ms * kTimeW;
  const double w = std::max(2.0, r.duration_ms / s.total_ms * kTimeW);
  const int mid = y + kRowH / 2 + 4;
  svg << "<g><title>" << escape(tooltip(r)) << "</title><rect x='0' y='" << y << "' width='"
      << kWidth << "' height='" << kRowH << "' fill='" << (y / kRowH % 2 ? "#f8f9fa" : "#fff")
      << "'/><text x='" << 4 + indent << "' y='" << mid
      << "' font-size='11' fill='#212529' clip-path='url(#wf-labels)'>" << escape(r.label)
      << "</text><rect x='" << fixed(x, 2) << "' y='" << y + (kRowH - kBarH) / 2 << "' width='"
      << fixed(w, 2) << "' height='" << kBarH << "' fill='" << st.fill << "'"
      << (r.error ? " stroke='#c92a2a' stroke-width='2'" : "") << "/>";
  const bool room_right = x + w + 60 < kTimeX + kTimeW + 70;
  svg << "<text x='" << fixed(room_right ? x + w + 3 : x - 3, 1) << "' y='" << mid
      << "' font-size='10' fill='#555'" << (room_right ? "" : " text-anchor='end'") << ">"
      << ms_text(r.duration_ms) << "</text>";
  const char* faded = r.totals ? " fill-opacity='0.45'" : "";
  if (r.input_tokens + r.output_tokens > 0) {
    const double wi = r.input_tokens / s.max_tokens * kTokenW;
    const double wo = r.output_tokens / s.max_tokens * kTokenW;
    svg << "<rect x='" << kTokenX << "' y='" << y + 4 << "' width='" << fixed(wi, 2) << "' height='"
        << kRowH - 8 << "' fill='" << kInputFill << "'" << faded << "/><rect x='"
        << fixed(kTokenX + wi, 2) << "' y='" << y + 4 << "' width='" << fixed(wo, 2) << "' height='"
        << kRowH - 8 << "' fill='" << kOutputFill << "'" << faded << "/><text x='"
        << fixed(kTokenX + wi + wo + 3, 1) << "' y='" << mid << "' font-size='10' fill='#555'>"
        << fixed(r.input_tokens, 0) << " + " << fixed(r.output_tokens, 0) << "</text>";
  }
  if (r.cost_usd > 0) {
    const double wc = r.cost_usd / s.max_cost * kCostW;
    svg << "<rect x='" << kCostX << "' y='" << y + 4 << "' width='" << fixed(wc, 2) << "' height='"
        << kRowH - 8 << "' fill='" << kCostFill << "'" << faded << "/><text x='"
        << fixed(kCostX + wc + 3, 1) << "' y='" << mid << "' font-size='10' fill='#555'>$"
        << fixed(r.cost_usd, 6) << "</text>";
  }
  svg << "</g>";
}

void legend(std::ostringstream& svg, int y) {
  int x = 4;
  auto swatch = [&](const char* fill, const char* name) {
    svg << "<rect x='" << x << "' y='" << y + 6 << "' width='12' height='12' fill='" << fill
        << "'/><text x='" << x + 16 << "' y='" << y + 16 << "' font-size='11' fill='#333'>" << name
        << "</text>";
    x += 24 + static_cast<int>(std::string_view(name).size()) * 6;
  };
  for (const auto kind :
       {SpanKind::Run, SpanKind::Model, SpanKind::Code, SpanKind::Tool, SpanKind::SubQuery}) {
    swatch(style_of(kind).fill, style_of(kind).name);
  }
  swatch(kInputFill, "input tokens");
  swatch(kOutputFill, "output tokens");
  swatch(kCostFill, "cost");
}

}  // namespace

std::string render_waterfall(const Waterfall& w) {
  std::ostringstream out;
  if (w.rows.empty()) {
    out << "<p>No spans with times were recorded.</p>";
  } else {
    Scale s{w.total_ms, 0, 0};
    for (const auto& r : w.rows) {
      s.max_tokens = std::max(s.max_tokens, r.input_tokens + r.output_tokens);
      s.max_cost = std::max(s.max_cost, r.cost_usd);
    }
    const int bottom = kAxisH + static_cast<int>(w.rows.size()) * kRowH;
    out << "<figure class='waterfall'><svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth
        << "' height='" << bottom + kLegendH << "' font-family='sans-serif' role='img' "
        << "aria-label='span waterfall'><clipPath id='wf-labels'><rect x='0' y='0' width='"
        << kLabelW - 6 << "' height='" << bottom << "'/></clipPath>";
    axis(out, w.total_ms, bottom);
    for (std::size_t i = 0; i < w.rows.size(); ++i)
      row(out, w.rows[i], kAxisH + static_cast<int>(i) * kRowH, s);
    legend(out, bottom);
    out << "</svg></figure>";
  }
  if (w.unplaced > 0)
    out << "<p class='err'>" << w.unplaced
        << " span event(s) had no usable ts_ms and are not drawn.</p>";
  if (w.hidden > 0) out << "<p>" << w.hidden << " more span(s) are not drawn.</p>";
  return out.str();
}

}  // namespace kernex
