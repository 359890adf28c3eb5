#include "kernex/mcp/toolbox.hpp"

#include <algorithm>
#include <set>

#include "kernex/log.hpp"
#include "kernex/mcp/tool_search.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace kernex::mcp {
namespace fs = std::filesystem;
namespace jf = kernex::json_fields;

namespace {

Result<void> only_keys(const Json& j, const std::set<std::string>& known,
                       const std::string& where) {
  for (const auto& [key, _] : j.items()) {
    if (known.contains(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return fail(ErrorCode::Config,
                "toolbox-mcp config: unknown key '" + where + key + "' (known: " + list + ")");
  }
  return {};
}

std::vector<fs::path> paths(const std::vector<std::string>& in) { return {in.begin(), in.end()}; }

Result<ServerGrants> grants_from_json(const std::string& name, const Json& j) {
  const std::string where = "servers." + name + ".";
  if (!j.is_object())
    return fail(ErrorCode::Config, "toolbox-mcp config: '" + where + "' must be a mapping");
  if (auto ok = only_keys(j,
                          {"network", "tcp_ports", "env_passthrough", "allowed_commands",
                           "read_only", "read_write"},
                          where);
      !ok) {
    return std::unexpected(ok.error());
  }
  ServerGrants g;
  std::vector<std::string> ro, rw;
  jf::defaulted(j, "network", g.network);
  jf::defaulted(j, "tcp_ports", g.tcp_ports);
  jf::defaulted(j, "env_passthrough", g.env_passthrough);
  jf::defaulted(j, "allowed_commands", g.allowed_commands);
  jf::defaulted(j, "read_only", ro);
  jf::defaulted(j, "read_write", rw);
  g.read_only = paths(ro);
  g.read_write = paths(rw);
  return g;
}

ToolResult error_result(const ToolCall& call, std::string text) {
  return ToolResult{call.id, call.name, std::move(text), true};
}

}  // namespace

Result<ToolboxConfig> ToolboxConfig::from_json(const Json& j) {
  ToolboxConfig c;
  if (j.is_null()) return c;
  if (!j.is_object()) return fail(ErrorCode::Config, "toolbox-mcp config must be a mapping");
  if (auto ok = only_keys(
          j,
          {"workspace", "request_timeout_ms", "startup_timeout_ms", "max_line_bytes",
           "inline_binary_cap", "search_threshold", "network_ports", "enforce", "servers"},
          "");
      !ok) {
    return std::unexpected(ok.error());
  }
  try {
    std::string workspace;
    std::uint64_t request_ms = static_cast<std::uint64_t>(c.client.request_timeout.count());
    std::uint64_t startup_ms = static_cast<std::uint64_t>(c.client.startup_timeout.count());
    jf::defaulted(j, "workspace", workspace);
    jf::defaulted(j, "request_timeout_ms", request_ms);
    jf::defaulted(j, "startup_timeout_ms", startup_ms);
    jf::defaulted(j, "max_line_bytes", c.client.max_line_bytes);
    jf::defaulted(j, "inline_binary_cap", c.client.render.inline_binary_cap);
    jf::defaulted(j, "search_threshold", c.search_threshold);
    jf::defaulted(j, "network_ports", c.network_ports);
    jf::defaulted(j, "enforce", c.enforce);
    if (request_ms == 0 || startup_ms == 0) {
      return fail(ErrorCode::Config, "toolbox-mcp config: timeouts must be positive");
    }
    if (c.client.max_line_bytes < 1024) {
      return fail(ErrorCode::Config, "toolbox-mcp config: 'max_line_bytes' must be at least 1024");
    }
    c.client.request_timeout = std::chrono::milliseconds(request_ms);
    c.client.startup_timeout = std::chrono::milliseconds(startup_ms);
    if (!workspace.empty()) c.workspace = workspace;
    if (auto s = j.find("servers"); s != j.end() && !s->is_null()) {
      if (!s->is_object())
        return fail(ErrorCode::Config, "toolbox-mcp config: 'servers' must be a mapping");
      for (const auto& [name, entry] : s->items()) {
        KERNEX_ASSIGN_OR_RETURN(auto g, grants_from_json(name, entry));
        c.servers[name] = std::move(g);
      }
    }
  } catch (const Json::exception& e) {
    return fail(ErrorCode::Config, std::string("toolbox-mcp config: ") + e.what());
  }
  if (c.workspace.empty()) {
    std::error_code ec;
    c.workspace = fs::current_path(ec);
  }
  return c;
}

std::string exposed_tool_name(const std::string& server, const std::string& tool) {
  std::string out = server + "__" + tool;
  for (char& ch : out) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    if (!ok) ch = '_';
  }
  return out;
}

McpToolbox::McpToolbox(ToolboxConfig config) : config_(std::move(config)) {}

McpToolbox::~McpToolbox() { shutdown(); }

void McpToolbox::shutdown() {
  std::map<std::string, Entry> clients;
  {
    std::lock_guard lock(mu_);
    clients.swap(clients_);
  }
  for (auto& [_, e] : clients) e.client->shutdown();
}

ServerSandbox McpToolbox::sandbox_for(const McpServer& server,
                                      const sandbox::CallWorkspace& where) const {
  ServerSandbox sb;
  sb.workspace = where.host ? where.dir : config_.workspace;
  sb.workspace_layers = where.layers;
  sb.enforce = config_.enforce;
  // What the declaring skill's permissions grant, then what the operator's config adds.
  sb.env_passthrough = server.env_passthrough;
  sb.allowed_commands = server.allowed_commands;
  bool network = server.network;
  auto merge = [](auto& into, const auto& from) {
    for (const auto& x : from) {
      if (std::find(into.begin(), into.end(), x) == into.end()) into.push_back(x);
    }
  };
  if (auto it = config_.servers.find(server.name); it != config_.servers.end()) {
    const ServerGrants& g = it->second;
    merge(sb.env_passthrough, g.env_passthrough);
    merge(sb.allowed_commands, g.allowed_commands);
    sb.read_only = g.read_only;
    sb.read_write = g.read_write;
    sb.tcp_ports = g.tcp_ports;
    network = network || g.network;
  }
  if (sb.tcp_ports.empty() && network) sb.tcp_ports = config_.network_ports;
  return sb;
}

std::shared_ptr<McpClient> McpToolbox::client(const McpServer& server,
                                              const std::optional<fs::path>& workspace) {
  return client(server, workspace ? sandbox::CallWorkspace{*workspace, true, std::nullopt}
                                  : sandbox::CallWorkspace{});
}

std::shared_ptr<McpClient> McpToolbox::client(const McpServer& server,
                                              const sandbox::CallWorkspace& where) {
  const std::string key = server.name + where.key();
  // Dropped clients shut their servers down (up to a grace period) when the last reference goes:
  // after the lock is released, so other runs never wait on it.
  std::vector<std::shared_ptr<McpClient>> retired;
  std::lock_guard lock(mu_);
  auto it = clients_.find(key);
  if (it != clients_.end()) {
    const McpServer& have = it->second.client->server();
    if (have.command == server.command && have.args == server.args && have.env == server.env &&
        have.network == server.network && have.env_passthrough == server.env_passthrough &&
        have.allowed_commands == server.allowed_commands) {
      it->second.last_used = ++uses_;
      return it->second.client;
    }
    retired.push_back(std::move(it->second.client));
    clients_.erase(it);  // redeclared: the old one shuts down when its last user lets go
  }
  auto made = std::make_shared<McpClient>(server, sandbox_for(server, where), config_.client);
  clients_.emplace(key, Entry{made, ++uses_, where.host});
  if (where.host) evict_workspace_clients(retired);
  return made;
}

void McpToolbox::evict_workspace_clients(std::vector<std::shared_ptr<McpClient>>& retired) {
  for (;;) {
    auto oldest = clients_.end();
    std::size_t count = 0;
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      if (!it->second.per_workspace) continue;
      ++count;
      if (oldest == clients_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
    }
    if (count <= kMaxWorkspaceClients) return;
    retired.push_back(std::move(oldest->second.client));
    clients_.erase(oldest);  // its server shuts down when its last user lets go
  }
}

Result<std::vector<ToolSpec>> McpToolbox::list_tools(const Context& context) {
  std::vector<ToolSpec> specs;
  std::map<std::string, std::pair<std::string, std::string>> routes;
  sandbox::CallWorkspace where;
  if (!context.mcp_servers.empty()) {  // a run without servers needs no workspace (nor makes one)
    auto found = sandbox::call_workspace(sandbox::CallScope::of(context), config_.workspace);
    if (!found) {
      log(LogLevel::Warn, "MCP servers offer no tools this run: " + found.error().message);
      return specs;
    }
    where = std::move(*found);
  }
  for (const auto& server : context.mcp_servers) {
    auto tools = client(server, where)->list_tools(context.stop);
    if (!tools) {
      log(LogLevel::Warn,
          "MCP server '" + server.name + "' offers no tools this run: " + tools.error().describe());
      continue;
    }
    for (const auto& t : *tools) {
      ToolSpec spec;
      spec.name = exposed_tool_name(server.name, t.name);
      if (routes.contains(spec.name)) {
        log(LogLevel::Warn, "MCP tool '" + spec.name + "' is offered twice; keeping the first");
        continue;
      }
      spec.description = t.description.empty() ? t.title : t.description;
      spec.parameters = t.input_schema;
      spec.search_hints = {server.name};
      routes.emplace(spec.name, std::pair{server.name, t.name});
      specs.push_back(std::move(spec));
    }
  }
  {
    std::lock_guard lock(mu_);
    routes_ = routes;
    full_specs_ = specs;
  }
  if (config_.search_threshold == 0 || specs.size() <= config_.search_threshold) return specs;
  std::vector<ToolSpec> offered;
  offered.reserve(specs.size() + 1);
  offered.push_back(search_tools_spec());
  for (const auto& s : specs) offered.push_back(deferred_spec(s));
  return offered;
}

Result<ToolResult> McpToolbox::execute(const Context& context, const RunHandles&,
                                       const ToolCall& call) {
  if (call.name == kSearchToolsName) {
    std::vector<ToolSpec> specs;
    {
      std::lock_guard lock(mu_);
      specs = full_specs_;
    }
    auto found = run_search_tools(specs, call.arguments);
    if (!found) return error_result(call, found.error().message);
    return ToolResult{call.id, call.name,
                      found->dump(2, ' ', false, Json::error_handler_t::replace), false};
  }
  if (context.stop.stop_requested()) return error_result(call, sandbox::cancelled_text(call.name));
  auto where = sandbox::call_workspace(sandbox::CallScope::of(context), config_.workspace);
  if (!where) return error_result(call, "MCP error: " + where.error().message);
  std::optional<std::pair<std::string, std::string>> route;
  {
    std::lock_guard lock(mu_);
    if (auto it = routes_.find(call.name); it != routes_.end()) route = it->second;
  }
  if (!route) {
    // Listed for another run (routes_ holds the latest listing only): look through this run's
    // servers.
    for (const auto& s : context.mcp_servers) {
      auto tools = client(s, *where)->list_tools(context.stop);
      if (!tools) continue;
      for (const auto& t : *tools) {
        if (exposed_tool_name(s.name, t.name) == call.name) route = std::pair{s.name, t.name};
      }
      if (route) break;
    }
  }
  if (!route) return error_result(call, "Unknown MCP tool: " + call.name);
  const McpServer* server = nullptr;
  for (const auto& s : context.mcp_servers) {
    if (s.name == route->first) server = &s;
  }
  if (server == nullptr)
    return error_result(call, "MCP server '" + route->first + "' is not part of this run");
  auto result = client(*server, *where)->call_tool(route->second, call.arguments, context.stop);
  if (!result && result.error().code == ErrorCode::Cancelled) {
    return error_result(call, sandbox::cancelled_text("MCP tool " + call.name) + " (" +
                                  result.error().message + ")");
  }
  if (!result) return error_result(call, "MCP error: " + result.error().describe());
  ToolResult out{call.id, call.name, std::move(result->rendered.text), result->rendered.is_error};
  out.structured = std::move(result->rendered.structured);
  return out;
}

}  // namespace kernex::mcp
