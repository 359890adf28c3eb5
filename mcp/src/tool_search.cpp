#include "kernex/mcp/tool_search.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>

namespace kernex::mcp {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Words of the query; '_' '-' '.' and '/' separate words too, so "read_file" finds "read file".
std::vector<std::string> words_of(std::string_view query) {
  std::string q = lower(query);
  for (char& c : q) {
    if (c == '_' || c == '-' || c == '.' || c == '/' || c == ',') c = ' ';
  }
  std::istringstream in(q);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::optional<SearchDetail> search_detail_from_string(std::string_view text) {
  if (text == "name") return SearchDetail::Name;
  if (text == "description") return SearchDetail::Description;
  if (text == "full") return SearchDetail::Full;
  return std::nullopt;
}

ToolSpec search_tools_spec() {
  ToolSpec spec;
  spec.name = std::string(kSearchToolsName);
  spec.description =
      "Search the available tools by name, description and keywords. Tools listed without a schema "
      "must be looked "
      "up here with detail \"full\" before they are called.";
  spec.parameters = Json::parse(R"({
    "type": "object",
    "properties": {
      "query": {"type": "string", "description": "Words to look for; empty lists every tool."},
      "detail": {"type": "string", "enum": ["name", "description", "full"],
                 "description": "name: names only; description: names and descriptions; full: also the input schema."},
      "limit": {"type": "integer", "minimum": 1, "description": "At most this many tools (default 20)."}
    },
    "required": ["query"]
  })");
  spec.search_hints = {"tool", "search", "discover", "schema"};
  return spec;
}

Json search_tools(const std::vector<ToolSpec>& tools, std::string_view query, SearchDetail detail,
                  std::size_t limit) {
  const auto words = words_of(query);
  std::vector<std::pair<int, const ToolSpec*>> ranked;
  for (const auto& tool : tools) {
    const std::string name = lower(tool.name);
    const std::string desc = lower(tool.description);
    std::string hints;
    for (const auto& h : tool.search_hints) hints += lower(h) + " ";
    int score = 0;
    bool all = true;
    for (const auto& w : words) {
      int s = 0;
      if (name.find(w) != std::string::npos) s += 4;
      if (hints.find(w) != std::string::npos) s += 2;
      if (desc.find(w) != std::string::npos) s += 1;
      if (s == 0) {
        all = false;
        break;
      }
      score += s;
    }
    if (all) ranked.emplace_back(score, &tool);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->name < b.second->name;
  });
  Json list = Json::array();
  for (std::size_t i = 0; i < ranked.size() && i < limit; ++i) {
    const ToolSpec& t = *ranked[i].second;
    Json entry = {{"name", t.name}};
    if (detail != SearchDetail::Name) entry["description"] = t.description;
    if (detail == SearchDetail::Full) entry["input_schema"] = t.parameters;
    list.push_back(std::move(entry));
  }
  return Json{{"matches", ranked.size()}, {"tools", std::move(list)}};
}

Result<Json> run_search_tools(const std::vector<ToolSpec>& tools, const Json& args) {
  if (!args.is_object()) return fail(ErrorCode::Tool, "search_tools expects an object argument");
  std::string query;
  if (auto q = args.find("query"); q != args.end()) {
    if (!q->is_string()) return fail(ErrorCode::Tool, "search_tools: 'query' must be a string");
    query = q->get<std::string>();
  }
  SearchDetail detail = SearchDetail::Description;
  if (auto d = args.find("detail"); d != args.end()) {
    auto parsed = d->is_string() ? search_detail_from_string(d->get<std::string>()) : std::nullopt;
    if (!parsed)
      return fail(ErrorCode::Tool,
                  "search_tools: 'detail' must be \"name\", \"description\" or \"full\"");
    detail = *parsed;
  }
  std::size_t limit = 20;
  if (auto l = args.find("limit"); l != args.end()) {
    if (!l->is_number_integer() || l->get<std::int64_t>() < 1) {
      return fail(ErrorCode::Tool, "search_tools: 'limit' must be a positive integer");
    }
    limit = static_cast<std::size_t>(l->get<std::int64_t>());
  }
  return search_tools(tools, query, detail, limit);
}

ToolSpec deferred_spec(const ToolSpec& tool) {
  ToolSpec out;
  out.name = tool.name;
  out.description = "(schema via search_tools)";
  out.parameters = Json{{"type", "object"}};
  return out;
}

}  // namespace kernex::mcp
