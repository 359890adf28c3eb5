// An MCP client over stdio for one server, run inside the sandbox. The server starts on first use,
// is reused for later calls, and is restarted on the next call after it died, hung, wrote something
// that is not JSON-RPC or broke the line cap: every such failure is an error for that call only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/mcp/content.hpp"
#include "kernex/tool.hpp"

namespace kernex::mcp {

// What the server's sandbox grants beyond the defaults (system libraries, a private TMPDIR).
struct ServerSandbox {
  // Read-write and the server's working directory. Empty: the policy's private TMPDIR.
  std::filesystem::path workspace;
  // Overlay mode (Context::workspace_layers): the workspace is seen through an overlay whose layers
  // lie in this directory (sandbox::WorkspaceOverlay::in); writes land there, never in it.
  std::optional<std::filesystem::path> workspace_layers;
  std::vector<std::filesystem::path> read_only;
  std::vector<std::filesystem::path> read_write;
  // Names copied from the kernel's environment (besides HOME LANG TZ TERM USER LOGNAME LC_*).
  // The server's declared `env` values are always set; nothing else of the environment reaches it.
  std::vector<std::string> env_passthrough;
  // Programs the server may start besides its own command and the interpreter its `#!` line
  // names through env (`#!/usr/bin/env node` allows `node`), which are always allowed.
  std::vector<std::string> allowed_commands;
  // TCP ports the server may connect to. Empty: no network at all.
  std::vector<std::uint16_t> tcp_ports;
  bool enforce = true;  // false only for diagnosis; logs a warning on every start
};

struct ClientOptions {
  std::chrono::milliseconds request_timeout{60'000};  // per request, tools/call included
  std::chrono::milliseconds startup_timeout{30'000};  // start + initialize
  std::size_t max_line_bytes = 8 * 1024 * 1024;       // one JSON-RPC message from the server
  RenderOptions render;
};

struct McpTool {
  std::string name;
  std::string title;
  std::string description;
  Json input_schema = Json{{"type", "object"}};
  Json raw;  // the tools/list entry as sent
};

struct CallResult {
  RenderedResult rendered;
  Json raw;  // the CallToolResult as sent
};

class McpClient {
 public:
  McpClient(McpServer server, ServerSandbox sandbox, ClientOptions options = {});
  ~McpClient();  // shutdown()
  McpClient(const McpClient&) = delete;
  McpClient& operator=(const McpClient&) = delete;

  // Starts the server (and the handshake) if it is not running. Errors: ErrorCode::Sandbox when the
  // policy or the start is refused, ErrorCode::Tool for a failed handshake.
  Result<void> connect();
  // Every page of tools/list; cached until the server says the list changed or restarts.
  // `stop` fired while waiting on the server (here and in call_tool): ErrorCode::Cancelled, and
  // the server's process group is killed (it restarts on the next call).
  Result<std::vector<McpTool>> list_tools(std::stop_token stop = {});
  // tools/call. A JSON-RPC error answer or a transport failure is an Error; a tool that failed
  // (isError) is a CallResult with rendered.is_error.
  Result<CallResult> call_tool(const std::string& name, const Json& arguments,
                               std::stop_token stop = {});
  // Closes stdin, waits up to `grace` for the server to exit, then kills its process group.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  bool running() const;
  const McpServer& server() const;
  std::string protocol_version() const;  // negotiated; empty before the first handshake
  Json server_info() const;
  int starts() const;  // how many times the server was started (restarts + 1)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::mcp
