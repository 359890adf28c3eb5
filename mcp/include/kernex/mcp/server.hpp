// The MCP server side over stdio: `kernex mcp serve` exposes tools through it. Transport-agnostic
// message handling (handle) plus a blocking line loop (serve).
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/tool.hpp"

namespace kernex::mcp {

struct ServerHandlers {
  // Every tool offered, in order.
  std::function<Result<std::vector<ToolSpec>>()> list_tools;
  // Runs a tool named in list_tools(). A tool failure is a ToolResult with is_error (sent as
  // isError: true); an Error is sent the same way, with its description as the text.
  std::function<Result<ToolResult>(const std::string& name, const Json& arguments)> call_tool;
};

struct ServerInfo {
  std::string name = "kernex";
  std::string version = "0.1.0";
  std::string instructions;
};

class StdioServer {
 public:
  StdioServer(ServerInfo info, ServerHandlers handlers);

  // One incoming message (already parsed); the response to send, or nothing for notifications and
  // responses. Errors: -32700 parse, -32600 invalid request, -32601 unknown method, -32602 bad
  // params (including an unknown tool name), -32603 when listing tools fails.
  std::optional<Json> handle(const Json& message);
  // One line of the transport (blank lines are ignored).
  std::optional<Json> handle_line(std::string_view line);
  // Reads lines from `in` until end of file, answering each on `out` (flushed per message). A
  // line over `max_line_bytes` is skipped without being buffered and answered with -32600.
  void serve(std::istream& in, std::ostream& out,
             std::size_t max_line_bytes = jsonrpc::kMaxServerLineBytes);

  bool initialized() const { return initialized_; }

 private:
  Json call(const Json& id, const Json& params);
  ServerInfo info_;
  ServerHandlers handlers_;
  bool initialized_ = false;
};

}  // namespace kernex::mcp
