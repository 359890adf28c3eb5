// The MCP tool executor behind plugins/toolbox-mcp (and `kernex mcp list|call`): one sandboxed
// client per MCP server of the Context, started on first use and kept for later runs; every
// server's tools offered as "<server>__<tool>"; past `search_threshold` tools, names only plus
// `search_tools`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/mcp/client.hpp"
#include "kernex/sandbox/toolbox.hpp"
#include "kernex/toolbox.hpp"

namespace kernex::mcp {

// Grants for one server beyond the defaults (no network, only base env and its declared env, its
// own command). Skills supply these from their [permissions]; kernex.yaml from `servers:`.
struct ServerGrants {
  bool network = false;                  // connect to ToolboxConfig::network_ports (or tcp_ports)
  std::vector<std::uint16_t> tcp_ports;  // overrides network_ports when set
  std::vector<std::string> env_passthrough;
  std::vector<std::string> allowed_commands;
  std::vector<std::filesystem::path> read_only;
  std::vector<std::filesystem::path> read_write;
};

// The plugin config (all keys optional):
//   workspace: DIR                 read-write for every server, and its working directory (default:
//   the
//                                  kernel's working directory)
//   request_timeout_ms: 60000      per request;  startup_timeout_ms: 30000  start + initialize
//   max_line_bytes: 8388608        one message from a server;  inline_binary_cap: 16384
//   search_threshold: 40           more tools than this: names + search_tools (0: never)
//   network_ports: [443, 80]       what `network: true` opens
//   enforce: true                  false runs servers unsandboxed (diagnosis only; warns)
//   servers: {NAME: {network, tcp_ports, env_passthrough, allowed_commands, read_only, read_write}}
struct ToolboxConfig {
  std::filesystem::path workspace;
  ClientOptions client;
  std::size_t search_threshold = 40;
  std::vector<std::uint16_t> network_ports = {443, 80};
  bool enforce = true;
  std::map<std::string, ServerGrants> servers;

  // Unknown keys and wrong types are ErrorCode::Config errors naming the key.
  static Result<ToolboxConfig> from_json(const Json& config);
};

// "<server>__<tool>", with characters outside [A-Za-z0-9_-] replaced by '_' (provider tool-name
// rules).
std::string exposed_tool_name(const std::string& server, const std::string& tool);

class McpToolbox final : public ToolExecutor {
 public:
  explicit McpToolbox(ToolboxConfig config);
  ~McpToolbox() override;  // every server is shut down

  Result<std::vector<ToolSpec>> list_tools(const Context& context) override;
  Result<ToolResult> execute(const Context& context, const RunHandles&,
                             const ToolCall& call) override;

  // The client for `server`, created (not started) on first use; a changed declaration (command,
  // args, env, or the permissions it carries) replaces the old client. A host workspace in `where`
  // (a run's Context::workspace, and its overlay layers): a client of its own working there, never
  // shared with another workspace or layers; at most kMaxWorkspaceClients of those are kept (the
  // least recently used is dropped and its server shut down once its last call ended).
  std::shared_ptr<McpClient> client(const McpServer& server, const sandbox::CallWorkspace& where);
  // The same for a plain `workspace` (unset: the configured one).
  std::shared_ptr<McpClient> client(
      const McpServer& server,
      const std::optional<std::filesystem::path>& workspace = std::nullopt);
  // Shuts every server down now.
  void shutdown();

  static constexpr std::size_t kMaxWorkspaceClients = 64;

 private:
  struct Entry {
    std::shared_ptr<McpClient> client;
    std::uint64_t last_used = 0;
    bool per_workspace = false;
  };
  ServerSandbox sandbox_for(const McpServer& server, const sandbox::CallWorkspace& where) const;
  // mu_ held; what it drops goes to `retired`, released by the caller after unlocking.
  void evict_workspace_clients(std::vector<std::shared_ptr<McpClient>>& retired);

  ToolboxConfig config_;
  std::mutex mu_;
  // by server name, then CallWorkspace::key() when the run set a workspace
  std::map<std::string, Entry> clients_;
  std::uint64_t uses_ = 0;
  // exposed name -> (server, tool), from the latest list_tools
  std::map<std::string, std::pair<std::string, std::string>> routes_;
  std::vector<ToolSpec> full_specs_;
};

}  // namespace kernex::mcp
