// Tool discovery at scale: with many MCP tools, the model gets every tool's name with an empty
// schema plus `search_tools`, and asks that for the descriptions and schemas it needs.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/tool.hpp"

namespace kernex::mcp {

inline constexpr std::string_view kSearchToolsName = "search_tools";

enum class SearchDetail { Name, Description, Full };
std::optional<SearchDetail> search_detail_from_string(std::string_view text);

// The `search_tools` tool: {"query": string, "detail": "name"|"description"|"full", "limit": int}.
ToolSpec search_tools_spec();

// Ranks `tools` against the words of `query` (case-insensitive): a word in the name counts most,
// then in a search hint, then in the description; every word must match somewhere. An empty query
// matches every tool. Result: {"matches": N, "tools": [{"name", "description"?, "input_schema"?}]}
// best first, at most `limit`.
Json search_tools(const std::vector<ToolSpec>& tools, std::string_view query, SearchDetail detail,
                  std::size_t limit);

// Runs a `search_tools` call's arguments; an Error names the bad argument.
Result<Json> run_search_tools(const std::vector<ToolSpec>& tools, const Json& arguments);

// The stand-in offered for a tool whose schema is deferred: its name, a one-line pointer to
// search_tools, and an open object schema.
ToolSpec deferred_spec(const ToolSpec& tool);

}  // namespace kernex::mcp
