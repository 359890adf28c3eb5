// The MCP server side over stdio: `kernex mcp serve` exposes tools through it. Transport-agnostic
// message handling (handle) plus a line loop (serve) that keeps reading while a request runs, so
// a client's notifications/cancelled stops the call it names.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <stop_token>
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
  // When set, used instead of call_tool: `stop` is requested when the client cancels the call
  // (notifications/cancelled naming its id), and the handler should return promptly then.
  std::function<Result<ToolResult>(const std::string& name, const Json& arguments,
                                   std::stop_token stop)>
      call_tool_stoppable;
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
  // `stop` reaches the tool of a tools/call.
  std::optional<Json> handle(const Json& message, std::stop_token stop = {});
  // One line of the transport (blank lines are ignored).
  std::optional<Json> handle_line(std::string_view line);
  // Reads lines from `in` until end of file, answering each on `out` (flushed per message). A
  // line over `max_line_bytes` is skipped without being buffered and answered with -32600.
  // Requests are handled one at a time, in order, on a worker thread while this one reads on: a
  // notifications/cancelled stops the request it names (running or queued), which then gets no
  // response (as the protocol asks). At end of input the requests read are answered first.
  void serve(std::istream& in, std::ostream& out,
             std::size_t max_line_bytes = jsonrpc::kMaxServerLineBytes);

  bool initialized() const { return initialized_; }

 private:
  Json call(const Json& id, const Json& params, std::stop_token stop);
  ServerInfo info_;
  ServerHandlers handlers_;
  bool initialized_ = false;
};

}  // namespace kernex::mcp
