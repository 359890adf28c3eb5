// `kernex mcp serve`'s request handling: the input is what a client writes to the server's stdin,
// run through the real line loop (StdioServer::serve) on in-memory streams, with two tools offered
// as the CLI offers them (kernex_run's schema, and a direct tool echoing its arguments). Checks,
// besides no crash: every line the server writes is a JSON-RPC message.
#include <sstream>
#include <stdexcept>

#include "fuzz.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/mcp/server.hpp"

namespace {

kernex::mcp::ServerHandlers handlers() {
  using namespace kernex;
  mcp::ServerHandlers h;
  h.list_tools = []() -> Result<std::vector<ToolSpec>> {
    ToolSpec run{"kernex_run",
                 "Run one agent turn",
                 Json{{"type", "object"},
                      {"properties", {{"message", {{"type", "string"}}}}},
                      {"required", {"message"}}},
                 {}};
    ToolSpec echo{"echo", "Echoes its arguments", Json::object(), {}};
    return std::vector<ToolSpec>{run, echo};
  };
  h.call_tool = [](const std::string& name, const Json& arguments) -> Result<ToolResult> {
    if (name == "kernex_run" &&
        !(arguments.contains("message") && arguments["message"].is_string()))
      return ToolResult{"", name, "kernex_run needs {\"message\": string}", true};
    if (arguments.contains("fail")) return fail(ErrorCode::Tool, "asked to fail");
    return ToolResult{"", name, arguments.dump(-1, ' ', false, Json::error_handler_t::replace),
                      false};
  };
  return h;
}

}  // namespace

KERNEX_FUZZ_TARGET(mcp_server) {
  kernex::mcp::ServerInfo info;
  info.instructions = "fuzz";
  kernex::mcp::StdioServer server(info, handlers());
  std::istringstream in{std::string(kernex::fuzz::text(data, size))};
  std::ostringstream out;
  // Odd-sized inputs run under a 4 KiB line cap, so lines over it (skipped, answered -32600) occur.
  const std::size_t cap = size % 2 ? 4096 : kernex::mcp::jsonrpc::kMaxServerLineBytes;
  server.serve(in, out, cap);
  std::istringstream replies(out.str());
  for (std::string line; std::getline(replies, line);) {
    auto parsed = kernex::mcp::jsonrpc::parse_line(line);
    if (!parsed ||
        kernex::mcp::jsonrpc::classify(*parsed).kind != kernex::mcp::jsonrpc::Kind::Response)
      throw std::logic_error("the server wrote something that is not a JSON-RPC response: " + line);
  }
  return 0;
}
