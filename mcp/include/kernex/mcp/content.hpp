// MCP tool results (CallToolResult) rendered into the kernel's text ToolResult.
#pragma once

#include <cstddef>
#include <string>

#include "kernex/json.hpp"

namespace kernex::mcp {

struct RenderOptions {
  // Images and audio whose base64 data is at most this long are kept inline as a data: URI; larger
  // ones are described (type and size) so one screenshot can't flood the context.
  std::size_t inline_binary_cap = 16 * 1024;
};

struct RenderedResult {
  std::string text;
  bool is_error = false;
  Json structured;  // structuredContent as sent (null when none): what code gets instead of text
};

// Content items in order, one block each, separated by blank-line-free '\n':
//   text -> the text; image/audio -> "[image image/png, 95 bytes base64:
//   data:image/png;base64,...]" (or "..., omitted]" above the cap); resource_link -> "[resource
//   link: NAME <URI> (MIME): DESCRIPTION]"; embedded resource -> "[resource URI (MIME)]\n" + its
//   text, or its size for blobs.
// structuredContent is kept as `structured` and appended to the text as "[structured content]
// <json>" unless a text item already says the same: holds the same JSON (servers are told to send
// both) or is one of its top-level string values (server-filesystem's {"content": text}). isError
// becomes is_error. A result that is not an object, or a content item that is not understood, is
// rendered as its JSON rather than dropped.
RenderedResult render_call_result(const Json& result, const RenderOptions& options = {});

}  // namespace kernex::mcp
