// The HTML page of `kernex logs view`: built on the server side as plain HTML and inline SVG, so
// it needs no network and no scripts, and everything from the run (model output, tool output,
// code) goes through escape() before it reaches the page.
#include <algorithm>
#include <map>
#include <sstream>

#include "html_text.hpp"
#include "kernex/trajectory_view.hpp"
#include "waterfall.hpp"

namespace kernex {
namespace {

using html::escape;
using html::fixed;

std::string str(const Json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return {};
  return it->is_string() ? it->get<std::string>() : it->dump();
}

double num(const Json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string pre(const std::string& label, const std::string& text) {
  if (text.empty()) return {};
  return "<details" + std::string(text.size() < 2000 ? " open" : "") + "><summary>" +
         escape(label) + " (" + std::to_string(text.size()) + " bytes)</summary><pre>" +
         escape(text) + "</pre></details>";
}

struct Step {
  std::string label;
  double tokens = 0;
  double cost = 0;
};

// One horizontal bar per step; labels and values are escaped text inside the SVG.
std::string bar_chart(const std::string& title, const std::vector<Step>& steps, bool cost) {
  double max = 0;
  for (const auto& s : steps) max = std::max(max, cost ? s.cost : s.tokens);
  const int row = 18, width = 520, label_w = 150;
  std::ostringstream svg;
  svg << "<figure><figcaption>" << escape(title)
      << "</figcaption><svg xmlns='http://www.w3.org/2000/svg' width='" << width + label_w + 110
      << "' height='" << row * steps.size() + 4 << "' role='img' aria-label='" << escape(title)
      << "'>";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const double v = cost ? steps[i].cost : steps[i].tokens;
    const double w = max > 0 ? v / max * width : 0;
    const auto y = static_cast<int>(i) * row;
    svg << "<text x='0' y='" << y + 13 << "' class='l'>" << escape(steps[i].label)
        << "</text><rect x='" << label_w << "' y='" << y + 2 << "' width='" << fixed(w, 1)
        << "' height='" << row - 4 << "' class='" << (cost ? "c" : "t") << "'/><text x='"
        << label_w + w + 4 << "' y='" << y + 13 << "' class='v'>"
        << (cost ? "$" + fixed(v, 6) : fixed(v, 0)) << "</text>";
  }
  svg << "</svg></figure>";
  return svg.str();
}

// The sub-call tree: spans nest by their dotted names ("0" > "0.1" > "0.1.2").
std::string tree_html(const std::vector<Json>& events) {
  struct Node {
    std::string kind, prompt, answer, error;
    int provider_calls = 0, tool_calls = 0, code_runs = 0;
    double cost = 0;
  };
  std::map<std::string, Node> nodes;
  nodes["0"].kind = "root";
  for (const auto& e : events) {
    const std::string type = str(e, "type"), span = str(e, "span");
    if (type == "run_start") nodes["0"].prompt = str(e, "question");
    if (span.empty()) continue;
    Node& n = nodes[span];
    if (type == "provider_call") ++n.provider_calls, n.cost += num(e, "cost_usd");
    if (type == "tool_call") ++n.tool_calls;
    if (type == "code_run") ++n.code_runs;
    if (type == "sub_call") {
      n.kind = str(e, "kind");
      n.prompt = str(e, "prompt");
      n.answer = str(e, "answer");
      n.error = str(e, "error");
      if (n.kind == "llm_query") n.cost += num(e, "cost_usd");
    }
  }
  std::ostringstream out;
  int open = 0;
  std::size_t prev_depth = 0;
  for (const auto& [span, n] : nodes) {
    const auto depth = static_cast<std::size_t>(std::count(span.begin(), span.end(), '.'));
    if (open == 0) {
      out << "<ul class='tree'>";
      ++open;
    } else if (depth > prev_depth) {
      out << "<ul>";
      ++open;
    } else {
      out << "</li>";
      for (auto d = depth; d < prev_depth; ++d, --open) out << "</ul></li>";
    }
    prev_depth = depth;
    out << "<li><span class='span'>" << escape(span) << "</span> <b>" << escape(n.kind) << "</b> "
        << n.provider_calls << " model call(s), " << n.tool_calls << " tool call(s), "
        << n.code_runs << " code run(s), $" << fixed(n.cost, 6);
    if (!n.prompt.empty()) out << "<div class='q'>" << escape(n.prompt.substr(0, 300)) << "</div>";
    if (!n.answer.empty()) out << "<div class='a'>" << escape(n.answer.substr(0, 300)) << "</div>";
    if (!n.error.empty()) out << "<div class='err'>" << escape(n.error) << "</div>";
  }
  out << "</li>";
  for (; open > 1; --open) out << "</ul></li>";
  out << "</ul>";
  return out.str();
}

std::string event_details(const Json& e, const std::string& type) {
  if (type == "run_start") return "<div class='q'>" + escape(str(e, "question")) + "</div>";
  if (type == "provider_call") {
    return escape(str(e, "provider") + " " + str(e, "model")) + " · in " +
           fixed(num(e, "input_tokens"), 0) + " · out " + fixed(num(e, "output_tokens"), 0) +
           " · $" + fixed(num(e, "cost_usd"), 6) + " · " + fixed(num(e, "latency_ms"), 1) + " ms" +
           pre("text", str(e, "text")) +
           (e.contains("error") ? "<div class='err'>" + escape(str(e, "error")) + "</div>" : "");
  }
  if (type == "tool_call") {
    return "<b>" + escape(str(e, "name")) + "</b>" +
           (e.contains("is_error") && e["is_error"] == true ? " <span class='err'>error</span>"
                                                            : "") +
           " · " + fixed(num(e, "duration_ms"), 1) + " ms" +
           pre("arguments", e.value("arguments", Json::object()).dump(2)) +
           pre("result", str(e, "result"));
  }
  if (type == "code_run") {
    return fixed(num(e, "wall_ms"), 1) + " ms wall · " + fixed(num(e, "cpu_ms"), 1) + " ms CPU · " +
           fixed(num(e, "peak_rss_kb"), 0) + " KiB peak" + pre("code", str(e, "code")) +
           pre("stdout", str(e, "stdout")) + pre("stderr", str(e, "stderr")) +
           (e.contains("error") ? "<div class='err'>" + escape(str(e, "error")) + "</div>" : "");
  }
  if (type == "sub_call") {
    return "<b>" + escape(str(e, "kind")) + "</b> depth " + fixed(num(e, "depth"), 0) + " · $" +
           fixed(num(e, "cost_usd"), 6) + " · " + fixed(num(e, "latency_ms"), 1) + " ms" +
           pre("prompt", str(e, "prompt")) + pre("answer", str(e, "answer")) +
           (e.contains("error") ? "<div class='err'>" + escape(str(e, "error")) + "</div>" : "");
  }
  if (type == "run_end") {
    return "<b>" + escape(str(e, "outcome")) + "</b>" + pre("answer", str(e, "text")) +
           (e.contains("error") ? "<div class='err'>" + escape(str(e, "error")) + "</div>" : "");
  }
  return pre("event", e.dump(2));
}

constexpr const char* kStyle =
    R"(body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232a;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eee;padding:4px 8px;vertical-align:top;text-align:left}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-word}
.err{color:#b3261e}.q{color:#444;font-style:italic}.a{color:#0b6b3a}.span{font-family:monospace;background:#eef;padding:0 4px}
.tree li{margin:4px 0}.l,.v{font:11px sans-serif;fill:#333}.t{fill:#4a78c2}.c{fill:#d08a2e}
.kv td:first-child{color:#666;width:160px}.type{font-family:monospace}.waterfall{margin:8px 0})";

}  // namespace

std::string render_trajectory_html(const std::vector<Json>& events) {
  Json start = Json::object(), end = Json::object();
  std::vector<Step> steps;
  double t0 = 0;
  for (const auto& e : events) {
    const std::string type = str(e, "type");
    if (type == "run_start") start = e;
    if (type == "run_end") end = e;
    if (t0 == 0 && e.contains("ts_ms") && e["ts_ms"].is_number()) t0 = e["ts_ms"].get<double>();
    if (type == "provider_call" || (type == "sub_call" && str(e, "kind") == "llm_query")) {
      steps.push_back({"#" + str(e, "seq") + " " + str(e, "span") +
                           (type == "sub_call" ? " llm_query" : " model"),
                       num(e, "input_tokens") + num(e, "output_tokens"), num(e, "cost_usd")});
    }
  }
  std::ostringstream page;
  page << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>kernex run "
       << escape(str(start, "run_id")) << "</title><meta http-equiv='Content-Security-Policy' "
       << "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"><style>"
       << kStyle << "</style></head><body><h1>kernex " << escape(str(start, "kind")) << " "
       << escape(str(start, "run_id")) << "</h1>"
       << "<h2>Waterfall</h2>" << render_waterfall(layout_waterfall(events))
       << "<table class='kv'><tr><td>question</td><td>" << escape(str(start, "question"))
       << "</td></tr>"
       << "<tr><td>provider / model</td><td>"
       << escape(str(start, "provider") + " / " + str(start, "model")) << "</td></tr>"
       << "<tr><td>outcome</td><td>"
       << escape(end.empty() ? "unfinished" : str(end, "outcome") + str(end, "error"))
       << "</td></tr><tr><td>tokens (tree)</td><td>" << fixed(num(end, "tree_input_tokens"), 0)
       << " in, " << fixed(num(end, "tree_output_tokens"), 0)
       << " out</td></tr><tr><td>cost (tree)</td><td>$" << fixed(num(end, "tree_cost_usd"), 6)
       << "</td></tr><tr><td>tool calls (tree)</td><td>" << fixed(num(end, "tree_tool_calls"), 0)
       << "</td></tr><tr><td>answer</td><td>" << escape(str(end, "text")) << "</td></tr></table>";
  page << "<h2>Tokens and cost per step</h2>";
  if (steps.empty()) {
    page << "<p>No model calls were recorded.</p>";
  } else {
    page << bar_chart("Tokens per step (input + output)", steps, false)
         << bar_chart("Cost per step (USD)", steps, true);
  }
  page << "<h2>Sub-call tree</h2>" << tree_html(events);
  page << "<h2>Timeline</h2><table><tr><th>#</th><th>+ms</th><th>event</th><th>span</"
          "th><th>details</th></tr>";
  for (const auto& e : events) {
    const std::string type = str(e, "type");
    const double offset =
        e.contains("ts_ms") && e["ts_ms"].is_number() ? e["ts_ms"].get<double>() - t0 : 0;
    page << "<tr id='e" << escape(str(e, "seq")) << "'><td>" << escape(str(e, "seq")) << "</td><td>"
         << fixed(offset, 0) << "</td><td class='type'>" << escape(type)
         << "</td><td><span class='span'>" << escape(str(e, "span")) << "</span></td><td>"
         << event_details(e, type) << "</td></tr>";
  }
  page << "</table></body></html>\n";
  return page.str();
}

}  // namespace kernex
