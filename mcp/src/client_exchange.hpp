// The client's side of the conversation with one MCP server, apart from the process it runs in:
// waiting for the answer to a request (answering the server's own requests and taking its
// notifications meanwhile), the initialize answer, and the pages of tools/list. client.cpp drives
// these over the sandboxed server's stdio; the fuzz harness (fuzz/mcp_client_messages.cpp) over
// bytes in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/mcp/client.hpp"

namespace kernex::mcp::detail {

struct ServerLink {
  std::string who;  // "MCP server 'NAME'", for messages
  // The next line the server wrote. Its error is final: the caller already made it the one to
  // report (a timeout, a closed stdout, a cancel).
  std::function<Result<std::string>()> read_line;
  std::function<Result<void>(const Json& message)> send;
  // The server is out of step (it wrote something that is not JSON-RPC): the Error to return,
  // after the caller stopped the server.
  std::function<Error(const std::string& what)> broken;
  std::function<void()> tools_changed;  // notifications/tools/list_changed
};

// Reads until the response to request `id` (`method`): its result, or ErrorCode::Tool for a
// JSON-RPC error answer. Pings are answered, other server requests refused, and responses to other
// ids ignored meanwhile.
Result<Json> await_response(const ServerLink& link, std::int64_t id, std::string_view method);

// The protocol version an initialize result settles on; ErrorCode::Tool saying what is wrong with
// the result when it names none or one kernex does not speak.
Result<std::string> negotiated_version(const Json& result);

// Every page of tools/list, each fetched through `request` (its params: the cursor after the first
// page). A server that repeats a cursor, sends more than 1000 pages or more than 64 MiB of tools
// (as JSON) is refused.
using ToolsRequest = std::function<Result<Json>(const std::optional<Json>& params)>;
Result<std::vector<McpTool>> list_all_tools(const ToolsRequest& request, const std::string& who);

}  // namespace kernex::mcp::detail
